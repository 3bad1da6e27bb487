import { createHash, timingSafeEqual } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import type { ServerMetrics } from "../metrics.js";
import type { HttpRequestHandler } from "./cleartext-http-listener.js";

/**
 * GET /metrics, and who may read it. Every tenant's traffic shows in the
 * counters, so:
 *
 * - with a token (WINDLASS_METRICS_TOKEN), a request needs
 *   `authorization: Bearer TOKEN`, compared in constant time;
 * - without one, it is served only where that leaks nothing beyond the
 *   machine or the operator's choice: on its own `--metrics-port`, or on the
 *   HTTP port while that listens on a loopback address (the default);
 * - otherwise (HTTP port on a public address, no token) it answers 403.
 */
export interface MetricsAccess {
  readonly metrics: ServerMetrics;
  /** Bearer token required; undefined: none. */
  readonly token?: string | undefined;
  /** Without a token: serve, or refuse with 403. */
  readonly openWithoutToken: boolean;
}

const BEARER = /^bearer[ \t]+([^ \t]+)[ \t]*$/i;

export function metricsEndpoint(access: MetricsAccess): HttpRequestHandler {
  const expected = access.token === undefined ? undefined : sha256(access.token);
  return (req, res) => {
    const reply = (status: number, body: string, headers: Record<string, string> = {}): void => {
      // setHeader + end rather than writeHead: on a union of the HTTP/1.1 and
      // HTTP/2 response types, @types/node 24 cannot pick a writeHead overload.
      res.statusCode = status;
      for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
      res.end(body);
    };
    if (req.method !== "GET") {
      reply(405, "only GET\n", { allow: "GET" });
      return;
    }
    if (expected !== undefined) {
      const header = req.headers.authorization;
      const presented = typeof header === "string" ? BEARER.exec(header)?.[1] : undefined;
      if (presented === undefined || !timingSafeEqual(sha256(presented), expected)) {
        reply(401, "metrics need authorization: Bearer <WINDLASS_METRICS_TOKEN>\n", {
          "www-authenticate": 'Bearer realm="metrics"',
        });
        return;
      }
    } else if (!access.openWithoutToken) {
      reply(
        403,
        "metrics are off on a public address: set WINDLASS_METRICS_TOKEN or --metrics-port\n",
      );
      return;
    }
    access.metrics.render().then(
      (text) => reply(200, text, { "content-type": access.metrics.contentType }),
      () => reply(500, "rendering metrics failed\n"),
    );
  };
}

/** Whether an address to listen on is reachable only from this machine. */
export function isLoopbackHost(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** A listener that serves only GET /metrics (--metrics-port). */
export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

export async function startMetricsServer(
  endpoint: HttpRequestHandler,
  host: string,
  port: number,
  maxConnections: number,
): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    if (req.url === "/metrics") {
      endpoint(req, res);
      return;
    }
    res.statusCode = 404;
    res.end("not found\n");
  });
  server.maxConnections = maxConnections;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}
