import type { ServerMetrics } from "../../src/metrics.js";

/** The value of one series line (name and labels) in the rendered metrics; 0 when absent. */
export async function metricSeries(metrics: ServerMetrics, line: string): Promise<number> {
  const found = (await metrics.render()).split("\n").find((l) => l.startsWith(`${line} `));
  return found === undefined ? 0 : Number(found.slice(line.length + 1));
}
