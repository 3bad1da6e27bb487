/**
 * A TCP proxy between a client and the real server that the tests steer:
 * point it at another port (a restarted server) or at nothing (connections
 * are accepted and closed at once, as if the server were down), hold back the
 * server's answers, drop every open connection. It counts the connections
 * clients open, which is how the tests see a client's reconnect rate.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export class TcpProxy {
  /** Connections accepted so far. */
  connections = 0;
  /** Port new connections go to; undefined: close them at once. */
  target: number | undefined;
  /** True: bytes from the server are read and thrown away, not forwarded. */
  holdAnswers = false;
  readonly #server: Server;
  readonly #open = new Set<Socket>();

  private constructor(server: Server, target: number | undefined) {
    this.#server = server;
    this.target = target;
  }

  static async start(target: number | undefined): Promise<TcpProxy> {
    const server = createServer();
    const proxy = new TcpProxy(server, target);
    server.on("connection", (client) => proxy.#accept(client));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get port(): number {
    const address = this.#server.address();
    if (address === null || typeof address === "string") throw new Error("proxy not listening");
    return address.port;
  }

  url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Closes every open connection, both sides. */
  dropAll(): void {
    for (const socket of this.#open) socket.destroy();
    this.#open.clear();
  }

  async close(): Promise<void> {
    this.dropAll();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(client: Socket): void {
    this.connections++;
    if (this.target === undefined) {
      client.destroy();
      return;
    }
    const upstream = connect(this.target, "127.0.0.1");
    this.#open.add(client);
    this.#open.add(upstream);
    client.on("data", (chunk) => upstream.write(chunk));
    upstream.on("data", (chunk) => {
      if (!this.holdAnswers) client.write(chunk);
    });
    const close = (): void => {
      client.destroy();
      upstream.destroy();
      this.#open.delete(client);
      this.#open.delete(upstream);
    };
    client.on("close", close);
    upstream.on("close", close);
    client.on("error", close);
    upstream.on("error", close);
  }
}
