import type * as http from "node:http";
import type * as http2 from "node:http2";
import { cors } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";

/**
 * What the Connect port does before connect-node sees a request: the
 * Kubernetes-style probes GET /healthz and GET /readyz, CORS for the
 * configured browser origins, and answers that say what to send instead of
 * connect-node's empty 415 and 404 bodies.
 */

type Req = http.IncomingMessage | http2.Http2ServerRequest;
/** What is used of a response: both Node response types, and connect-node's own, have it. */
interface Res {
  statusCode: number;
  setHeader(name: string, value: string): unknown;
  end(body: string): unknown;
}

// Bearer tokens travel in Authorization (transport/auth.ts); connect's list
// covers the protocols' own headers only.
const ALLOWED_HEADERS = [...cors.allowedHeaders, "Authorization"].join(", ");
const ALLOWED_METHODS = cors.allowedMethods.join(", ");
const EXPOSED_HEADERS = cors.exposedHeaders.join(", ");
// Browsers cap this (Chromium at 2 hours); it saves a preflight per call.
const PREFLIGHT_MAX_AGE_S = "7200";

const UNARY_TYPES =
  "application/json or application/proto (Connect), " +
  "application/grpc-web+proto or application/grpc-web+json (gRPC-Web), " +
  "application/grpc (gRPC over HTTP/2)";
const STREAM_TYPES =
  "application/connect+json or application/connect+proto (Connect streaming), " +
  "application/grpc-web+proto or application/grpc-web+json (gRPC-Web), " +
  "application/grpc (gRPC over HTTP/2)";

/** A probe's answer: 200 when `ok`, else 503 with `reason`. */
export interface ProbeStatus {
  readonly ok: boolean;
  /** Why not, when not ok: short, with no secret or URL (it goes to anyone who asks). */
  readonly reason?: string;
}

/**
 * What the probes report. Both are read per request, so they must be cheap:
 * state kept by someone else (the store health monitor, shutdown), never a
 * store call.
 */
export interface HttpProbes {
  /** GET /healthz: the process serves (not ok once shutdown has started). */
  liveness(): ProbeStatus;
  /** GET /readyz: the process serves and its store answers. */
  readiness(): ProbeStatus;
}

export interface HttpFront {
  /**
   * Answers the probes, handles CORS preflights, adds CORS headers for
   * allowed origins, and answers requests connect-node would refuse with an
   * empty body. Returns true when it has answered; false: pass the request on.
   */
  handle(req: Req, res: Res): boolean;
  /** connect-node's fallback for paths that are no RPC: a 404 naming the paths served. */
  notFound(req: Req, res: Res): void;
}

/**
 * `corsOrigins`: exact origins (`https://app.example.com`) allowed to call
 * from a browser, or `*` for any; empty: no CORS headers at all.
 * `handlers`: the RPCs of connect-node's router, for their paths and content types.
 * `probes`: what GET /healthz and /readyz report; absent: those paths are not served.
 */
export function createHttpFront(
  corsOrigins: readonly string[],
  handlers: readonly UniversalHandler[],
  probes?: HttpProbes,
): HttpFront {
  const anyOrigin = corsOrigins.includes("*");
  const origins = new Set(corsOrigins);
  const byPath = new Map(handlers.map((h) => [h.requestPath, h]));
  const paths = handlers.map((h) => h.requestPath).join(", ");

  return {
    handle(req, res) {
      const path = (req.url ?? "").split("?", 1)[0] ?? "";
      // Before auth, rate limits and CORS: kubelets and load balancers send no token.
      if (probes !== undefined && (path === "/healthz" || path === "/readyz")) {
        answerProbe(req, res, path === "/healthz" ? probes.liveness() : probes.readiness());
        return true;
      }
      const origin = req.headers.origin;
      const allowed = origin !== undefined && (anyOrigin || origins.has(origin));
      if (allowed) {
        res.setHeader("access-control-allow-origin", origin);
        res.setHeader("vary", "Origin");
        res.setHeader("access-control-expose-headers", EXPOSED_HEADERS);
      }
      if (req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined) {
        if (!allowed) {
          reply(
            res,
            403,
            "permission_denied",
            origin === undefined
              ? "CORS preflight without an Origin header"
              : `origin ${origin} may not call this server from a browser: start it with --cors-origin ${origin}`,
          );
          return true;
        }
        res.statusCode = 204;
        res.setHeader("access-control-allow-methods", ALLOWED_METHODS);
        res.setHeader("access-control-allow-headers", ALLOWED_HEADERS);
        res.setHeader("access-control-max-age", PREFLIGHT_MAX_AGE_S);
        res.end("");
        return true;
      }
      const handler = byPath.get(path);
      if (handler === undefined || !handler.allowedMethods.includes(req.method ?? "")) return false;
      const contentType = req.headers["content-type"] ?? "";
      if (handler.supportedContentType(contentType)) return false;
      const accepted = handler.method.methodKind === "unary" ? UNARY_TYPES : STREAM_TYPES;
      reply(
        res,
        415,
        "invalid_argument",
        `${contentType === "" ? "no Content-Type" : `Content-Type ${contentType} is not supported`}: ` +
          `send ${path} with ${accepted}`,
      );
      return true;
    },
    notFound(req, res) {
      reply(
        res,
        404,
        "unimplemented",
        `no RPC at ${req.method ?? "?"} ${req.url ?? ""}: this port serves ${paths} ` +
          "(POST; Connect, gRPC-Web and gRPC)",
      );
    },
  };
}

/** 200 "ok" or 503 with the reason, one line of plain text, never cached; GET and HEAD only. */
function answerProbe(req: Req, res: Res, status: ProbeStatus): void {
  res.setHeader("cache-control", "no-store");
  res.setHeader("content-type", "text/plain; charset=utf-8");
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.statusCode = 405;
    res.setHeader("allow", "GET, HEAD");
    res.end(`only GET and HEAD: this is a probe\n`);
    return;
  }
  res.statusCode = status.ok ? 200 : 503;
  const body = `${status.ok ? "ok" : publicReason(status.reason)}\n`;
  // HEAD: the same headers, no body.
  res.end(req.method === "HEAD" ? "" : body);
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
const CONTROL = /[\u0000-\u001f\u007f]/g;
const MAX_REASON_CHARS = 200;

/**
 * A reason fit for anyone who asks, as a second line of defence: one short
 * line, and every word with "://" in it (a store URL may carry a password)
 * replaced by "<url>".
 */
function publicReason(reason: string | undefined): string {
  if (reason === undefined || reason === "") return "unknown";
  const short =
    reason.length <= MAX_REASON_CHARS ? reason : `${reason.slice(0, MAX_REASON_CHARS - 1)}…`;
  return short
    .replace(CONTROL, " ")
    .split(" ")
    .map((word) => (word.includes("://") ? "<url>" : word))
    .join(" ");
}

/** A Connect-style JSON error body: readable by people and by Connect clients. */
function reply(res: Res, status: number, code: string, message: string): void {
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.end(`${JSON.stringify({ code, message })}\n`);
}
