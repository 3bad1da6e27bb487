/**
 * A fake model provider for tests: a real HTTP server on 127.0.0.1 (a free
 * port) that speaks the OpenAI Chat Completions protocol, with scripted
 * replies and faults. Code under test talks to it over the wire exactly as it
 * would to OpenAI, vLLM or Ollama, so timeouts, retries and aborts are tested
 * for real.
 *
 * ```ts
 * const llm = await startFakeLlm({ script: [{ status: 500 }, { reply: "a summary" }] });
 * const summarizer = createOpenAiSummarizer({ baseUrl: llm.baseUrl, model: "fake" });
 * // … llm.requests holds what the client sent …
 * await llm.close();
 * ```
 */
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import type { AddressInfo, Socket } from "node:net";

/** The part of a chat completion request the fake understands. */
export interface ChatCompletionBody {
  model: string;
  messages: { role: string; content: string }[];
  /** Any other field the client sent (temperature …), as sent. */
  [field: string]: unknown;
}

/** A request the fake received, in arrival order. */
export interface RecordedRequest {
  /** 1 for the first request the server received, 2 for the next … */
  index: number;
  method: string;
  /** The path without the query string, e.g. "/v1/chat/completions". */
  path: string;
  /** Lower-cased header names, as node:http gives them. */
  headers: IncomingHttpHeaders;
  rawBody: string;
  /**
   * The parsed body; undefined when it was not a chat completion request (a
   * model and messages with string contents): such a request is answered 400
   * and does not consume a step.
   */
  body: ChatCompletionBody | undefined;
  /** Date.now() when the request had arrived in full. */
  receivedAt: number;
  /**
   * Date.now() when the exchange ended: the reply was sent, or the connection
   * closed before it was (the client gave up on a hung request, or close()).
   */
  endedAt: number | undefined;
}

/**
 * When a step answers: after `delayMs`, and once `until` (if given) has
 * settled, so a test can hold a reply until it has seen what it waits for.
 */
export interface StepTiming {
  delayMs?: number;
  until?: Promise<unknown>;
}

/** What the fake does with one chat completion request. */
export type FakeStep =
  | FakeAction
  /**
   * Picks the action from the request, e.g. by `request.body?.model` or by
   * the prompt's content, so one server can be healthy for some callers and
   * faulty for others.
   */
  | { route: (request: RecordedRequest) => FakeAction };

/** One of the fake's replies or faults. */
export type FakeAction =
  /** Answers 200 with this assistant content (a function computes it from the request). */
  | ({ reply: string | ((request: RecordedRequest) => string) } & StepTiming)
  /**
   * Answers with this status and body (default: an OpenAI-style error object),
   * e.g. `{ status: 500 }`, `{ status: 429, headers: { "retry-after": "1" } }`,
   * or `{ status: 200, body: '{"choices":[]}' }` for a well-formed but useless reply.
   */
  | ({ status: number; body?: string; headers?: Record<string, string> } & StepTiming)
  /** Answers 200 with a body that is not JSON. */
  | ({ malformed: true } & StepTiming)
  /**
   * Never answers, until the client gives up or close() is called. With
   * `afterHeaders`, sends the status line, headers and part of the body first,
   * then stalls.
   */
  | { hang: true; afterHeaders?: boolean };

export interface FakeLlmOptions {
  /** Steps for the first requests, consumed in order. */
  script?: FakeStep[];
  /** What requests get once the script is used up; default {@link numberedReply}. */
  fallback?: FakeStep;
}

export interface FakeLlm {
  /** The API base URL, "http://127.0.0.1:PORT/v1", as clients are configured with it. */
  readonly baseUrl: string;
  /** Every request received, oldest first; a live array (tests may clear it). */
  readonly requests: RecordedRequest[];
  /** Appends steps to the script. */
  push(...steps: FakeStep[]): void;
  /** Replaces the step used once the script is empty. */
  setFallback(step: FakeStep): void;
  /** Steps still scripted, not yet consumed. */
  pending(): number;
  /** Requests whose answer has been written out in full. */
  answered(): number;
  /** Stops the server and destroys open connections, hung ones included. Idempotent. */
  close(): Promise<void>;
}

/** The default fallback: "summary #N", N being the request's index. */
export const numberedReply: FakeStep = { reply: (request) => `summary #${request.index}` };

const COMPLETIONS_PATH = "/v1/chat/completions";

/** Starts a fake on a free port of 127.0.0.1. Always close() it (afterEach/afterAll). */
export async function startFakeLlm(opts: FakeLlmOptions = {}): Promise<FakeLlm> {
  const script: FakeStep[] = [...(opts.script ?? [])];
  let fallback: FakeStep = opts.fallback ?? numberedReply;
  const requests: RecordedRequest[] = [];
  const sockets = new Set<Socket>();
  /** Delayed replies waiting; close() ends the waits so no handler lingers. */
  const waits = new Map<NodeJS.Timeout, () => void>();
  let received = 0;
  let closing: Promise<void> | undefined;
  let markClosing: () => void = () => {};
  /** Resolves when close() is called: held replies stop waiting. */
  const closeCalled = new Promise<void>((resolve) => {
    markClosing = resolve;
  });

  /** Waits ms, or until close(): the caller checks `closing` afterwards. */
  function wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        waits.delete(timer);
        resolve();
      }, ms);
      waits.set(timer, resolve);
    });
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const rawBody = await readBody(req);
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const recorded: RecordedRequest = {
      index: ++received,
      method: req.method ?? "",
      path,
      headers: req.headers,
      rawBody,
      body: parseChatCompletion(rawBody),
      receivedAt: Date.now(),
      endedAt: undefined,
    };
    res.once("close", () => {
      recorded.endedAt = Date.now();
    });
    requests.push(recorded);
    if (path !== COMPLETIONS_PATH) return sendError(res, 404, `no route for ${path}`);
    if (req.method !== "POST") return sendError(res, 405, "use POST");
    if (recorded.body === undefined) return sendError(res, 400, "not a chat completion request");

    const next = script.shift() ?? fallback;
    const step = "route" in next ? next.route(recorded) : next;
    if ("hang" in step) {
      if (step.afterHeaders) {
        res.writeHead(200, { "content-type": "application/json" });
        res.write('{"id":"chatcmpl-fake","choices":[');
      }
      return; // The socket stays open until the client leaves or close() destroys it.
    }
    if (step.delayMs !== undefined) await wait(step.delayMs);
    if (step.until !== undefined) await Promise.race([step.until.catch(() => {}), closeCalled]);
    if (closing !== undefined || res.destroyed) return;
    if ("malformed" in step) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end("<html>this is not JSON");
      return;
    }
    if ("status" in step) {
      if (step.body === undefined) return sendError(res, step.status, "fake failure", step.headers);
      res.writeHead(step.status, { "content-type": "application/json", ...step.headers });
      res.end(step.body);
      return;
    }
    const content = typeof step.reply === "function" ? step.reply(recorded) : step.reply;
    sendJson(res, 200, completion(recorded, recorded.body, content));
  }

  let answered = 0;
  const server = createServer((req, res) => {
    res.once("finish", () => {
      answered++;
    });
    handle(req, res).catch((err: unknown) => {
      // A throwing reply function is a test bug: make it visible as a 500.
      if (!res.headersSent && !res.destroyed) sendError(res, 500, `fake-llm: ${String(err)}`);
      else res.destroy();
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    push: (...steps) => {
      script.push(...steps);
    },
    setFallback: (step) => {
      fallback = step;
    },
    pending: () => script.length,
    answered: () => answered,
    close() {
      markClosing();
      closing ??= new Promise<void>((resolve) => {
        for (const [timer, resolveWait] of waits) {
          clearTimeout(timer);
          resolveWait();
        }
        waits.clear();
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      });
      return closing;
    },
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function parseChatCompletion(rawBody: string): ChatCompletionBody | undefined {
  let value: unknown;
  try {
    value = JSON.parse(rawBody);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const { model, messages } = value as Record<string, unknown>;
  if (typeof model !== "string" || !Array.isArray(messages)) return undefined;
  const wellFormed = messages.every(
    (m: unknown) =>
      typeof m === "object" &&
      m !== null &&
      typeof (m as Record<string, unknown>).role === "string" &&
      typeof (m as Record<string, unknown>).content === "string",
  );
  return wellFormed ? (value as ChatCompletionBody) : undefined;
}

/** A chat.completion object as OpenAI returns it; token counts are rough (4 chars a token). */
function completion(
  recorded: RecordedRequest,
  request: ChatCompletionBody,
  content: string,
): unknown {
  const promptChars = request.messages.reduce((sum, m) => sum + m.content.length, 0);
  const promptTokens = Math.ceil(promptChars / 4);
  const completionTokens = Math.ceil(content.length / 4);
  return {
    id: `chatcmpl-fake-${recorded.index}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: request.model,
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    },
  };
}

function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers?: Record<string, string>,
): void {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(value));
}

/** An error in OpenAI's shape: {"error": {message, type, code}}. */
function sendError(
  res: ServerResponse,
  status: number,
  message: string,
  headers?: Record<string, string>,
): void {
  const type = status >= 500 ? "server_error" : "invalid_request_error";
  sendJson(res, status, { error: { message, type, code: null } }, headers);
}
