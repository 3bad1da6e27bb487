import type { DescService } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouterOptions,
  type ContextValues,
  createConnectRouter,
  type ServiceImpl,
} from "@connectrpc/connect";
import type {
  Compression,
  UniversalHandler,
  UniversalServerRequest,
} from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { invalidArgument } from "../core/errors.js";
import type { Logger } from "../logger.js";
import type { HttpRequest, HttpRequestHandler } from "./cleartext-http-listener.js";
import { messageTooLarge } from "./limits.js";
import { checkBinaryRequest, checkJsonRequest } from "./request-decoding.js";

/**
 * connect-node's request parsing made strict. connect-es parses request
 * bodies itself, before any interceptor runs, and answers a protobuf body it
 * cannot parse with INTERNAL ("parse binary: …") and never names the field.
 * So each route's request body is checked on its way in, with the same strict
 * decoder the gRPC port uses (request-decoding.ts): a body that fails is
 * refused with INVALID_ARGUMENT naming the field before connect-es sees it.
 *
 * The body is only read after connect-es' request gate has run, so auth is
 * still decided on the headers alone, before any byte of the body is read.
 */

/** How a content type frames and encodes the request message. */
interface BodyFormat {
  /** Length-prefixed envelopes (gRPC, gRPC-Web, Connect streaming) or the bare message. */
  readonly envelope: boolean;
  readonly json: boolean;
  /** The header naming the compression of the message. */
  readonly encodingHeader: string;
}

function bodyFormatOf(contentType: string | null): BodyFormat | undefined {
  const type = (contentType ?? "").split(";", 1)[0]?.trim().toLowerCase();
  switch (type) {
    case "application/json":
      return { envelope: false, json: true, encodingHeader: "content-encoding" };
    case "application/proto":
      return { envelope: false, json: false, encodingHeader: "content-encoding" };
    case "application/connect+json":
      return { envelope: true, json: true, encodingHeader: "connect-content-encoding" };
    case "application/connect+proto":
      return { envelope: true, json: false, encodingHeader: "connect-content-encoding" };
    case "application/grpc":
    case "application/grpc+proto":
    case "application/grpc-web":
    case "application/grpc-web+proto":
      return { envelope: true, json: false, encodingHeader: "grpc-encoding" };
    case "application/grpc+json":
    case "application/grpc-web+json":
      return { envelope: true, json: true, encodingHeader: "grpc-encoding" };
    default:
      // connect-es answers unsupported media types itself.
      return undefined;
  }
}

export interface StrictAdapterOptions {
  readonly service: DescService;
  readonly impl: ServiceImpl<DescService>;
  readonly router: ConnectRouterOptions & { readonly readMaxBytes: number };
  /** Passed to the JSON check (and to connect-es, so both agree). */
  readonly ignoreUnknownJsonFields: boolean;
  /** Turns a check failure (a MemoryError) into what connect-es should send. */
  readonly toError: (err: unknown, handler: UniversalHandler) => Error;
  readonly logger: Logger;
  /** Values every call's context starts with (connectNodeAdapter's option of that name). */
  readonly contextValues?: (req: HttpRequest) => ContextValues;
  /** Answers a path that is no RPC of the service; default: a bare 404. */
  readonly fallback?: HttpRequestHandler;
}

/** The adapter, with the router's handlers (their paths and methods, e.g. for CORS). */
export type StrictConnectAdapter = HttpRequestHandler & {
  readonly handlers: readonly UniversalHandler[];
};

const COMPRESSIONS: readonly Compression[] = [compressionGzip, compressionBrotli];

/**
 * A Node request handler serving one service like connectNodeAdapter, with
 * every request body checked strictly (see above). Unknown paths get 404.
 */
export function strictConnectAdapter(options: StrictAdapterOptions): StrictConnectAdapter {
  const router = createConnectRouter({
    acceptCompression: [...COMPRESSIONS],
    ...options.router,
    jsonOptions: {
      ...options.router.jsonOptions,
      ignoreUnknownFields: options.ignoreUnknownJsonFields,
    },
  });
  router.service(options.service, options.impl);
  const paths = new Map<string, UniversalHandler>();
  for (const handler of router.handlers) {
    paths.set(handler.requestPath, checkingBodies(handler, options));
  }
  const adapter: HttpRequestHandler = (req, res) => {
    const handler = paths.get(req.url?.split("?", 1)[0] ?? "");
    if (handler === undefined) {
      if (options.fallback !== undefined) {
        options.fallback(req, res);
        return;
      }
      res.statusCode = 404;
      res.end();
      return;
    }
    let uReq: UniversalServerRequest;
    try {
      uReq = universalRequestFromNodeRequest(req, res, undefined, options.contextValues?.(req));
    } catch (err) {
      // connect-node throws here, outside any promise, on a request whose
      // authority it cannot make a URL of (HTTP/1.0 without Host, `Host: [`):
      // uncaught, that would end the process for every caller.
      res.statusCode = 400;
      res.setHeader("content-type", "text/plain; charset=utf-8");
      res.end(`bad request: ${err instanceof Error ? err.message : "unreadable request"}\n`);
      return;
    }
    handler(uReq)
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((err: unknown) => {
        // As connectNodeAdapter: a client that went away (Aborted) is no news.
        if (ConnectError.from(err).code === Code.Aborted) return;
        options.logger.warn("connect response not written", {
          method: `${handler.service.typeName}/${handler.method.name}`,
          err,
        });
      });
  };
  return Object.assign(adapter, { handlers: router.handlers });
}

function checkingBodies(
  handler: UniversalHandler,
  options: StrictAdapterOptions,
): UniversalHandler {
  const input = handler.method.input;
  const limit = options.router.readMaxBytes;
  const wrapped = (req: UniversalServerRequest) => {
    const format = bodyFormatOf(req.header.get("content-type"));
    // Only POST carries a body: MemoryService has no GET (NO_SIDE_EFFECTS) methods.
    if (format === undefined || req.method !== "POST" || !isByteStream(req.body)) {
      return handler(req);
    }
    // `undefined`: a compressed message with no compression named for it.
    const check = (payload: Uint8Array | undefined): void => {
      try {
        if (payload === undefined) {
          throw invalidArgument(
            "request",
            `compressed message, but ${format.encodingHeader} names no compression this server accepts`,
          );
        }
        if (format.json) {
          checkJsonRequest(input, payload, {
            ignoreUnknownFields: options.ignoreUnknownJsonFields,
          });
        } else {
          checkBinaryRequest(input, payload);
        }
      } catch (err) {
        throw options.toError(err, handler);
      }
    };
    const tooLarge = (bytes: number | undefined): never => {
      throw options.toError(messageTooLarge("request", bytes, limit), handler);
    };
    const encoding = req.header.get(format.encodingHeader);
    const compression = COMPRESSIONS.find((c) => c.name === encoding);
    const body = format.envelope
      ? checkedEnvelopes(req.body, limit, compression, check, tooLarge)
      : checkedWhole(req.body, limit, compression, check, tooLarge);
    let header = req.header;
    const declared = Number(header.get("content-length") ?? "0");
    if (!format.envelope && declared > limit) {
      // connect-es refuses a declared length over the limit before reading,
      // in its own words; without it, the body check above refuses it in ours.
      header = new Headers(header);
      header.delete("content-length");
    }
    return handler({ ...req, header, body });
  };
  return Object.assign(wrapped, handler);
}

function isByteStream(body: unknown): body is AsyncIterable<Uint8Array> {
  return typeof body === "object" && body !== null && Symbol.asyncIterator in body;
}

/**
 * The bare message of a Connect unary call: collected whole, checked, then
 * passed on. Past the size limit it is refused with RESOURCE_EXHAUSTED
 * (`tooLarge`) without reading the rest.
 */
async function* checkedWhole(
  body: AsyncIterable<Uint8Array>,
  limit: number,
  compression: Compression | undefined,
  check: (payload: Uint8Array) => void,
  tooLarge: (bytes: number | undefined) => never,
): AsyncGenerator<Uint8Array> {
  const it = body[Symbol.asyncIterator]();
  const queue = new ByteQueue();
  for (;;) {
    const next = await it.next();
    if (next.done === true) break;
    queue.push(next.value);
    if (queue.length > limit) tooLarge(undefined);
  }
  const raw = queue.take(queue.length);
  // A body that does not decompress is passed on: connect-es reports it.
  const payload =
    compression === undefined ? raw : await decompressOrUndefined(compression, raw, limit);
  if (payload !== undefined) check(payload);
  yield raw;
}

/**
 * Enveloped messages (5-byte prefix: flags, big-endian length): each data
 * message is checked as soon as it is complete, before it is passed on.
 */
async function* checkedEnvelopes(
  body: AsyncIterable<Uint8Array>,
  limit: number,
  compression: Compression | undefined,
  check: (payload: Uint8Array | undefined) => void,
  tooLarge: (bytes: number | undefined) => never,
): AsyncGenerator<Uint8Array> {
  const it = body[Symbol.asyncIterator]();
  const queue = new ByteQueue();
  for (;;) {
    const next = await it.next();
    if (next.done === true) break;
    queue.push(next.value);
    while (queue.length >= 5) {
      const header = queue.peek(5);
      const flags = header[0] as number;
      const size = new DataView(header.buffer, header.byteOffset, 5).getUint32(1);
      if (size > limit) tooLarge(size);
      if (queue.length < 5 + size) break;
      const envelope = queue.take(5 + size);
      // Flag 0b10 is Connect's end-of-stream message, 0x80 gRPC-Web's trailers:
      // not request messages; connect-es deals with them.
      if ((flags & 0x82) === 0) {
        let payload: Uint8Array | undefined = envelope.subarray(5);
        if ((flags & 0x01) !== 0) {
          // connect-es would answer a compressed message without a compression
          // named in the headers with INTERNAL; it is the client's fault.
          if (compression === undefined) check(undefined);
          else payload = await decompressOrUndefined(compression, payload, limit);
        }
        if (payload !== undefined) check(payload);
      }
      yield envelope;
    }
  }
  if (queue.length > 0) yield queue.take(queue.length);
}

/**
 * The decompressed message; undefined when it does not decompress within the
 * limit, and then connect-es, decompressing it again, gives its own answer
 * (INVALID_ARGUMENT, or RESOURCE_EXHAUSTED past the limit).
 */
async function decompressOrUndefined(
  compression: Compression,
  bytes: Uint8Array,
  limit: number,
): Promise<Uint8Array | undefined> {
  try {
    return await compression.decompress(bytes, limit);
  } catch {
    return undefined;
  }
}

/** Chunks in arrival order; takes copy only what they return, so the cost stays linear. */
class ByteQueue {
  private chunks: Uint8Array[] = [];
  length = 0;

  push(chunk: Uint8Array): void {
    if (chunk.byteLength === 0) return;
    this.chunks.push(chunk);
    this.length += chunk.byteLength;
  }

  peek(n: number): Uint8Array {
    const first = this.chunks[0];
    if (first !== undefined && first.byteLength >= n) return first.subarray(0, n);
    return this.copy(n, false);
  }

  take(n: number): Uint8Array {
    return this.copy(n, true);
  }

  private copy(n: number, consume: boolean): Uint8Array {
    const out = new Uint8Array(n);
    let filled = 0;
    let i = 0;
    while (filled < n) {
      const chunk = this.chunks[i] as Uint8Array;
      const part = Math.min(chunk.byteLength, n - filled);
      out.set(chunk.subarray(0, part), filled);
      filled += part;
      if (consume) {
        if (part === chunk.byteLength) this.chunks.shift();
        else this.chunks[0] = chunk.subarray(part);
      } else {
        i++;
      }
    }
    if (consume) this.length -= n;
    return out;
  }
}
