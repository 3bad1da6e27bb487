import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { type AppHarness, startAppHarness } from "./app-harness.js";
import { CallFailed, connectDriver, type Driver, grpcDriver } from "./drivers.js";

/** Reads GET /metrics on the HTTP port and returns the value of one series, 0 when absent. */
async function series(h: AppHarness, line: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${h.app.httpPort}/metrics`)).text();
  const found = text.split("\n").find((l) => l.startsWith(`${line} `));
  return found === undefined ? 0 : Number(found.slice(line.length + 1));
}

describe("Prometheus metrics at GET /metrics", () => {
  let h: AppHarness;
  let grpc: Driver;
  let connect: Driver;
  beforeAll(async () => {
    h = await startAppHarness(["--progress-interval-ms", "100"]);
    grpc = grpcDriver(h.app.grpcPort);
    connect = connectDriver(h.app.httpPort, "connect", "1.1");
  });
  afterAll(async () => {
    grpc.close();
    connect.close();
    await h.close();
  });

  it("counts RPCs by transport, method and code, and times unary calls", async () => {
    const ok = 'windlass_rpc_requests_total{transport="grpc",method="Add",code="OK"}';
    const bad =
      'windlass_rpc_requests_total{transport="connect",method="Add",code="INVALID_ARGUMENT"}';
    await grpc.add({ threadId: "m", messages: [{ role: Role.USER, content: "a" }] });
    await grpc.add({ threadId: "m", messages: [{ role: Role.USER, content: "b" }] });
    await expect(connect.add({ messages: [{ content: "no role" }] })).rejects.toBeInstanceOf(
      CallFailed,
    );
    expect(await series(h, ok)).toBe(2);
    expect(await series(h, bad)).toBe(1);
    expect(
      await series(h, 'windlass_rpc_duration_seconds_count{transport="grpc",method="Add"}'),
    ).toBe(2);
    const text = await (await fetch(`http://127.0.0.1:${h.app.httpPort}/metrics`)).text();
    expect(text).toContain("# TYPE windlass_rpc_duration_seconds histogram");
    // Nothing private in the labels: no thread ids, no contents.
    expect(text).not.toMatch(/"m"|no role/);
  });

  it("counts folds and open watchers", async () => {
    h.llm.push({ reply: "folded" });
    await grpc.add({
      threadId: "f",
      strategy: {
        kind: { case: "summary", value: { window: 1, summarizeEvery: 1, model: "openai" } },
      },
      messages: [
        { role: Role.USER, content: "a" },
        { role: Role.USER, content: "b" },
      ],
    });
    const r = await grpc.get({ threadId: "f" });
    expect(r.summary).toBe("folded");
    expect(await series(h, 'windlass_folds_total{result="committed"}')).toBe(1);
    const w = grpc.watch({});
    expect((await w.next()).event.case).toBe("progress");
    expect(await series(h, "windlass_watchers")).toBe(1);
    w.cancel();
    // The server learns of the cancel asynchronously: wait for the stream to be gone.
    const cancelled =
      'windlass_rpc_requests_total{transport="grpc",method="Watch",code="CANCELLED"}';
    await vi.waitFor(
      async () => {
        expect(await series(h, "windlass_watchers")).toBe(0);
        expect(await series(h, cancelled)).toBe(1);
      },
      { timeout: 10_000, interval: 20 },
    );
  });
});
