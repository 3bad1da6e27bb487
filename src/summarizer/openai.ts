import { STATUS_CODES } from "node:http";
import type { ChatMessage } from "../core/types.js";
import { withTraceHeaders } from "../tracing.js";
import type { SummarizeInput, Summarizer } from "./summarizer.js";

/** Options of {@link createOpenAiSummarizer}. */
export interface OpenAiSummarizerOptions {
  /** The name SummaryStrategy.model selects it by; default "openai". */
  name?: string;
  /** The API's base URL, e.g. "https://api.openai.com/v1" or "http://127.0.0.1:8000/v1". */
  baseUrl: string;
  /** The model the endpoint should run, e.g. "gpt-4o-mini". */
  model: string;
  /** Sent as `Authorization: Bearer <key>` when set and not empty. */
  apiKey?: string;
  /** Bound on one attempt (request and response body); default 30000. */
  timeoutMs?: number;
  /** Attempts after the first one for transient failures; default 2. */
  maxRetries?: number;
  /** Backoff before the first retry; it doubles with each retry, with jitter. Default 250. */
  initialBackoffMs?: number;
  /** Ceiling on one backoff, also on a server's Retry-After; default 5000. */
  maxBackoffMs?: number;
  /**
   * Length the model is asked to keep the summary under, and at which a longer
   * reply is cut, so the summary (part of every later prompt) cannot grow
   * without bound. Default 4000.
   */
  maxSummaryChars?: number;
}

/** What went wrong in the attempt that decided a {@link SummarizerError}. */
export type SummarizerFailureKind = "http" | "timeout" | "network" | "malformed";

/**
 * A fold that the model endpoint could not do. The message is safe for logs
 * and clients: it names the summariser, the kind of failure, the HTTP status
 * and the number of attempts, and never the API key, the messages or the
 * response body.
 */
export class SummarizerError extends Error {
  override readonly name = "SummarizerError";
  readonly kind: SummarizerFailureKind;
  /** The HTTP status of the last attempt, when it got one. */
  readonly status: number | undefined;
  readonly attempts: number;
  /** Whether the last failure was transient (then only the retry budget ran out). */
  readonly retryable: boolean;

  constructor(
    message: string,
    details: {
      kind: SummarizerFailureKind;
      status?: number | undefined;
      attempts: number;
      retryable: boolean;
    },
  ) {
    super(message);
    this.kind = details.kind;
    this.status = details.status;
    this.attempts = details.attempts;
    this.retryable = details.retryable;
  }
}

const SYSTEM_PROMPT =
  "You maintain the running summary of a conversation between a user, an assistant and " +
  "the assistant's tools. You are given the summary so far and the conversation lines that " +
  "followed it. Write the updated summary: concise and factual, keeping names, facts, " +
  "decisions, open questions and tool results that later turns may need, and dropping " +
  "pleasantries. Reply with the summary text only, in at most MAX characters.";

/**
 * Creates a summariser that calls an OpenAI-compatible Chat Completions
 * endpoint (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM …) with a progressive
 * prompt: the previous summary and the new lines in, the new summary out, at
 * temperature 0.
 *
 * Each attempt is bounded by `timeoutMs`. Transient failures (network errors,
 * timeouts, HTTP 408, 429 and 5xx, malformed or empty replies) are retried up
 * to `maxRetries` times with exponential backoff and jitter, so a replica fleet
 * does not retry in lockstep; other HTTP errors (400, 401, 404 …) are
 * configuration or input errors that a retry would not fix. When the caller's
 * signal aborts, the request or the backoff ends at once and the promise
 * rejects with the signal's reason. Every other failure is a
 * {@link SummarizerError}.
 */
export function createOpenAiSummarizer(opts: OpenAiSummarizerOptions): Summarizer {
  const c = resolveOptions(opts);
  return {
    name: c.name,
    async summarize(input: SummarizeInput, signal: AbortSignal): Promise<string> {
      signal.throwIfAborted();
      const body = JSON.stringify({
        model: opts.model,
        messages: [
          { role: "system", content: SYSTEM_PROMPT.replace("MAX", String(c.maxSummaryChars)) },
          { role: "user", content: userPrompt(input) },
        ],
        temperature: 0,
      });
      for (let attempts = 1; ; attempts++) {
        const outcome = await attempt(c, body, signal);
        if (outcome.ok) return outcome.summary;
        if (!outcome.retryable || attempts > c.maxRetries) {
          const tries = attempts === 1 ? "1 attempt" : `${attempts} attempts`;
          throw new SummarizerError(`${c.label} failed: ${outcome.description} (${tries})`, {
            kind: outcome.kind,
            status: outcome.status,
            attempts,
            retryable: outcome.retryable,
          });
        }
        const exponential = Math.min(c.maxBackoffMs, c.initialBackoffMs * 2 ** (attempts - 1));
        // "Equal jitter": at least half the exponential delay, so retries still back off.
        const backoff = exponential / 2 + Math.random() * (exponential / 2);
        await sleep(Math.min(c.maxBackoffMs, Math.max(backoff, outcome.retryAfterMs ?? 0)), signal);
      }
    },
  };
}

/** The options with their defaults, checked; the request's URL and headers. */
interface ResolvedOptions {
  name: string;
  label: string;
  url: string;
  headers: Record<string, string>;
  timeoutMs: number;
  maxRetries: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
  maxSummaryChars: number;
}

function resolveOptions(opts: OpenAiSummarizerOptions): ResolvedOptions {
  const name = opts.name ?? "openai";
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const maxRetries = opts.maxRetries ?? 2;
  const initialBackoffMs = opts.initialBackoffMs ?? 250;
  const maxBackoffMs = opts.maxBackoffMs ?? Math.max(5000, initialBackoffMs);
  const maxSummaryChars = opts.maxSummaryChars ?? 4000;
  const url = completionsUrl(opts.baseUrl, name);
  if (name === "") throw new Error("openai summarizer: name must not be empty");
  if (opts.model === "") throw new Error(`summarizer "${name}": model must not be empty`);
  requireInteger(name, "timeoutMs", timeoutMs, 1);
  requireInteger(name, "maxRetries", maxRetries, 0);
  requireInteger(name, "initialBackoffMs", initialBackoffMs, 0);
  requireInteger(name, "maxBackoffMs", maxBackoffMs, initialBackoffMs);
  requireInteger(name, "maxSummaryChars", maxSummaryChars, 1);
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: "application/json",
  };
  if (opts.apiKey) headers.authorization = `Bearer ${opts.apiKey}`;
  return {
    name,
    label: `summarizer "${name}" (model ${opts.model})`,
    url,
    headers,
    timeoutMs,
    maxRetries,
    initialBackoffMs,
    maxBackoffMs,
    maxSummaryChars,
  };
}

/** One request to the endpoint, bounded by timeoutMs; what it came to. */
async function attempt(
  c: ResolvedOptions,
  body: string,
  signal: AbortSignal,
): Promise<AttemptOutcome> {
  // The attempt's own controller and a timer held here, both cleared when the
  // attempt ends. Not AbortSignal.any with AbortSignal.timeout: a composite
  // holds its sources weakly, so on Node releases without the fix for
  // nodejs/node#57736 garbage collection can take the timeout signal before
  // it fires, and a stalled endpoint then holds the call forever.
  signal.throwIfAborted();
  const attemptAbort = new AbortController();
  const onAbort = (): void => attemptAbort.abort(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    attemptAbort.abort(new DOMException(`timed out after ${c.timeoutMs} ms`, "TimeoutError"));
  }, c.timeoutMs);
  try {
    const response = await fetch(c.url, {
      method: "POST",
      headers: withTraceHeaders(c.headers),
      body,
      signal: attemptAbort.signal,
    });
    // Read the body even on errors: it frees the connection for reuse.
    const text = await response.text();
    return replyOutcome(response, text, c.maxSummaryChars);
  } catch (err) {
    if (signal.aborted) throw signal.reason;
    if (timedOut) {
      return {
        ok: false,
        kind: "timeout",
        retryable: true,
        description: `timed out after ${c.timeoutMs} ms`,
      };
    }
    return { ok: false, kind: "network", retryable: true, description: networkFailure(err) };
  } finally {
    clearTimeout(timer);
    signal.removeEventListener("abort", onAbort);
  }
}

/** An answer's outcome: its summary, or why it has none and whether a retry may help. */
function replyOutcome(response: Response, text: string, maxSummaryChars: number): AttemptOutcome {
  if (!response.ok) {
    return {
      ok: false,
      kind: "http",
      status: response.status,
      retryable: isRetryableStatus(response.status),
      retryAfterMs: parseRetryAfter(response.headers.get("retry-after")),
      description: `HTTP ${response.status}${statusText(response.status)}`,
    };
  }
  const summary = parseSummary(text);
  if (summary === undefined) {
    return {
      ok: false,
      kind: "malformed",
      status: response.status,
      retryable: true,
      description: "malformed reply (no summary text in choices[0].message.content)",
    };
  }
  return { ok: true, summary: clip(summary, maxSummaryChars) };
}

type AttemptOutcome =
  | { ok: true; summary: string }
  | {
      ok: false;
      kind: SummarizerFailureKind;
      status?: number;
      retryable: boolean;
      retryAfterMs?: number | undefined;
      /** Safe for logs: built only from the status and our own words. */
      description: string;
    };

/** The user turn: the summary so far, then the new lines as `role: content`. */
function userPrompt(input: SummarizeInput): string {
  const previous = input.previousSummary.trim() || "(none)";
  return [
    "Summary so far:",
    previous,
    "",
    "New conversation lines:",
    ...renderLines(input.messages),
    "",
    "Updated summary:",
  ].join("\n");
}

/** One entry per message; continuation lines are indented so entries stay apart. */
function renderLines(messages: ChatMessage[]): string[] {
  const toolNames = new Map<string, string>();
  for (const message of messages) {
    for (const call of message.toolCalls ?? []) toolNames.set(call.id, call.name);
  }
  const lines: string[] = [];
  for (const message of messages) {
    const content = message.content.trim().replace(/\r?\n/g, "\n  ");
    if (message.role === "tool") {
      const tool =
        message.name ||
        (message.toolCallId === undefined ? undefined : toolNames.get(message.toolCallId)) ||
        "unknown tool";
      lines.push(`tool result (${tool}): ${content}`);
      continue;
    }
    const speaker = message.name ? `${message.role} (${message.name})` : message.role;
    if (content !== "" || !message.toolCalls?.length) lines.push(`${speaker}: ${content}`);
    for (const call of message.toolCalls ?? []) {
      lines.push(`${speaker} called tool ${call.name} with arguments ${call.arguments}`);
    }
  }
  return lines;
}

/** The trimmed `choices[0].message.content`, or undefined when absent or empty. */
function parseSummary(text: string): string | undefined {
  let reply: unknown;
  try {
    reply = JSON.parse(text);
  } catch {
    return undefined;
  }
  const content = property(property(item(property(reply, "choices"), 0), "message"), "content");
  if (typeof content !== "string") return undefined;
  const summary = content.trim();
  return summary === "" ? undefined : summary;
}

function property(value: unknown, key: string): unknown {
  return typeof value === "object" && value !== null ? Reflect.get(value, key) : undefined;
}

function item(value: unknown, index: number): unknown {
  return Array.isArray(value) ? value[index] : undefined;
}

function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/**
 * The standard reason phrase for a status, never the server's own text: a
 * proxy could put anything there.
 */
function statusText(status: number): string {
  const phrase = STATUS_CODES[status];
  return phrase ? ` ${phrase}` : "";
}

/** Retry-After in seconds (the HTTP-date form is ignored), as milliseconds. */
function parseRetryAfter(header: string | null): number | undefined {
  if (header === null || !/^\d+$/.test(header.trim())) return undefined;
  return Number(header.trim()) * 1000;
}

/**
 * fetch reports network failures as "fetch failed" with the system error as
 * the cause; only its code (ECONNREFUSED …) is kept, never a message.
 */
function networkFailure(err: unknown): string {
  const code = property(property(err, "cause"), "code");
  return typeof code === "string" && /^[A-Z0-9_]{1,40}$/.test(code)
    ? `network error (${code})`
    : "network error";
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * The chat completions URL under the base URL. A base URL with credentials in
 * it is refused (fetch would refuse it too), without echoing it.
 */
function completionsUrl(baseUrl: string, name: string): string {
  let parsed: URL;
  try {
    parsed = new URL(baseUrl);
  } catch {
    throw new Error(`summarizer "${name}": baseUrl is not a valid URL`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new Error(`summarizer "${name}": baseUrl must be an http or https URL`);
  }
  if (parsed.username !== "" || parsed.password !== "") {
    throw new Error(`summarizer "${name}": baseUrl must not contain credentials; use apiKey`);
  }
  // A loop, not /\/+$/: that pattern rescans a run of slashes from each of them.
  let end = baseUrl.length;
  while (end > 0 && baseUrl[end - 1] === "/") end -= 1;
  return `${baseUrl.slice(0, end)}/chat/completions`;
}

function requireInteger(name: string, option: string, value: number, min: number): void {
  if (!Number.isInteger(value) || value < min) {
    throw new Error(`summarizer "${name}": ${option} must be an integer >= ${min}, got ${value}`);
  }
}

/** Cuts a reply to `max` UTF-16 code units, never inside a surrogate pair. */
function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  const last = text.charCodeAt(max - 1);
  const cut = text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
  return cut.trimEnd();
}
