import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";

/**
 * A self-signed P-256 certificate for 127.0.0.1, valid one day, written by
 * openssl into `dir` as cert.pem and key.pem; resolves with their paths.
 */
export async function writeSelfSignedCert(dir: string): Promise<{ cert: string; key: string }> {
  await promisify(execFile)(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-keyout",
      "key.pem",
      "-out",
      "cert.pem",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
      "-days",
      "1",
    ],
    { cwd: dir },
  );
  return { cert: join(dir, "cert.pem"), key: join(dir, "key.pem") };
}
