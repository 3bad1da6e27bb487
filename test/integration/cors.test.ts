import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BrowserContext, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { type AppHarness, startAppHarness } from "./app-harness.js";

/**
 * The Connect port from a browser's side: CORS preflights and cross-origin
 * calls (Connect JSON, Connect binary, gRPC-Web) from a page on another
 * origin, in a real headless Chromium; and the answers a person gets for a
 * wrong Content-Type or an unknown path.
 */
const CHROMIUM = "/usr/bin/chromium";
const SERVICE = "/windlass.memory.v1.MemoryService";

/** Serves one empty page: its origin is what the browser sends as Origin. */
async function startPageServer(): Promise<{ server: Server; origin: string }> {
  const server = createServer((_req, res) => {
    res.setHeader("content-type", "text/html");
    res.end("<!doctype html><title>client</title>");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A plain HTTP/1.1 request with exactly the headers given (fetch would add or refuse some). */
function raw(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string>,
  body = "",
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, method, path, headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        text += d;
      });
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }),
      );
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("Connect port for browsers and people", () => {
  let page: Awaited<ReturnType<typeof startPageServer>>;
  let otherPage: Awaited<ReturnType<typeof startPageServer>>;
  let h: AppHarness;
  let base: string;
  beforeAll(async () => {
    page = await startPageServer();
    otherPage = await startPageServer();
    h = await startAppHarness(["--cors-origin", `http://app.test,${page.origin}`]);
    base = `http://127.0.0.1:${h.app.httpPort}`;
  });
  afterAll(async () => {
    await h.close();
    page.server.close();
    otherPage.server.close();
  });

  it("reads --cors-origin repeated and comma-separated, and refuses what is no origin", () => {
    const c = loadConfig(
      ["--cors-origin", "https://a.example", "--cors-origin", "http://b.example:8080, *"],
      {},
    );
    expect(c.corsOrigins).toEqual(["https://a.example", "http://b.example:8080", "*"]);
    expect(loadConfig([], {}).corsOrigins).toEqual([]);
    expect(loadConfig([], { WINDLASS_CORS_ORIGIN: "https://c.example" }).corsOrigins).toEqual([
      "https://c.example",
    ]);
    expect(() => loadConfig(["--cors-origin", "https://a.example/app"], {})).toThrow(
      /--cors-origin .*"https:\/\/a\.example\/app" is not an origin/,
    );
  });

  it("answers a browser's preflight for a configured origin with connect's CORS lists", async () => {
    const r = await raw(h.app.httpPort, "OPTIONS", `${SERVICE}/Add`, {
      Origin: page.origin,
      "Access-Control-Request-Method": "POST",
      "Access-Control-Request-Headers": "authorization,connect-protocol-version,content-type",
    });
    expect(r.status).toBe(204);
    expect(r.headers["access-control-allow-origin"]).toBe(page.origin);
    expect(r.headers.vary).toBe("Origin");
    const allowed = String(r.headers["access-control-allow-headers"]).toLowerCase().split(", ");
    for (const name of [
      "content-type",
      "connect-protocol-version",
      "connect-timeout-ms",
      "x-grpc-web",
      "x-user-agent",
      "grpc-timeout",
      "authorization",
    ]) {
      expect(allowed).toContain(name);
    }
    expect(r.headers["access-control-allow-methods"]).toBe("POST, GET");
  });

  it("gives no CORS headers to an origin not configured, and says how to allow it", async () => {
    const r = await raw(h.app.httpPort, "OPTIONS", `${SERVICE}/Add`, {
      Origin: otherPage.origin,
      "Access-Control-Request-Method": "POST",
    });
    expect(r.status).toBe(403);
    expect(r.headers["access-control-allow-origin"]).toBeUndefined();
    expect(JSON.parse(r.body).message).toContain(`--cors-origin ${otherPage.origin}`);
    const call = await raw(
      h.app.httpPort,
      "POST",
      `${SERVICE}/ListThreads`,
      { Origin: otherPage.origin, "Content-Type": "application/json" },
      "{}",
    );
    expect(call.status).toBe(200);
    expect(call.headers["access-control-allow-origin"]).toBeUndefined();
  });

  it("answers a missing or wrong Content-Type with 415 and the types to send", async () => {
    const none = await raw(h.app.httpPort, "POST", `${SERVICE}/Add`, {}, "{}");
    expect(none.status).toBe(415);
    expect(none.headers["content-type"]).toBe("application/json");
    const noneBody = JSON.parse(none.body) as { code: string; message: string };
    expect(noneBody.message).toMatch(/^no Content-Type: send .*\/Add with application\/json/);
    expect(noneBody.message).toContain("application/grpc-web+proto");

    const text = await raw(
      h.app.httpPort,
      "POST",
      `${SERVICE}/Watch`,
      { "Content-Type": "text/plain" },
      "{}",
    );
    expect(text.status).toBe(415);
    // Watch streams: the Connect types it takes are the streaming ones.
    expect(JSON.parse(text.body).message).toMatch(
      /^Content-Type text\/plain is not supported: send .*\/Watch with application\/connect\+json/,
    );
    // Nothing was stored by either.
    const list = await raw(
      h.app.httpPort,
      "POST",
      `${SERVICE}/ListThreads`,
      { "Content-Type": "application/json" },
      "{}",
    );
    expect(JSON.parse(list.body)).toEqual({});
  });

  it("answers an unknown path with 404 naming the RPC paths served", async () => {
    const r = await raw(h.app.httpPort, "POST", "/windlass.memory.v1.MemoryService/Ad", {
      "Content-Type": "application/json",
    });
    expect(r.status).toBe(404);
    const body = JSON.parse(r.body) as { code: string; message: string };
    expect(body.code).toBe("unimplemented");
    expect(body.message).toContain("no RPC at POST /windlass.memory.v1.MemoryService/Ad");
    expect(body.message).toContain(`${SERVICE}/Add`);
    expect(body.message).toContain(`${SERVICE}/Watch`);
  });

  describe("from a page in headless Chromium", () => {
    let browser: BrowserContext;
    let profile: string;
    beforeAll(async () => {
      // .ci/run installs Debian's chromium; a machine without it fails here, visibly.
      expect(existsSync(CHROMIUM), `${CHROMIUM} (apt-get install chromium)`).toBe(true);
      profile = mkdtempSync(join(tmpdir(), "windlass-chromium-"));
      browser = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        headless: true,
        args: [
          "--no-sandbox",
          "--disable-gpu",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--no-first-run",
        ],
      });
    });
    afterAll(async () => {
      await browser?.close();
      if (profile !== undefined) rmSync(profile, { recursive: true, force: true });
    });

    it("calls over Connect JSON, Connect binary and gRPC-Web from an allowed origin", async () => {
      const tab = await browser.newPage();
      await tab.goto(page.origin);
      const result = await tab.evaluate(
        async ({ base, service }) => {
          // Connect JSON: application/json makes this a preflighted request.
          const add = await fetch(`${base}${service}/Add`, {
            method: "POST",
            headers: { "Content-Type": "application/json", "Connect-Protocol-Version": "1" },
            body: JSON.stringify({
              threadId: "b",
              messages: [{ role: "ROLE_USER", content: "from the browser" }],
            }),
          });
          const added = (await add.json()) as { lastSeq?: string };
          // Connect binary: an empty ListThreadsRequest.
          const list = await fetch(`${base}${service}/ListThreads`, {
            method: "POST",
            headers: { "Content-Type": "application/proto", "Connect-Protocol-Version": "1" },
            body: new Uint8Array(0),
          });
          const listed = Array.from(new Uint8Array(await list.arrayBuffer()));
          // gRPC-Web: one frame holding GetRequest{thread_id: "b"} (field 1, length 1, "b").
          const get = await fetch(`${base}${service}/Get`, {
            method: "POST",
            headers: {
              "Content-Type": "application/grpc-web+proto",
              "X-Grpc-Web": "1",
              "X-User-Agent": "windlass-test",
            },
            body: new Uint8Array([0, 0, 0, 0, 3, 0x0a, 0x01, 0x62]),
          });
          const got = new TextDecoder().decode(await get.arrayBuffer());
          return {
            addStatus: add.status,
            lastSeq: added.lastSeq,
            listStatus: list.status,
            listType: list.headers.get("content-type"),
            listed,
            getStatus: get.status,
            got,
          };
        },
        { base, service: SERVICE },
      );
      expect(result.addStatus).toBe(200);
      expect(result.lastSeq).toBe("1");
      expect(result.listStatus).toBe(200);
      expect(result.listType).toBe("application/proto");
      // ListThreadsResponse{thread_ids: ["b"]}.
      expect(result.listed).toEqual([0x0a, 0x01, 0x62]);
      expect(result.getStatus).toBe(200);
      expect(result.got).toContain("from the browser");
      expect(result.got).toMatch(/grpc-status: ?0/);
    });

    it("is blocked by the browser from an origin not configured", async () => {
      const tab = await browser.newPage();
      await tab.goto(otherPage.origin);
      const outcome = await tab.evaluate(
        async ({ base, service }) => {
          try {
            await fetch(`${base}${service}/ListThreads`, {
              method: "POST",
              headers: { "Content-Type": "application/json" },
              body: "{}",
            });
            return "answered";
          } catch (err) {
            return `blocked: ${(err as Error).name}`;
          }
        },
        { base, service: SERVICE },
      );
      expect(outcome).toBe("blocked: TypeError");
    });
  });
});
