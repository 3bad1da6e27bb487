import { fileURLToPath } from "node:url";
import { openConnections, quantile, runLoad } from "./load.js";
import { ADD_PATH, addRequests, GET_PATH, getRequest, getSeedRequests } from "./scenarios.js";
import { startServerProcess, UNLIMITED_SERVE_FLAGS } from "./server-process.js";

/**
 * grpc-js or connect-node for gRPC? The project chose grpc-js for the gRPC port
 * from a measurement on a trivial echo; this measures it on this service: one
 * server process (memory store), the same gRPC calls over the same minimal
 * HTTP/2 client to its gRPC port (grpc-js) and to its Connect port
 * (connect-node, which also speaks gRPC), taking turns, with the server's CPU
 * time per call. Run: `npm run build && node dist/bench/transports.js`.
 */
const SECONDS = Number(process.env.BENCH_SECONDS ?? "3");
const ROUNDS = 2;
const CONCURRENCY = 64;
const CONNECTIONS = 4;

async function main(): Promise<void> {
  const root = fileURLToPath(new URL("../../", import.meta.url));
  const server = await startServerProcess({
    label: "windlass-memory",
    script: `${root}bin/windlass-memory.js`,
    // The bench measures the transports, not the per-namespace rate limit.
    args: ["serve", ...UNLIMITED_SERVE_FLAGS, "--port", "0", "--http-port", "0"],
    startTimeoutMs: 15_000,
  });
  try {
    if (server.httpPort === undefined) throw new Error("the server printed no HTTP port");
    const ports = { "grpc-js": server.grpcPort, "connect-node": server.httpPort };
    const seed = openConnections("h2", `127.0.0.1:${server.grpcPort}`, 1);
    await runLoad(seed, ADD_PATH, getSeedRequests(), {
      concurrency: 1,
      durationMs: 60_000,
      callTimeoutMs: 5_000,
      maxCalls: getSeedRequests().length,
    });
    seed.close();
    const scenarios = [
      ["Add", ADD_PATH, addRequests(300)],
      ["Get", GET_PATH, [getRequest()]],
    ] as const;
    const rows: string[] = [];
    for (const [scenario, path, requests] of scenarios) {
      const totals = new Map<string, { calls: number; ms: number; cpu: number; p50: number[] }>();
      for (let round = 0; round < ROUNDS; round++) {
        const order =
          round % 2 === 0
            ? (["grpc-js", "connect-node"] as const)
            : (["connect-node", "grpc-js"] as const);
        for (const name of order) {
          const target = openConnections("h2", `127.0.0.1:${ports[name]}`, CONNECTIONS);
          // Warm-up, then the measurement.
          await runLoad(target, path, requests, {
            concurrency: CONCURRENCY,
            durationMs: 1_000,
            callTimeoutMs: 10_000,
          });
          const cpu0 = server.cpuMicros() ?? 0;
          const r = await runLoad(target, path, requests, {
            concurrency: CONCURRENCY,
            durationMs: SECONDS * 1000,
            callTimeoutMs: 10_000,
          });
          const cpu = (server.cpuMicros() ?? 0) - cpu0;
          target.close();
          if (r.errors > 0)
            throw new Error(`${name} ${scenario}: ${r.errors} errors (${r.firstError})`);
          const t = totals.get(name) ?? { calls: 0, ms: 0, cpu: 0, p50: [] };
          t.calls += r.calls;
          t.ms += r.elapsedMs;
          t.cpu += cpu;
          t.p50.push(quantile(Float64Array.from(r.latenciesMs).sort(), 0.5));
          totals.set(name, t);
        }
      }
      const g = totals.get("grpc-js");
      const c = totals.get("connect-node");
      if (g === undefined || c === undefined) continue;
      for (const [name, t] of [
        ["grpc-js", g],
        ["connect-node", c],
      ] as const) {
        rows.push(
          `${scenario.padEnd(4)} ${name.padEnd(12)} ${String(Math.round((t.calls / t.ms) * 1000)).padStart(7)} calls/s  ${(t.cpu / t.calls).toFixed(1).padStart(6)} us CPU/call  p50 ${(t.p50.reduce((a, b) => a + b, 0) / t.p50.length).toFixed(2)} ms`,
        );
      }
      rows.push(
        `${scenario}: server CPU per call connect-node/grpc-js = ${(c.cpu / c.calls / (g.cpu / g.calls)).toFixed(2)}x`,
      );
    }
    process.stdout.write(
      `gRPC over grpc-js vs connect-node, one windlass-memory process (memory store), h2 driver, ${CONCURRENCY} in flight on ${CONNECTIONS} connections, ${ROUNDS} x ${SECONDS} s each, alternating\n${rows.join("\n")}\n`,
    );
  } finally {
    await server.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench/transports: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
