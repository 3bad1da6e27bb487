import { collectDefaultMetrics, Registry } from "prom-client";

/**
 * Prometheus metrics, rendered by prom-client at GET /metrics on the HTTP
 * port: the server's counters, gauges and histograms, plus prom-client's
 * default Node process metrics (CPU, memory, heap, event-loop lag, GC,
 * handles) — all on a registry this module owns, never prom-client's global
 * one, so two servers in one process (tests) do not mix. This is the only
 * module that knows prom-client.
 *
 * The server's own series keep their values here and hand them to the
 * registry at scrape time: recording is a map lookup and an addition, with no
 * allocation per call (prom-client's own metrics build a key string on every
 * inc/observe). Label values are method names, codes and outcomes — never
 * thread ids, tokens or message contents, so the number of series stays small
 * and nothing private leaves the process.
 */

type Labels = Readonly<Record<string, string>>;

/** One line of a metric: `metricName` for a histogram's _bucket, _sum and _count lines. */
interface Sample {
  readonly metricName?: string;
  readonly labels: Labels;
  readonly value: number;
}

/** What prom-client's Registry reads of a metric at scrape time (its `get()` shape). */
interface Snapshot {
  readonly name: string;
  readonly help: string;
  readonly type: "counter" | "gauge" | "histogram";
  /** How cluster workers' values combine (prom-client's AggregatorRegistry). */
  readonly aggregator: "sum";
  readonly values: readonly Sample[];
}

/** What prom-client's Registry needs of a metric: a name and its values on demand. */
interface Collected {
  readonly name: string;
  get(): Promise<Snapshot>;
}

// Callers on the hot path pass the same label objects again and again
// (rpc-metrics.ts keeps them): their key is built once.
const labelKeys = new WeakMap<Labels, string>();

function labelKey(labels: Labels): string {
  let key = labelKeys.get(labels);
  if (key === undefined) {
    key = JSON.stringify(Object.entries(labels));
    labelKeys.set(labels, key);
  }
  return key;
}

export class Counter implements Collected {
  readonly #values = new Map<string, { labels: Labels; value: number }>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}

  inc(labels: Labels = {}, by = 1): void {
    const key = labelKey(labels);
    const s = this.#values.get(key);
    if (s === undefined) this.#values.set(key, { labels, value: by });
    else s.value += by;
  }

  /**
   * The series of `labels`, for a caller that records into it on every call:
   * no key lookup per inc. The series appears on its first inc, as with inc.
   */
  child(labels: Labels): { inc(by?: number): void } {
    let s: { labels: Labels; value: number } | undefined;
    return {
      inc: (by = 1) => {
        if (s === undefined) {
          const key = labelKey(labels);
          s = this.#values.get(key);
          if (s === undefined) {
            s = { labels, value: 0 };
            this.#values.set(key, s);
          }
        }
        s.value += by;
      },
    };
  }

  async get(): Promise<Snapshot> {
    return {
      name: this.name,
      help: this.help,
      type: "counter",
      aggregator: "sum",
      values: [...this.#values.values()].map((s) => ({ labels: s.labels, value: s.value })),
    };
  }
}

export class Gauge implements Collected {
  readonly #values = new Map<string, { labels: Labels; value: number }>();
  constructor(
    readonly name: string,
    readonly help: string,
    /** Read at scrape time instead of set: for values owned elsewhere. */
    private readonly read?: () => number,
  ) {}

  add(by: number, labels: Labels = {}): void {
    const key = labelKey(labels);
    const s = this.#values.get(key);
    if (s === undefined) this.#values.set(key, { labels, value: by });
    else s.value += by;
  }

  async get(): Promise<Snapshot> {
    const values =
      this.read !== undefined
        ? [{ labels: {}, value: this.read() }]
        : [...this.#values.values()].map((s) => ({ labels: s.labels, value: s.value }));
    return {
      name: this.name,
      help: this.help,
      type: "gauge",
      aggregator: "sum",
      values,
    };
  }
}

interface HistogramSeries {
  readonly labels: Labels;
  /** Per bucket, not cumulative: observe adds 1 to one slot; get() sums. */
  readonly counts: number[];
  sum: number;
  count: number;
}

export class Histogram implements Collected {
  readonly #series = new Map<string, HistogramSeries>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[],
  ) {}

  observe(value: number, labels: Labels = {}): void {
    this.#record(this.#seriesOf(labels), value);
  }

  /** The series of `labels` (see Counter.child); it appears on its first observe. */
  child(labels: Labels): { observe(value: number): void } {
    let s: HistogramSeries | undefined;
    return {
      observe: (value) => {
        s ??= this.#seriesOf(labels);
        this.#record(s, value);
      },
    };
  }

  #seriesOf(labels: Labels): HistogramSeries {
    const key = labelKey(labels);
    let s = this.#series.get(key);
    if (s === undefined) {
      s = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 };
      this.#series.set(key, s);
    }
    return s;
  }

  #record(s: HistogramSeries, value: number): void {
    for (let i = 0; i < this.buckets.length; i++) {
      if (value <= (this.buckets[i] ?? Number.POSITIVE_INFINITY)) {
        s.counts[i] = (s.counts[i] ?? 0) + 1;
        break;
      }
    }
    s.sum += value;
    s.count++;
  }

  async get(): Promise<Snapshot> {
    const values: Sample[] = [];
    for (const s of this.#series.values()) {
      let cumulative = 0;
      this.buckets.forEach((le, i) => {
        cumulative += s.counts[i] ?? 0;
        values.push(sample(`${this.name}_bucket`, { ...s.labels, le: String(le) }, cumulative));
      });
      values.push(sample(`${this.name}_bucket`, { ...s.labels, le: "+Inf" }, s.count));
      values.push(sample(`${this.name}_sum`, s.labels, s.sum));
      values.push(sample(`${this.name}_count`, s.labels, s.count));
    }
    return {
      name: this.name,
      help: this.help,
      type: "histogram",
      aggregator: "sum",
      values,
    };
  }
}

function sample(metricName: string, labels: Labels, value: number): Sample {
  return { metricName, labels, value };
}

const SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export interface ServerMetricsOptions {
  /** prom-client's default process metrics (CPU, memory, heap, event loop, GC, handles). Default on. */
  readonly processMetrics?: boolean;
}

/** Every metric the server exports; one instance per server, injected where it is recorded. */
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
  readonly watchWakeupsMissed = new Counter(
    "windlass_watch_wakeups_missed_total",
    "Times a Watch stream's read before a Progress found events no wake-up had announced: the store's subscription lost them (an outage), or they landed just as the Progress was due.",
  );
  readonly #registry = new Registry();
  readonly #started = Date.now();

  constructor(options: ServerMetricsOptions = {}) {
    for (const m of [
      this.rpcs,
      this.rpcSeconds,
      this.folds,
      this.foldSeconds,
      this.degradedGets,
      this.watchers,
      this.watchWakeupsMissed,
    ]) {
      this.#register(m);
    }
    this.collect(
      "windlass_uptime_seconds",
      "Seconds since start.",
      () => (Date.now() - this.#started) / 1000,
    );
    // Includes process_resident_memory_bytes, which this module used to export itself.
    if (options.processMetrics !== false) collectDefaultMetrics({ register: this.#registry });
  }

  /** Adds a gauge read at scrape time (e.g. the fold queue's depth). */
  collect(name: string, help: string, read: () => number): void {
    this.#register(new Gauge(name, help, read));
  }

  /** The Content-Type of `render()`'s text. */
  get contentType(): string {
    return this.#registry.contentType;
  }

  /** Every series in the Prometheus text exposition format (0.0.4). */
  render(): Promise<string> {
    return this.#registry.metrics();
  }

  #register(metric: Collected): void {
    // The registry takes anything with a name and get(); its types want its own classes.
    this.#registry.registerMetric(metric as unknown as Parameters<Registry["registerMetric"]>[0]);
  }
}
