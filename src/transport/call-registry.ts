import { MemoryError } from "../core/errors.js";
import type { RateLimiter } from "../service/rate-limit.js";
import type { Authenticator } from "./auth.js";

/**
 * The life of calls in flight, shared by both transports: each call gets an
 * AbortSignal whose reason says why it ended (client cancel, deadline,
 * shutdown), and shutdown can find the calls it has to end.
 *
 * Abort reasons are MemoryErrors, so a core that rethrows `ctx.signal.reason`
 * (or calls `signal.throwIfAborted()`) produces an error the error table maps
 * to CANCELLED, DEADLINE_EXCEEDED or UNAVAILABLE without special cases.
 */

/** The client went away or cancelled the call. */
export function cancelledByClient(): MemoryError {
  return new MemoryError("cancelled", "call cancelled by the client");
}

/** The deadline the client set has passed. */
export function deadlineExceeded(): MemoryError {
  return new MemoryError("deadline_exceeded", "deadline exceeded");
}

/** The server is shutting down; the client should retry elsewhere. */
export function serverShuttingDown(): MemoryError {
  return new MemoryError("unavailable", "server shutting down");
}

/** The namespace has used up its requests per second; `retryAfterMs` goes out as RetryInfo. */
export function rateLimited(retryAfterMs: number): MemoryError {
  return new MemoryError(
    "resource_exhausted",
    `rate limit of this namespace exceeded; retry in ${retryAfterMs} ms`,
    { retryAfterMs },
  );
}

/** The client of a Watch has not read anything for `stallTimeoutMs`. */
export function watchStalled(stallTimeoutMs: number): MemoryError {
  return new MemoryError(
    "resource_exhausted",
    `watch client read nothing for ${stallTimeoutMs} ms; resume from the last resume_token`,
  );
}

/**
 * Admission of every MemoryService call, on both transports: the caller's
 * namespace from its bearer token, then one token from that namespace's rate
 * bucket. Throws MemoryError unauthenticated or resource_exhausted.
 */
export function admitCall(
  deps: { readonly authenticator: Authenticator; readonly rateLimiter?: RateLimiter | undefined },
  authorization: string | undefined,
): string {
  const namespace = deps.authenticator.namespaceOf(authorization);
  const decision = deps.rateLimiter?.take(namespace);
  if (decision !== undefined && !decision.allowed) throw rateLimited(decision.retryAfterMs);
  return namespace;
}

/**
 * A client cancels at its own deadline, and the server computes the same
 * deadline from the timeout header plus the time the request took to arrive
 * and be dispatched, so the cancel lands before the server's deadline by that
 * delay: a few ms when idle, a hundred or more on a loaded machine. A cancel
 * in the last quarter of the call's time (and at least the last
 * DEADLINE_SLACK_MS) counts as the deadline; a client that gives up for
 * another reason that late is told apart from a timeout only in the server's
 * metrics and logs, never in what the client sees.
 */
export const DEADLINE_SLACK_MS = 25;

/**
 * Why a call the client stopped has ended: its deadline, or a plain cancel.
 * `begunAt`: when the server began the call (ms since the epoch).
 */
export function clientStopReason(deadline: number | undefined, begunAt: number): MemoryError {
  if (deadline === undefined) return cancelledByClient();
  const slack = Math.max(DEADLINE_SLACK_MS, (deadline - begunAt) / 4);
  return Date.now() >= deadline - slack ? deadlineExceeded() : cancelledByClient();
}

/** Streams (Watch) end as shutdown starts; unary calls may finish. */
export type CallKind = "unary" | "stream";

/** One call in flight. */
export interface ActiveCall {
  /** Aborted on client cancel, deadline or shutdown; `reason` is a MemoryError saying which. */
  readonly signal: AbortSignal;
  /** Absolute deadline in ms since the epoch, if the client set one. */
  readonly deadline: number | undefined;
  /** When the call was registered, in ms since the epoch. */
  readonly begunAt: number;
  /** Aborts the call's signal. The first reason wins. */
  abort(reason: MemoryError): void;
  /** Untracks the call and stops its deadline timer. Idempotent. */
  end(): void;
}

// setTimeout fires at once for delays above 2^31-1 ms; such deadlines (24
// days away) are treated as none.
const MAX_TIMER_DELAY_MS = 2_147_483_647;

/**
 * Where a client's cancel comes from (a grpc-js call): `cancelled` once the
 * client has gone, and a "cancelled" event when it goes.
 */
export interface CancelSource {
  readonly cancelled: boolean;
  on(event: "cancelled", listener: () => void): unknown;
  off(event: "cancelled", listener: () => void): unknown;
}

/**
 * One registered call. A class rather than closures: a unary call on the
 * hot path makes one object here, and nothing else until its signal is read.
 */
class RegisteredCall implements ActiveCall {
  readonly kind: CallKind;
  readonly deadline: number | undefined;
  readonly begunAt: number;
  readonly #entries: Set<RegisteredCall>;
  readonly #source: CancelSource | undefined;
  #controller: AbortController | undefined;
  #pending: MemoryError | undefined;
  #timer: NodeJS.Timeout | undefined;
  #onCancelled: (() => void) | undefined;

  constructor(
    entries: Set<RegisteredCall>,
    kind: CallKind,
    deadline: number | undefined,
    source: CancelSource | undefined,
  ) {
    this.#entries = entries;
    this.kind = kind;
    this.deadline = deadline;
    this.begunAt = Date.now();
    this.#source = source;
  }

  get signal(): AbortSignal {
    if (this.#controller !== undefined) return this.#controller.signal;
    const c = new AbortController();
    this.#controller = c;
    const source = this.#source;
    if (source !== undefined && this.#pending === undefined) {
      // The client's cancel matters only to code that reads the signal, so
      // the listener is added now rather than on every call.
      if (source.cancelled) {
        this.#pending = clientStopReason(this.deadline, this.begunAt);
      } else {
        this.#onCancelled = () => this.abort(clientStopReason(this.deadline, this.begunAt));
        source.on("cancelled", this.#onCancelled);
      }
    }
    const deadline = this.deadline;
    if (this.#pending !== undefined) {
      c.abort(this.#pending);
    } else if (deadline !== undefined) {
      const delay = deadline - Date.now();
      if (delay <= 0) {
        c.abort(deadlineExceeded());
      } else if (delay <= MAX_TIMER_DELAY_MS) {
        this.#timer = setTimeout(() => this.abort(deadlineExceeded()), delay);
        // A call's deadline must not keep the process alive on its own.
        this.#timer.unref();
      }
    }
    return c.signal;
  }

  abort(reason: MemoryError): void {
    const c = this.#controller;
    if (c === undefined) this.#pending ??= reason;
    else if (!c.signal.aborted) c.abort(reason);
  }

  end(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#onCancelled !== undefined) {
      this.#source?.off("cancelled", this.#onCancelled);
      this.#onCancelled = undefined;
    }
    this.#entries.delete(this);
  }
}

/** Tracks the calls in flight of one or more servers. */
export class CallRegistry {
  readonly #entries = new Set<RegisteredCall>();
  #refuseStreams = false;
  #refuseAll = false;

  /** Number of calls in flight. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Registers a call. Its signal aborts with `deadlineExceeded()` when
   * `deadline` passes, and with clientStopReason when `source` reports the
   * client's cancel; it is already aborted when the call arrives after
   * shutdown has ended calls of its kind.
   *
   * Most calls (an Add, a window Get) never look at their signal, and an
   * AbortController, a deadline timer and a cancel listener cost several
   * microseconds per call: they are made the first time `signal` is read. An
   * abort before that is remembered and applied then.
   */
  begin(kind: CallKind, deadline: number | undefined, source?: CancelSource): ActiveCall {
    const call = new RegisteredCall(this.#entries, kind, deadline, source);
    if (deadline !== undefined && deadline <= call.begunAt) call.abort(deadlineExceeded());
    if (this.#refuseAll || (kind === "stream" && this.#refuseStreams)) {
      call.abort(serverShuttingDown());
    }
    this.#entries.add(call);
    return call;
  }

  /**
   * First step of shutdown: aborts every open stream, and every stream that
   * begins from now on, with `serverShuttingDown()`. Unary calls go on.
   */
  endStreams(): void {
    this.#refuseStreams = true;
    for (const entry of this.#entries) {
      if (entry.kind === "stream") abortWith(entry, serverShuttingDown());
    }
  }

  /** Last step of shutdown: aborts every call, and every call begun later. */
  abortAll(): void {
    this.#refuseStreams = true;
    this.#refuseAll = true;
    for (const entry of this.#entries) abortWith(entry, serverShuttingDown());
  }
}

function abortWith(entry: RegisteredCall, reason: MemoryError): void {
  entry.abort(reason);
}
