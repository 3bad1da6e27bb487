import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { credentials, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { type ConnectClientOptions, createConnectClient, createGrpcClient } from "./clients.js";
import { startTestServers } from "./harness.js";
import { scriptedCore } from "./scripted-core.js";

/** PEM files of a throwaway CA, a server certificate for 127.0.0.1 and a client certificate. */
interface Pki {
  readonly ca: Buffer;
  readonly serverCert: Buffer;
  readonly serverKey: Buffer;
  readonly clientCert: Buffer;
  readonly clientKey: Buffer;
}

let dir = "";
let pki: Pki;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "windlass-tls-"));
  const openssl = (...args: string[]) => promisify(execFile)("openssl", args, { cwd: dir });
  const newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  await openssl(
    "req",
    "-x509",
    ...newKey,
    "-keyout",
    "ca.key",
    "-out",
    "ca.crt",
    "-subj",
    "/CN=test-ca",
    "-days",
    "1",
  );
  for (const [name, extension] of [
    ["server", "subjectAltName=IP:127.0.0.1,DNS:server.test\nextendedKeyUsage=serverAuth\n"],
    ["client", "extendedKeyUsage=clientAuth\n"],
  ] as const) {
    await writeFile(join(dir, `${name}.ext`), extension);
    await openssl(
      "req",
      ...newKey,
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.csr`,
      "-subj",
      `/CN=${name}`,
    );
    await openssl(
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.crt",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "1",
      "-extfile",
      `${name}.ext`,
      "-out",
      `${name}.crt`,
    );
  }
  const read = (file: string) => readFile(join(dir, file));
  pki = {
    ca: await read("ca.crt"),
    serverCert: await read("server.crt"),
    serverKey: await read("server.key"),
    clientCert: await read("client.crt"),
    clientKey: await read("client.key"),
  };
});

afterAll(async () => {
  if (dir !== "") await rm(dir, { recursive: true, force: true });
});

async function serve(requireClientCert: boolean) {
  const servers = await startTestServers(scriptedCore(), {
    tls: {
      cert: pki.serverCert,
      key: pki.serverKey,
      ...(requireClientCert ? { clientCa: pki.ca } : {}),
    },
  });
  onTestFinished(() => servers.shutdown(1_000));
  return servers;
}

function connectClient(baseUrl: string, options: ConnectClientOptions) {
  const handle = createConnectClient(baseUrl, options);
  onTestFinished(() => handle.close());
  return handle.client;
}

function grpcClient(address: string, withClientCert: boolean) {
  const client = createGrpcClient(address, {
    credentials: withClientCert
      ? credentials.createSsl(pki.ca, pki.clientKey, pki.clientCert)
      : credentials.createSsl(pki.ca),
    // grpc-js would send the IP as TLS server name, which RFC 6066 forbids
    // (and Node warns about); a DNS name in the certificate avoids that.
    channelOptions: { "grpc.ssl_target_name_override": "server.test" },
  });
  onTestFinished(() => client.close());
  return client;
}

describe("TLS", () => {
  it("serves gRPC and Connect (HTTP/2 and HTTP/1.1 by ALPN) over TLS", async () => {
    const servers = await serve(false);
    expect(servers.httpUrl).toMatch(/^https:/);
    expect((await grpcClient(servers.grpcAddress, false).listThreads({})).threadIds).toEqual([
      "a",
      "b",
    ]);
    for (const httpVersion of ["2", "1.1"] as const) {
      const client = connectClient(servers.httpUrl, { httpVersion, ca: pki.ca });
      expect((await client.listThreads({})).threadIds).toEqual(["a", "b"]);
    }
    const grpcOverConnect = connectClient(servers.httpUrl, { protocol: "grpc", ca: pki.ca });
    expect((await grpcOverConnect.listThreads({})).threadIds).toEqual(["a", "b"]);

    // A cleartext client gets nowhere.
    const cleartext = createGrpcClient(servers.grpcAddress);
    onTestFinished(() => cleartext.close());
    await expect(cleartext.listThreads({}, { deadline: Date.now() + 2_000 })).rejects.toMatchObject(
      { code: expect.any(Number) },
    );
  });

  it("requires a client certificate signed by the configured CA", async () => {
    const servers = await serve(true);
    await expect(
      grpcClient(servers.grpcAddress, false).listThreads({}, { deadline: Date.now() + 2_000 }),
    ).rejects.toMatchObject({ code: status.UNAVAILABLE });
    expect((await grpcClient(servers.grpcAddress, true).listThreads({})).threadIds).toHaveLength(2);

    const anonymous = connectClient(servers.httpUrl, { ca: pki.ca });
    const err = await anonymous.listThreads({}).then(
      () => expect.unreachable("a client without a certificate got through"),
      (e: unknown) => ConnectError.from(e),
    );
    expect([Code.Unavailable, Code.Internal, Code.Unknown]).toContain(err.code);
    const known = connectClient(servers.httpUrl, {
      ca: pki.ca,
      clientCert: { cert: pki.clientCert, key: pki.clientKey },
    });
    expect((await known.listThreads({})).threadIds).toHaveLength(2);
  });
});
