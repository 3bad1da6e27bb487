import { describe, expect, it } from "vitest";
import { ServerMetrics } from "../src/metrics.js";

/** The lines of one metric family in the rendered text: HELP, TYPE and its samples. */
function family(text: string, name: string): string[] {
  const lines = text.split("\n");
  const start = lines.findIndex((l) => l.startsWith(`# HELP ${name} `));
  if (start === -1) return [];
  const end = lines.findIndex((l, i) => i > start + 1 && (l.startsWith("# HELP") || l === ""));
  return lines.slice(start, end === -1 ? undefined : end);
}

describe("Prometheus text rendering", () => {
  it("renders counters with escaped label values", async () => {
    const m = new ServerMetrics({ processMetrics: false });
    const labels = { a: 'say "hi"\\\n' };
    m.rpcs.inc(labels);
    m.rpcs.inc(labels, 2);
    expect(family(await m.render(), "windlass_rpc_requests_total")).toEqual([
      "# HELP windlass_rpc_requests_total RPCs finished, by transport, method and gRPC code.",
      "# TYPE windlass_rpc_requests_total counter",
      'windlass_rpc_requests_total{a="say \\"hi\\"\\\\\\n"} 3',
    ]);
  });

  it("renders cumulative histogram buckets, sum and count", async () => {
    const m = new ServerMetrics({ processMetrics: false });
    for (const v of [0.05, 0.5, 0.5, 30]) m.foldSeconds.observe(v, { m: "Get" });
    const lines = family(await m.render(), "windlass_fold_duration_seconds");
    expect(lines.slice(0, 2)).toEqual([
      "# HELP windlass_fold_duration_seconds Time a fold took: the summariser call and the commit.",
      "# TYPE windlass_fold_duration_seconds histogram",
    ]);
    expect(lines.slice(2)).toEqual([
      'windlass_fold_duration_seconds_bucket{m="Get",le="0.01"} 0',
      'windlass_fold_duration_seconds_bucket{m="Get",le="0.05"} 1',
      'windlass_fold_duration_seconds_bucket{m="Get",le="0.1"} 1',
      'windlass_fold_duration_seconds_bucket{m="Get",le="0.25"} 1',
      'windlass_fold_duration_seconds_bucket{m="Get",le="0.5"} 3',
      'windlass_fold_duration_seconds_bucket{m="Get",le="1"} 3',
      'windlass_fold_duration_seconds_bucket{m="Get",le="2.5"} 3',
      'windlass_fold_duration_seconds_bucket{m="Get",le="5"} 3',
      'windlass_fold_duration_seconds_bucket{m="Get",le="10"} 3',
      'windlass_fold_duration_seconds_bucket{m="Get",le="30"} 4',
      'windlass_fold_duration_seconds_bucket{m="Get",le="60"} 4',
      'windlass_fold_duration_seconds_bucket{m="Get",le="+Inf"} 4',
      'windlass_fold_duration_seconds_sum{m="Get"} 31.05',
      'windlass_fold_duration_seconds_count{m="Get"} 4',
    ]);
  });

  it("adds gauges read at scrape time", async () => {
    const m = new ServerMetrics({ processMetrics: false });
    let depth = 3;
    m.collect("windlass_fold_queue", "Folds waiting.", () => depth);
    expect(await m.render()).toContain("\nwindlass_fold_queue 3\n");
    depth = 5;
    expect(await m.render()).toContain("\nwindlass_fold_queue 5\n");
    m.watchers.add(1);
    m.watchers.add(1);
    m.watchers.add(-1);
    expect(await m.render()).toContain("\nwindlass_watchers 1\n");
  });

  it("exports Node's process metrics from a registry of its own", async () => {
    const a = new ServerMetrics();
    const b = new ServerMetrics();
    a.rpcs.inc({ method: "Add" });
    const text = await a.render();
    for (const name of [
      "process_resident_memory_bytes",
      "process_cpu_seconds_total",
      "nodejs_eventloop_lag_seconds",
      "nodejs_gc_duration_seconds",
      "nodejs_heap_size_used_bytes",
      "nodejs_active_handles_total",
      "windlass_uptime_seconds",
    ]) {
      expect(text, name).toMatch(new RegExp(`^# TYPE ${name} `, "m"));
    }
    // Two servers in one process keep their own series.
    expect(await b.render()).not.toContain('method="Add"');
    expect(a.contentType).toBe("text/plain; version=0.0.4; charset=utf-8");
  });
});
