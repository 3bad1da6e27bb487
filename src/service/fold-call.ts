import type { SummarizeInput, Summarizer } from "../summarizer/summarizer.js";

/**
 * The model call of one fold, ended at the deadline or at shutdown, whichever
 * comes first. The deadline is a timer held here and cleared when the call
 * ends: an AbortSignal.timeout inside AbortSignal.any can be garbage-collected
 * before it fires (nodejs/node#57736, on releases without its fix), and then
 * a stalled model endpoint would hold the fold slot for good. The call is
 * also raced against the deadline, so even a summariser that ignores its
 * signal gives the slot back on time.
 */
export async function summarizeWithinDeadline(
  summarizer: Summarizer,
  input: SummarizeInput,
  deadlineMs: number,
  closing: AbortSignal,
): Promise<string> {
  const abort = new AbortController();
  const onClosing = (): void => abort.abort(closing.reason);
  closing.addEventListener("abort", onClosing, { once: true });
  const timer = setTimeout(() => {
    abort.abort(
      new DOMException(`the summariser did not answer within ${deadlineMs} ms`, "TimeoutError"),
    );
  }, deadlineMs);
  let onAbort: (() => void) | undefined;
  const ended = new Promise<never>((_, reject) => {
    onAbort = () => reject(abort.signal.reason);
    abort.signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    closing.throwIfAborted();
    const call = summarizer.summarize(input, abort.signal);
    // A summariser that ignored the abort may still settle later: nobody waits for it.
    call.catch(() => {});
    return await Promise.race([call, ended]);
  } finally {
    clearTimeout(timer);
    closing.removeEventListener("abort", onClosing);
    if (onAbort !== undefined) abort.signal.removeEventListener("abort", onAbort);
  }
}

/**
 * How long a fold's model call may take under a lease of `leaseMs`: a second
 * less, to leave time to commit before the lease can pass to someone else.
 */
export function foldDeadlineMs(leaseMs: number): number {
  return Math.max(1, leaseMs - 1000);
}

/**
 * The wait before retry `attempt` (1 after the first failure): `initialMs`
 * doubling per failure up to `maxMs`, less up to half of it at random
 * (`random` in [0, 1)), so replicas that failed together do not retry in step.
 */
export function retryDelayMs(
  attempt: number,
  initialMs: number,
  maxMs: number,
  random: number,
): number {
  const base = Math.min(maxMs, initialMs * 2 ** (attempt - 1));
  return base / 2 + random * (base / 2);
}

/** A reason safe to show clients: the error's own message, never a stack. */
export function failureReason(err: unknown): string {
  if (err instanceof Error) {
    if (err.name === "TimeoutError" && err.message === "") {
      return "the summariser did not answer in time";
    }
    return err.message.slice(0, 500);
  }
  return "the summariser failed";
}
