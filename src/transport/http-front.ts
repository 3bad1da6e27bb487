import type * as http from "node:http";
import type * as http2 from "node:http2";
import { cors } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";

/**
 * What the Connect port does before connect-node sees a request: CORS for
 * the configured browser origins, and answers that say what to send instead
 * of connect-node's empty 415 and 404 bodies.
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

export interface HttpFront {
  /**
   * Handles CORS preflights, adds CORS headers for allowed origins, and
   * answers requests connect-node would refuse with an empty body. Returns
   * true when it has answered; false: pass the request on.
   */
  handle(req: Req, res: Res): boolean;
  /** connect-node's fallback for paths that are no RPC: a 404 naming the paths served. */
  notFound(req: Req, res: Res): void;
}

/**
 * `corsOrigins`: exact origins (`https://app.example.com`) allowed to call
 * from a browser, or `*` for any; empty: no CORS headers at all.
 * `handlers`: the RPCs of connect-node's router, for their paths and content types.
 */
export function createHttpFront(
  corsOrigins: readonly string[],
  handlers: readonly UniversalHandler[],
): HttpFront {
  const anyOrigin = corsOrigins.includes("*");
  const origins = new Set(corsOrigins);
  const byPath = new Map(handlers.map((h) => [h.requestPath, h]));
  const paths = handlers.map((h) => h.requestPath).join(", ");

  return {
    handle(req, res) {
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
      const path = (req.url ?? "").split("?", 1)[0] ?? "";
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

/** A Connect-style JSON error body: readable by people and by Connect clients. */
function reply(res: Res, status: number, code: string, message: string): void {
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.end(`${JSON.stringify({ code, message })}\n`);
}
