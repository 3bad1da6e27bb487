import { describe, expect, it } from "vitest";
import { ServerMetrics } from "../../src/metrics.js";
import { RpcRecorder, recordRpc } from "../../src/transport/rpc-metrics.js";

function samples(text: string, name: string): string[] {
  return text
    .split("\n")
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .sort();
}

describe("RpcRecorder", () => {
  it("counts per method and code through its cached series, beside recordRpc's", async () => {
    const m = new ServerMetrics({ processMetrics: false });
    const add = new RpcRecorder(m, "grpc", "Add");
    const get = new RpcRecorder(m, "grpc", "Get");
    add.record("ok", performance.now());
    add.record("ok", performance.now());
    add.record("invalid_argument", performance.now());
    get.record("ok", undefined);
    // The same series as the uncached path: one line per method and code.
    recordRpc(m, "grpc", "Add", "ok", undefined);
    const text = await m.render();
    expect(samples(text, "windlass_rpc_requests_total")).toEqual([
      'windlass_rpc_requests_total{transport="grpc",method="Add",code="INVALID_ARGUMENT"} 1',
      'windlass_rpc_requests_total{transport="grpc",method="Add",code="OK"} 3',
      'windlass_rpc_requests_total{transport="grpc",method="Get",code="OK"} 1',
    ]);
    // Durations: Add's three timed calls; Get's call had no start time.
    expect(samples(text, "windlass_rpc_duration_seconds_count")).toEqual([
      'windlass_rpc_duration_seconds_count{transport="grpc",method="Add"} 3',
    ]);
  });

  it("shows no series for a code before its first call", async () => {
    const m = new ServerMetrics({ processMetrics: false });
    const add = new RpcRecorder(m, "grpc", "Add");
    expect(samples(await m.render(), "windlass_rpc_requests_total")).toEqual([]);
    add.record("ok", undefined);
    expect(samples(await m.render(), "windlass_rpc_requests_total")).toHaveLength(1);
  });

  it("records nothing without metrics", () => {
    expect(() => new RpcRecorder(undefined, "grpc", "Add").record("ok", 0)).not.toThrow();
  });
});
