/**
 * Requests that are valid enough for Node's HTTP parser but not for
 * connect-node (no authority to make a URL of) must get an answer, never
 * end the process: before the guard, each of these was an uncaught throw in
 * the server's 'request' listener, and no token was needed to send one.
 */
import * as net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { grpcHealthCheck } from "../transport/clients.js";
import { startTestServers, type TestServers } from "../transport/harness.js";
import { scriptedCore } from "../transport/scripted-core.js";

const GET_PATH = "/windlass.memory.v1.MemoryService/Get";

/** Sends raw bytes and resolves with everything the server sent until it closed. */
function rawExchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.end(request));
    const chunks: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("latin1")));
    socket.setTimeout(10_000, () => socket.destroy(new Error("no answer in 10 s")));
  });
}

let servers: TestServers | undefined;
afterEach(async () => {
  await servers?.shutdown(0);
  servers = undefined;
});

describe("a request connect-node cannot make a URL of", () => {
  it.each([
    {
      name: "HTTP/1.0 without a Host header",
      head: `POST ${GET_PATH} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`,
    },
    {
      name: "HTTP/1.1 with an unparsable Host",
      head: `POST ${GET_PATH} HTTP/1.1\r\nHost: [\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
    },
  ])("$name gets 400, and the server keeps serving", async ({ head }) => {
    servers = await startTestServers(scriptedCore());
    const answer = await rawExchange(servers.httpPort, head);
    expect(answer).toMatch(/^HTTP\/1\.[01] 400 /);
    expect(await grpcHealthCheck(servers.grpcAddress, "")).toBe("SERVING");
    // And the HTTP port still answers a well-formed call.
    const ok = await fetch(`${servers.httpUrl}${GET_PATH}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(ok.status).toBe(200);
  });
});
