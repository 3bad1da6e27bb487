/**
 * A TCP proxy on a free port of 127.0.0.1 in front of a real server, that can
 * black-hole the traffic: while black-holed it stops moving bytes in either
 * direction without closing or resetting anything, as a partitioned network
 * does while TCP keeps retransmitting. Nothing is dropped: what was sent
 * meanwhile arrives, in order, once the path is restored.
 *
 * ```ts
 * const proxy = await startTcpProxy(redis.port);
 * // … connect to proxy.port; proxy.blackhole(); … proxy.restore();
 * await proxy.close();
 * ```
 */
import { once } from "node:events";
import { createConnection, createServer, type Socket } from "node:net";

export interface TcpProxy {
  readonly port: number;
  /** Stops forwarding both ways, keeping every connection open. */
  blackhole(): void;
  /** Forwards again, what was held first. */
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  const pairs = new Set<Pair>();
  let holding = false;
  const server = createServer((inbound) => {
    const outbound = createConnection({ host: "127.0.0.1", port: targetPort });
    const pair: Pair = { a: inbound, b: outbound, flowing: false };
    pairs.add(pair);
    if (!holding) flow(pair);
    const end = () => {
      pairs.delete(pair);
      inbound.destroy();
      outbound.destroy();
    };
    inbound.on("error", end).on("close", end);
    outbound.on("error", end).on("close", end);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    port,
    blackhole() {
      holding = true;
      for (const pair of pairs) hold(pair);
    },
    restore() {
      holding = false;
      for (const pair of pairs) flow(pair);
    },
    async close() {
      for (const { a, b } of pairs) {
        a.destroy();
        b.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Pair {
  a: Socket;
  b: Socket;
  flowing: boolean;
}

function flow(pair: Pair): void {
  if (pair.flowing) return;
  pair.flowing = true;
  pair.a.pipe(pair.b);
  pair.b.pipe(pair.a);
}

function hold(pair: Pair): void {
  if (!pair.flowing) return;
  pair.flowing = false;
  // Unpiped as well as paused: a pipe resumes its source when the sink drains.
  pair.a.unpipe(pair.b);
  pair.b.unpipe(pair.a);
  pair.a.pause();
  pair.b.pause();
}
