import * as net from "node:net";
import type { ConnectionInjector } from "@grpc/grpc-js";

/**
 * The gRPC port's own TCP listener. grpc-js listens by itself with no cap on
 * connections and no timeout for a socket that never sends a byte (an
 * HTTP/2 session only starts idling, and a TLS socket only times out after
 * Node's 120 s handshake limit). So this listener accepts the sockets,
 * refuses those beyond `maxConnections`, closes those that send nothing
 * within `firstByteTimeoutMs`, and hands the rest to grpc-js through its
 * connection injector, where TLS, HTTP/2, idle and keepalive timeouts apply.
 */
export interface GrpcListenerOptions {
  readonly maxConnections: number;
  readonly firstByteTimeoutMs: number;
}

export interface GrpcListener {
  readonly port: number;
  /** Open connections now. */
  readonly connections: number;
  /** Stops accepting; connections already handed to grpc-js close with it. */
  stopAccepting(): void;
  /** Resolves once every connection has closed (it closes none itself). */
  allClosed(): Promise<void>;
  /** Destroys every connection now. */
  destroyAll(): void;
}

export async function listenForGrpc(
  injector: ConnectionInjector,
  host: string,
  port: number,
  options: GrpcListenerOptions,
): Promise<GrpcListener> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    // A socket closed by its peer before grpc-js has it would otherwise throw on 'error'.
    socket.on("error", () => {});
    const firstByte = setTimeout(() => {
      if (socket.bytesRead === 0) socket.destroy();
    }, options.firstByteTimeoutMs);
    firstByte.unref();
    socket.once("close", () => {
      clearTimeout(firstByte);
      sockets.delete(socket);
    });
    injector.injectConnection(socket);
  });
  // Node closes sockets beyond this as soon as they are accepted.
  server.maxConnections = options.maxConnections;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    get connections() {
      return sockets.size;
    },
    stopAccepting() {
      server.close();
    },
    allClosed() {
      if (sockets.size === 0) return Promise.resolve();
      return new Promise((resolve) => {
        for (const socket of sockets) {
          socket.once("close", () => {
            if (sockets.size === 0) resolve();
          });
        }
      });
    },
    destroyAll() {
      server.close();
      for (const socket of sockets) socket.destroy();
    },
  };
}
