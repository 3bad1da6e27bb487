import * as http2 from "node:http2";
import type { AddressInfo, Server as NetServer } from "node:net";
import type { DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { createContextValues } from "@connectrpc/connect";
import { MemoryService } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { createCleartextHttpListener, type HttpRequestHandler } from "./cleartext-http-listener.js";
import { strictConnectAdapter } from "./connect-decoding.js";
import { admit, memoryServiceImpl, rawRequestKey } from "./connect-handlers.js";
import { toClientError, toConnectError } from "./error-table.js";
import { HttpConnections } from "./http-connections.js";
import { createHttpFront } from "./http-front.js";
import { DEFAULT_MAX_MESSAGE_BYTES, MAX_CONCURRENT_STREAMS } from "./limits.js";
import { recordRpc } from "./rpc-metrics.js";
import type { ServerOptions } from "./server-options.js";
import { pemBuffer, type TlsOptions } from "./tls.js";

/**
 * The Connect server: @connectrpc/connect-node serving MemoryService over the
 * same core as the gRPC server, for the Connect protocol (JSON or binary,
 * browsers, curl), gRPC-Web, and gRPC. One port carries HTTP/1.1 and HTTP/2:
 * cleartext via first-bytes sniffing, TLS via ALPN.
 */

export interface ConnectServer {
  /** The port bound. */
  readonly port: number;
  /**
   * Stops accepting connections, lets requests in flight finish, and
   * resolves when every connection is closed.
   */
  close(): Promise<void>;
  /** Closes every connection now. */
  forceClose(): void;
}

/** Starts the Connect server and resolves once it is listening. */
export async function startConnectServer(options: ServerOptions): Promise<ConnectServer> {
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const adapter = strictConnectAdapter({
    service: MemoryService,
    impl: memoryServiceImpl(options) as ServiceImpl<DescService>,
    router: {
      readMaxBytes: maxMessageBytes,
      writeMaxBytes: maxMessageBytes,
      // Runs on the headers, before any byte of the body is read or parsed.
      requestGate: (hctx) => admit(options, hctx),
    },
    ignoreUnknownJsonFields: options.jsonIgnoreUnknownFields ?? false,
    toError: (err, handler) => {
      const clientError = toClientError(err, {
        method: `${handler.service.typeName}/${handler.method.name}`,
        logger: options.logger,
      });
      recordRpc(options.metrics, "connect", handler.method.name, clientError.code, undefined);
      return toConnectError(clientError);
    },
    logger: options.logger,
    // The raw request, so a stalled Watch can reset its HTTP/2 stream or socket.
    contextValues: (req) => createContextValues().set(rawRequestKey, req),
    fallback: (req, res) => front.notFound(req, res),
  });
  const front = createHttpFront(options.corsOrigins ?? [], adapter.handlers, options.probes);
  const limits = options.connectionLimits;
  const connections = new HttpConnections({ maxConnectionIdleMs: limits.maxConnectionIdleMs });
  const metricsEndpoint = options.metricsEndpoint;
  const route: HttpRequestHandler = (req, res) => {
    if (metricsEndpoint !== undefined && req.url === "/metrics") {
      metricsEndpoint(req, res);
      return;
    }
    if (front.handle(req, res)) return;
    adapter(req, res);
  };
  const handler: HttpRequestHandler = (req, res) => {
    connections.trackRequest(req, res);
    try {
      route(req, res);
    } catch (err) {
      // Nothing one request does may end the process: a throw here would be
      // uncaught (it runs in the server's 'request' listener).
      options.logger.error("request handler failed", { err });
      if (!res.headersSent) res.statusCode = 500;
      res.end();
    }
  };
  const listener =
    options.tls === undefined
      ? createCleartextHttpListener(handler, connections, {
          firstBytesTimeoutMs: limits.firstByteTimeoutMs,
        })
      : createTlsListener(handler, connections, options.tls, limits.firstByteTimeoutMs);
  // Node closes sockets beyond this as soon as they are accepted.
  listener.maxConnections = limits.maxConnections;
  await listen(listener, options.host, options.port);
  const address = listener.address() as AddressInfo;
  let closing: Promise<void> | undefined;
  return {
    port: address.port,
    close() {
      closing ??= new Promise((resolve) => {
        listener.close(() => resolve());
        connections.closeGracefully();
      });
      return closing;
    },
    forceClose() {
      // Also stops listening: on a failed start nothing else would, and the
      // open listener would keep the process alive.
      listener.close();
      connections.destroyAll();
    },
  };
}

/** TLS: ALPN chooses HTTP/2 or HTTP/1.1, so one http2 secure server does both. */
function createTlsListener(
  handler: HttpRequestHandler,
  connections: HttpConnections,
  tls: TlsOptions,
  handshakeTimeoutMs: number,
): http2.Http2SecureServer {
  const clientCa = tls.clientCa === undefined ? undefined : pemBuffer(tls.clientCa);
  const server = http2.createSecureServer(
    {
      allowHTTP1: true,
      handshakeTimeout: handshakeTimeoutMs,
      settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS },
      cert: pemBuffer(tls.cert),
      key: pemBuffer(tls.key),
      ...(clientCa === undefined
        ? {}
        : { ca: clientCa, requestCert: true, rejectUnauthorized: true }),
    },
    handler,
  );
  server.on("connection", (socket) => connections.acceptSocket(socket));
  server.on("secureConnection", (socket) => {
    if (socket.alpnProtocol !== "h2") connections.acceptHttp1(socket);
  });
  server.on("session", (session) => connections.acceptSession(session));
  return server;
}

function listen(server: NetServer, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}
