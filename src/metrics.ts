/**
 * Prometheus metrics in the text exposition format (0.0.4), without a client
 * library: a few counters, gauges and histograms with labels, rendered on
 * demand at GET /metrics on the HTTP port. Label values are method names,
 * codes and outcomes — never thread ids, tokens or message contents, so the
 * number of series stays small and nothing private leaves the process.
 */

type Labels = Readonly<Record<string, string>>;

interface Metric {
  render(): string;
}

// Callers on the hot path pass the same label objects again and again
// (rpc-metrics.ts keeps them): their text is built once.
const labelTexts = new WeakMap<Labels, string>();

function labelText(labels: Labels): string {
  let text = labelTexts.get(labels);
  if (text === undefined) {
    text = buildLabelText(labels);
    labelTexts.set(labels, text);
  }
  return text;
}

function buildLabelText(labels: Labels): string {
  const parts = Object.entries(labels).map(
    ([k, v]) => `${k}="${v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"')}"`,
  );
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

function header(name: string, help: string, type: string): string {
  return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
}

export class Counter implements Metric {
  readonly #values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}

  inc(labels: Labels = {}, by = 1): void {
    const key = labelText(labels);
    this.#values.set(key, (this.#values.get(key) ?? 0) + by);
  }

  render(): string {
    let out = header(this.name, this.help, "counter");
    for (const [labels, v] of this.#values) out += `${this.name}${labels} ${v}\n`;
    return out;
  }
}

export class Gauge implements Metric {
  readonly #values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
    /** Read at render time instead of set: for values owned elsewhere. */
    private readonly collect?: () => number,
  ) {}

  add(by: number, labels: Labels = {}): void {
    const key = labelText(labels);
    this.#values.set(key, (this.#values.get(key) ?? 0) + by);
  }

  render(): string {
    let out = header(this.name, this.help, "gauge");
    if (this.collect !== undefined) return `${out}${this.name} ${this.collect()}\n`;
    for (const [labels, v] of this.#values) out += `${this.name}${labels} ${v}\n`;
    return out;
  }
}

export class Histogram implements Metric {
  readonly #series = new Map<
    string,
    { labels: Labels; counts: number[]; sum: number; count: number }
  >();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[],
  ) {}

  observe(value: number, labels: Labels = {}): void {
    const key = labelText(labels);
    let s = this.#series.get(key);
    if (s === undefined) {
      s = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 };
      this.#series.set(key, s);
    }
    for (let i = 0; i < this.buckets.length; i++) {
      if (value <= (this.buckets[i] ?? Number.POSITIVE_INFINITY))
        s.counts[i] = (s.counts[i] ?? 0) + 1;
    }
    s.sum += value;
    s.count++;
  }

  render(): string {
    let out = header(this.name, this.help, "histogram");
    for (const s of this.#series.values()) {
      this.buckets.forEach((le, i) => {
        out += `${this.name}_bucket${labelText({ ...s.labels, le: String(le) })} ${s.counts[i] ?? 0}\n`;
      });
      out += `${this.name}_bucket${labelText({ ...s.labels, le: "+Inf" })} ${s.count}\n`;
      out += `${this.name}_sum${labelText(s.labels)} ${s.sum}\n`;
      out += `${this.name}_count${labelText(s.labels)} ${s.count}\n`;
    }
    return out;
  }
}

const SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** Every metric the server exports; one instance per process, injected where it is recorded. */
export class ServerMetrics {
  readonly rpcs = new Counter(
    "windlass_rpc_requests_total",
    "RPCs finished, by transport, method and gRPC code.",
  );
  readonly rpcSeconds = new Histogram(
    "windlass_rpc_duration_seconds",
    "Time from the start of a unary RPC to its answer, by transport and method.",
    SECONDS,
  );
  readonly folds = new Counter(
    "windlass_folds_total",
    "Summary folds, by result: committed, failed, or discarded (the thread moved on meanwhile).",
  );
  readonly foldSeconds = new Histogram(
    "windlass_fold_duration_seconds",
    "Time a fold took: the summariser call and the commit.",
    [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  );
  readonly degradedGets = new Counter(
    "windlass_get_degraded_total",
    "Gets answered with a plain window because the summary could not be brought up to date.",
  );
  readonly watchers = new Gauge("windlass_watchers", "Open Watch streams.");
  readonly #started = Date.now();
  readonly #extra: Metric[] = [];

  /** Adds a gauge read at render time (e.g. the fold queue's depth). */
  collect(name: string, help: string, read: () => number): void {
    this.#extra.push(new Gauge(name, help, read));
  }

  render(): string {
    const process_ = [
      new Gauge("process_resident_memory_bytes", "Resident memory.", () =>
        process.memoryUsage.rss(),
      ),
      new Gauge(
        "windlass_uptime_seconds",
        "Seconds since start.",
        () => (Date.now() - this.#started) / 1000,
      ),
    ];
    return [
      this.rpcs,
      this.rpcSeconds,
      this.folds,
      this.foldSeconds,
      this.degradedGets,
      this.watchers,
      ...this.#extra,
      ...process_,
    ]
      .map((m) => m.render())
      .join("");
  }
}
