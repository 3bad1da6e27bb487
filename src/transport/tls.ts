/**
 * TLS for both servers. Without it the servers speak cleartext (HTTP/2 with
 * prior knowledge for gRPC; HTTP/1.1 and h2c for Connect), which is what runs
 * behind a mesh sidecar or on localhost.
 */
export interface TlsOptions {
  /** PEM certificate chain of the server. */
  readonly cert: Buffer | string;
  /** PEM private key of `cert`. */
  readonly key: Buffer | string;
  /** PEM CA bundle. When set, clients must present a certificate it signed. */
  readonly clientCa?: Buffer | string;
}

export function pemBuffer(pem: Buffer | string): Buffer {
  return typeof pem === "string" ? Buffer.from(pem, "utf8") : pem;
}
