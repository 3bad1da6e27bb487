import { describe, expect, it } from "vitest";
import { Counter, Histogram } from "../src/metrics.js";

describe("Prometheus text rendering", () => {
  it("renders counters with escaped label values", () => {
    const c = new Counter("x_total", "Things.");
    c.inc({ a: 'say "hi"\\\n' });
    c.inc({ a: 'say "hi"\\\n' }, 2);
    expect(c.render()).toBe(
      '# HELP x_total Things.\n# TYPE x_total counter\nx_total{a="say \\"hi\\"\\\\\\n"} 3\n',
    );
  });

  it("renders cumulative histogram buckets, sum and count", () => {
    const h = new Histogram("d_seconds", "Durations.", [0.1, 1]);
    for (const v of [0.05, 0.5, 0.5, 3]) h.observe(v, { m: "Get" });
    expect(h.render().split("\n")).toEqual([
      "# HELP d_seconds Durations.",
      "# TYPE d_seconds histogram",
      'd_seconds_bucket{m="Get",le="0.1"} 1',
      'd_seconds_bucket{m="Get",le="1"} 3',
      'd_seconds_bucket{m="Get",le="+Inf"} 4',
      'd_seconds_sum{m="Get"} 4.05',
      'd_seconds_count{m="Get"} 4',
      "",
    ]);
  });
});
