import * as http2 from "node:http2";
import { performance } from "node:perf_hooks";
import { Client, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";

/**
 * A closed-loop load driver for unary gRPC calls: `concurrency` calls are
 * always in flight; each completion starts the next call until the duration
 * is over. Requests go out as pre-encoded bytes and responses are not
 * decoded, so the client does the same work for every server and the
 * difference between servers is the servers' own.
 *
 * Two clients drive the load:
 * - "grpc-js": @grpc/grpc-js channels, what a Node client of the service uses.
 * - "h2": gRPC framing written by hand on node:http2 sessions. It costs the
 *   driver about a quarter of the CPU per call of grpc-js, but still 87-101
 *   µs per call in the recorded run: on a 2-core machine it held the bare
 *   server back (h2load.ts has the figures), which is why the unary bench
 *   also drives with h2load.
 */

/** The drivers that run inside the bench's own process (openConnections). */
export type InProcessDriver = "grpc-js" | "h2";
/** Every load driver of the unary bench; "h2load" is a child process (h2load.ts). */
export type DriverKind = InProcessDriver | "h2load";

/** One connection (HTTP/2 session) able to make unary calls. */
interface Connection {
  /** Starts a call; `done` gets undefined on OK, else "CODE message". */
  unary(path: string, request: Buffer, timeoutMs: number, done: (error?: string) => void): void;
}

export interface Connections {
  readonly driver: InProcessDriver;
  readonly connections: readonly Connection[];
  close(): void;
}

const identity = (bytes: Buffer): Buffer => bytes;

/** Opens `count` connections of `driver` to `address` ("127.0.0.1:port"). */
export function openConnections(
  driver: InProcessDriver,
  address: string,
  count: number,
): Connections {
  return driver === "grpc-js" ? openGrpcJs(address, count) : openH2(address, count);
}

function openGrpcJs(address: string, count: number): Connections {
  // A local subchannel pool per channel: otherwise grpc-js shares one
  // subchannel (one HTTP/2 connection) between channels to the same target.
  const clients = Array.from(
    { length: count },
    () =>
      new Client(address, credentials.createInsecure(), { "grpc.use_local_subchannel_pool": 1 }),
  );
  return {
    driver: "grpc-js",
    connections: clients.map((client) => ({
      unary(path, request, timeoutMs, done) {
        client.makeUnaryRequest(
          path,
          identity,
          identity,
          request,
          new Metadata(),
          { deadline: Date.now() + timeoutMs },
          (err: ServiceError | null) =>
            done(err === null ? undefined : `${err.code} ${err.details}`),
        );
      },
    })),
    close() {
      for (const client of clients) client.close();
    },
  };
}

function openH2(address: string, count: number): Connections {
  const sessions = Array.from({ length: count }, () => {
    const session = http2.connect(`http://${address}`);
    // A failed session fails its calls (their 'close' reports no status);
    // without a listener the error would be thrown.
    session.on("error", () => {});
    return session;
  });
  return {
    driver: "h2",
    connections: sessions.map((session) => ({
      unary(path, request, timeoutMs, done) {
        let stream: http2.ClientHttp2Stream;
        try {
          stream = session.request({
            ":method": "POST",
            ":path": path,
            "content-type": "application/grpc",
            te: "trailers",
            // The same deadline the grpc-js driver sends, so servers arm the same timers.
            "grpc-timeout": `${timeoutMs}m`,
          });
        } catch (err) {
          // A closed or failed session throws here; report it as a failed
          // call, on a later turn so that the driver's loop cannot spin.
          const reason = err instanceof Error ? err.message : String(err);
          setImmediate(() => done(`request failed: ${reason}`));
          return;
        }
        let status: string | undefined;
        let message = "";
        const onStatus = (headers: http2.IncomingHttpHeaders): void => {
          const s = headers["grpc-status"];
          if (typeof s === "string") status = s;
          const m = headers["grpc-message"];
          if (typeof m === "string") message = percentDecoded(m);
        };
        // Trailers-only responses (errors) carry the status in the headers.
        stream.on("response", onStatus);
        stream.on("trailers", onStatus);
        // A reset stream emits 'error' and then 'close' without a status,
        // which is where the failure is counted.
        stream.on("error", () => {});
        stream.resume();
        stream.on("close", () => {
          if (status === "0") done();
          else
            done(
              status === undefined
                ? `no grpc-status (rst ${stream.rstCode})`
                : `${status} ${message}`,
            );
        });
        stream.end(grpcFrame(request));
      },
    })),
    close() {
      for (const session of sessions) session.close();
    },
  };
}

/** grpc-message is percent-encoded; a malformed one is shown as sent. */
function percentDecoded(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

const frames = new WeakMap<Buffer, Buffer>();

/** The request as one gRPC length-prefixed message (uncompressed), built once per request. */
export function grpcFrame(message: Buffer): Buffer {
  let frame = frames.get(message);
  if (frame === undefined) {
    frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    frames.set(message, frame);
  }
  return frame;
}

export interface LoadOptions {
  /** Calls in flight at once, spread round-robin over the connections. */
  readonly concurrency: number;
  /** No call starts after this. */
  readonly durationMs: number;
  /** gRPC deadline of each call. Calls still open this long after the end count as errors. */
  readonly callTimeoutMs: number;
  /** No call starts after this many have started (default: no limit but the duration). */
  readonly maxCalls?: number;
}

export interface LoadResult {
  readonly calls: number;
  readonly errors: number;
  /** "CODE details" of the first failed call. */
  readonly firstError: string | undefined;
  /** From the first call to the last completion. */
  readonly elapsedMs: number;
  /** Latency of each successful call, in ms, in completion order. */
  readonly latenciesMs: Float64Array;
}

// A bound on the calls one run may record, far above what one process can
// complete in a measurement; it keeps the latency buffer finite.
const MAX_CALLS = 20_000_000;

/** Runs unary calls of `path`, cycling through `requests`, for `options.durationMs`. */
export function runLoad(
  target: Connections,
  path: string,
  requests: readonly Buffer[],
  options: LoadOptions,
): Promise<LoadResult> {
  if (requests.length === 0 || target.connections.length === 0) {
    throw new Error("runLoad: nothing to send or nowhere to send it");
  }
  return new Promise((resolve) => {
    let latencies = new Float64Array(65_536);
    let calls = 0;
    let errors = 0;
    let firstError: string | undefined;
    let nextRequest = 0;
    let started = 0;
    let inFlight = 0;
    let lastDone = 0;
    let finished = false;
    const start = performance.now();
    const end = start + options.durationMs;
    const maxStarted = Math.min(options.maxCalls ?? MAX_CALLS, MAX_CALLS);

    const finish = (): void => {
      if (finished) return;
      finished = true;
      clearTimeout(straggler);
      // Calls that never completed are failures, not silently dropped.
      errors += inFlight;
      if (inFlight > 0) firstError ??= `${inFlight} calls did not complete`;
      resolve({
        calls,
        errors,
        firstError,
        elapsedMs: (lastDone || performance.now()) - start,
        latenciesMs: latencies.subarray(0, calls),
      });
    };
    // One timer for the whole run rather than one per call.
    const straggler = setTimeout(finish, options.durationMs + options.callTimeoutMs + 1_000);

    const issue = (connection: Connection): void => {
      const request = requests[nextRequest] as Buffer;
      nextRequest = (nextRequest + 1) % requests.length;
      started++;
      inFlight++;
      const sent = performance.now();
      connection.unary(path, request, options.callTimeoutMs, (error) => {
        if (finished) return;
        const done = performance.now();
        inFlight--;
        lastDone = done;
        if (error === undefined) {
          if (calls === latencies.length) {
            const grown = new Float64Array(latencies.length * 2);
            grown.set(latencies);
            latencies = grown;
          }
          latencies[calls++] = done - sent;
        } else {
          errors++;
          firstError ??= error;
        }
        if (done < end && started < maxStarted) issue(connection);
        else if (inFlight === 0) finish();
      });
    };

    for (let i = 0; i < Math.min(options.concurrency, maxStarted); i++) {
      issue(target.connections[i % target.connections.length] as Connection);
    }
  });
}

/** One grpc-js unary call, bytes in and bytes out: for seeding and capturing responses. */
export function callOnce(
  address: string,
  path: string,
  request: Buffer,
  timeoutMs: number,
): Promise<Buffer> {
  const client = new Client(address, credentials.createInsecure());
  return new Promise<Buffer>((resolve, reject) => {
    client.makeUnaryRequest(
      path,
      identity,
      identity,
      request,
      new Metadata(),
      { deadline: Date.now() + timeoutMs },
      (err: ServiceError | null, value?: Buffer) => {
        if (err !== null) reject(new Error(`${path}: ${err.code} ${err.details}`));
        else if (value === undefined) reject(new Error(`${path}: no response`));
        else resolve(value);
      },
    );
  }).finally(() => client.close());
}

/** The q-quantile (0..1) of already sorted values, nearest rank. */
export function quantile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank] ?? Number.NaN;
}
