import { MAX_TOKENS_LIMIT } from "../core/strategy.js";
import { TOKEN_ENCODINGS } from "../core/tokens.js";
import type {
  ForkOrigin,
  Labels,
  Role,
  StoredMessage,
  Strategy,
  SummaryPlacement,
  TokenEncoding,
  ToolCall,
} from "../core/types.js";
import { threadIdFrom } from "../service/convert.js";
import { labelsFrom } from "../service/labels.js";
import type { ImportThreadCommand } from "../store/store.js";
import { Reader, ThreadLineError } from "./line-reader.js";

export { ThreadLineError };

/**
 * One line of `windlass-memory export` (JSON Lines): a whole thread. Field
 * names are the proto's (snake_case); times are milliseconds since the Unix
 * epoch; a message's optional fields, and the thread's labels, are left out
 * when empty. `format` names
 * this layout, so a later version can read (or refuse) an older file.
 *
 * ```json
 * {"format":"windlass-memory.thread.v1","namespace":"","thread_id":"t1",
 *  "strategy":{"kind":"window","window":20,"exclude_system":false,"max_stored":1000},
 *  "last_seq":2,"summarized_through_seq":0,"summary":"","summary_time":0,
 *  "create_time":1767225600000,"update_time":1767225601000,"labels":{"user_id":"u-42"},
 *  "messages":[{"seq":1,"create_time":1767225600000,"role":"user","content":"hi"}, …]}
 * ```
 *
 * A fork's line also has `parent` (left out for other threads, so older files
 * stay valid and read the same): where it was forked from, as
 * ThreadState.parent holds it. Such a v1 line holds all the fork's stored
 * messages, shared ones included, so it imports on its own (the parent need
 * not be in the file, nor exist):
 *
 * ```json
 * "parent":{"thread_id":"t1","at_seq":2,"fork_time":1767225602000,
 *           "parent_create_time":1767225600000}
 * ```
 *
 * A fork that holds its parent's messages up to a seq, exactly as the
 * parent's own line (earlier in the same file) holds them, is written once
 * in the parent's line: its line has format `windlass-memory.thread.v2`,
 * every v1 field, `parent`, and `shared`, which names that prefix by its last
 * seq, its count and its digest (prefix-chain.ts); its `messages` are only
 * its own, after through_seq. The import checks the digest against the
 * parent in the store and writes the fork sharing the parent's messages, as
 * a Fork would (import.ts). An older release refuses a v2 line by its format
 * rather than import a fork without its prefix.
 *
 * ```json
 * {"format":"windlass-memory.thread.v2", …, "parent":{…},
 *  "shared":{"through_seq":120,"count":120,"digest":"9f86d0…(64 hex digits)"},
 *  "messages":[{"seq":121, …}, …]}
 * ```
 */
export const THREAD_LINE_FORMAT = "windlass-memory.thread.v1";
/** The format of a line whose thread shares a prefix with its parent's line. */
export const SHARED_LINE_FORMAT = "windlass-memory.thread.v2";

/** The parent's messages a v2 line shares: seqs from the parent's oldest through throughSeq. */
export interface SharedPrefix {
  throughSeq: number;
  /** How many messages that is. */
  count: number;
  /** PrefixChain digest (hex) of those messages. */
  digest: string;
}

/**
 * A thread as one export line holds it (Store.importThread's command,
 * without `now`; the importer resolves `shared` into its shareFrom). With
 * `shared`, `messages` are the thread's own only.
 */
export type ThreadLine = Omit<ImportThreadCommand, "now" | "shareFrom"> & {
  shared?: SharedPrefix;
};

/** The line's JSON text (no newline). Keys in a fixed order, so equal threads give equal text. */
export function encodeThreadLine(t: ThreadLine): string {
  return JSON.stringify({
    format: t.shared === undefined ? THREAD_LINE_FORMAT : SHARED_LINE_FORMAT,
    namespace: t.namespace,
    thread_id: t.threadId,
    strategy: encodeStrategy(t.strategy),
    last_seq: t.lastSeq,
    summarized_through_seq: t.summarizedThroughSeq,
    summary: t.summary,
    summary_time: t.summaryTime,
    create_time: t.createTime,
    update_time: t.updateTime,
    ...(t.labels === undefined ? {} : { labels: t.labels }),
    ...(t.ttlMs === undefined || t.expireTime === undefined
      ? {}
      : { ttl_ms: t.ttlMs, expire_time: t.expireTime }),
    ...(t.parent === undefined ? {} : { parent: encodeParent(t.parent) }),
    ...(t.shared === undefined
      ? {}
      : {
          shared: {
            through_seq: t.shared.throughSeq,
            count: t.shared.count,
            digest: t.shared.digest,
          },
        }),
    messages: t.messages.map(encodeMessage),
  });
}

/** One message's JSON as a line writes it: what PrefixChain digests. */
export function encodeMessageJson(m: StoredMessage): string {
  return JSON.stringify(encodeMessage(m));
}

function encodeParent(p: ForkOrigin): Record<string, unknown> {
  return {
    thread_id: p.threadId,
    at_seq: p.atSeq,
    fork_time: p.forkTime,
    parent_create_time: p.parentCreateTime,
  };
}

function encodeStrategy(s: Strategy): Record<string, unknown> {
  const base = { exclude_system: s.excludeSystem, max_stored: s.maxStored };
  switch (s.kind) {
    case "buffer":
      return { kind: s.kind, max_messages: s.maxMessages, ...base };
    case "window":
      return { kind: s.kind, window: s.window, ...base, ...encodeTokenOptions(s) };
    case "summary":
      return {
        kind: s.kind,
        window: s.window,
        summarize_every: s.summarizeEvery,
        model: s.model,
        ...base,
        ...encodeTokenOptions(s),
        ...(s.summaryPlacement === undefined ? {} : { summary_placement: s.summaryPlacement }),
      };
  }
}

/** Token options are written only when set, as the thread keeps them. */
function encodeTokenOptions(s: {
  maxTokens?: number;
  tokenEncoding?: TokenEncoding;
}): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (s.maxTokens !== undefined) out.max_tokens = s.maxTokens;
  if (s.tokenEncoding !== undefined) out.token_encoding = s.tokenEncoding;
  return out;
}

function encodeMessage(m: StoredMessage): Record<string, unknown> {
  const out: Record<string, unknown> = {
    seq: m.seq,
    create_time: m.createTime,
    role: m.role,
    content: m.content,
  };
  if (m.name !== undefined) out.name = m.name;
  if (m.toolCalls !== undefined) out.tool_calls = m.toolCalls;
  if (m.toolCallId !== undefined) out.tool_call_id = m.toolCallId;
  if (m.metadata !== undefined) out.metadata = m.metadata;
  return out;
}

/** Largest max_stored a line may carry (the service's own ceiling). */
const MAX_STORED_LIMIT = 100_000;

/**
 * The thread of one line, checked field by field; throws ThreadLineError
 * naming `where` (e.g. "line 3") and the field. Refuses unknown fields, so a
 * file of a later format is never half read.
 */
export function decodeThreadLine(text: string, where: string): ThreadLine {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ThreadLineError(`${where}: not JSON (${(err as Error).message})`);
  }
  const r = new Reader(where);
  const o = r.object(json, "", [
    "format",
    "namespace",
    "thread_id",
    "strategy",
    "last_seq",
    "summarized_through_seq",
    "summary",
    "summary_time",
    "create_time",
    "update_time",
    "labels",
    "ttl_ms",
    "expire_time",
    "parent",
    "shared",
    "messages",
  ]);
  const format = r.string(o.format, "format");
  if (format !== THREAD_LINE_FORMAT && format !== SHARED_LINE_FORMAT) {
    r.fail("format", `is "${format}", not "${THREAD_LINE_FORMAT}" or "${SHARED_LINE_FORMAT}"`);
  }
  const sharing = format === SHARED_LINE_FORMAT;
  if (sharing && o.shared === undefined) r.fail("shared", `is required in a ${format} line`);
  if (sharing && o.parent === undefined) r.fail("parent", `is required in a ${format} line`);
  if (!sharing && o.shared !== undefined) r.fail("shared", `needs format "${SHARED_LINE_FORMAT}"`);
  const namespace = r.string(o.namespace, "namespace");
  const rawId = r.string(o.thread_id, "thread_id");
  let threadId: string;
  try {
    if (rawId === "") throw new Error("thread_id: must not be empty");
    threadId = threadIdFrom(rawId);
  } catch (err) {
    throw new ThreadLineError(`${where}: ${(err as Error).message}`);
  }
  const strategy = decodeStrategy(r, o.strategy);
  const lastSeq = r.count(o.last_seq, "last_seq");
  const summarizedThroughSeq = r.count(o.summarized_through_seq, "summarized_through_seq");
  if (summarizedThroughSeq > lastSeq) {
    r.fail("summarized_through_seq", `must be at most last_seq (${lastSeq})`);
  }
  const summary = r.string(o.summary, "summary");
  if (strategy.kind !== "summary" && (summary !== "" || summarizedThroughSeq !== 0)) {
    r.fail("summary", `must be empty (and summarized_through_seq 0) for a ${strategy.kind} thread`);
  }
  const labels = o.labels === undefined ? undefined : decodeLabels(r, o.labels, where);
  const ttl = decodeTtl(r, o.ttl_ms, o.expire_time);
  const parent = o.parent === undefined ? undefined : decodeParent(r, o.parent, where);
  const shared = o.shared === undefined ? undefined : decodeShared(r, o.shared, lastSeq);
  const messages = decodeMessages(r, o.messages, lastSeq);
  if (shared !== undefined && messages.length !== lastSeq - shared.throughSeq) {
    r.fail(
      "messages",
      `must be the thread's own, seqs ${shared.throughSeq + 1} to last_seq (${lastSeq}): ${lastSeq - shared.throughSeq} messages, not ${messages.length}`,
    );
  }
  return {
    namespace,
    threadId,
    strategy,
    lastSeq,
    summarizedThroughSeq,
    summary,
    summaryTime: r.count(o.summary_time, "summary_time"),
    createTime: r.count(o.create_time, "create_time"),
    updateTime: r.count(o.update_time, "update_time"),
    ...(labels === undefined ? {} : { labels }),
    ...(ttl ?? {}),
    ...(parent === undefined ? {} : { parent }),
    ...(shared === undefined ? {} : { shared }),
    messages,
  };
}

const HEX_DIGEST = /^[0-9a-f]{64}$/;

function decodeShared(r: Reader, value: unknown, lastSeq: number): SharedPrefix {
  const o = r.object(value, "shared", ["through_seq", "count", "digest"]);
  const throughSeq = r.count(o.through_seq, "shared.through_seq");
  if (throughSeq < 1 || throughSeq > lastSeq) {
    r.fail("shared.through_seq", `must be from 1 to last_seq (${lastSeq})`);
  }
  const count = r.count(o.count, "shared.count");
  if (count < 1 || count > throughSeq) {
    r.fail("shared.count", `must be from 1 to through_seq (${throughSeq})`);
  }
  const digest = r.string(o.digest, "shared.digest");
  if (!HEX_DIGEST.test(digest)) r.fail("shared.digest", "must be 64 lowercase hex digits");
  return { throughSeq, count, digest };
}

/**
 * A fork's origin. Its at_seq is not checked against last_seq: a fork
 * rewound below its fork point keeps the origin it had.
 */
function decodeParent(r: Reader, value: unknown, where: string): ForkOrigin {
  const o = r.object(value, "parent", ["thread_id", "at_seq", "fork_time", "parent_create_time"]);
  const rawId = r.string(o.thread_id, "parent.thread_id");
  let threadId: string;
  try {
    if (rawId === "") throw new Error("parent.thread_id: must not be empty");
    threadId = threadIdFrom(rawId, "parent.thread_id");
  } catch (err) {
    throw new ThreadLineError(`${where}: ${(err as Error).message}`);
  }
  return {
    threadId,
    atSeq: r.count(o.at_seq, "parent.at_seq"),
    forkTime: r.count(o.fork_time, "parent.fork_time"),
    parentCreateTime: r.count(o.parent_create_time, "parent.parent_create_time"),
  };
}

function decodeLabels(r: Reader, value: unknown, where: string): Labels | undefined {
  const map = r.object(value, "labels", undefined);
  for (const [k, v] of Object.entries(map)) r.string(v, `labels.${k}`);
  try {
    return labelsFrom(map as Record<string, string>, "labels");
  } catch (err) {
    throw new ThreadLineError(`${where}: ${(err as Error).message}`);
  }
}

function decodeTtl(
  r: Reader,
  ttlMs: unknown,
  expireTime: unknown,
): { ttlMs: number; expireTime: number } | undefined {
  if ((ttlMs === undefined) !== (expireTime === undefined)) {
    r.fail("ttl_ms", "and expire_time go together: give both or neither");
  }
  if (ttlMs === undefined) return undefined;
  const ttl = { ttlMs: r.count(ttlMs, "ttl_ms"), expireTime: r.count(expireTime, "expire_time") };
  if (ttl.ttlMs === 0) r.fail("ttl_ms", "must be positive when given");
  return ttl;
}

function decodeMessages(r: Reader, value: unknown, lastSeq: number): StoredMessage[] {
  const messages = r.array(value, "messages").map((m, i) => decodeMessage(r, m, `messages[${i}]`));
  for (const [i, m] of messages.entries()) {
    // The stores keep a thread's seqs consecutive, ending at last_seq.
    const expected = lastSeq - messages.length + 1 + i;
    if (m.seq !== expected) {
      r.fail(
        `messages[${i}].seq`,
        `is ${m.seq}; seqs must be consecutive and end at last_seq (${lastSeq}), so ${expected} was expected`,
      );
    }
  }
  return messages;
}

function decodeStrategy(r: Reader, value: unknown): Strategy {
  const kind = r.string(r.object(value, "strategy", ["kind"], true).kind, "strategy.kind");
  const common = ["kind", "exclude_system", "max_stored"];
  const fields: Record<string, string[]> = {
    buffer: [...common, "max_messages"],
    window: [...common, "window", "max_tokens", "token_encoding"],
    summary: [
      ...common,
      "window",
      "summarize_every",
      "model",
      "max_tokens",
      "token_encoding",
      "summary_placement",
    ],
  };
  const allowed = fields[kind];
  if (allowed === undefined) r.fail("strategy.kind", "must be buffer, window or summary");
  const s = r.object(value, "strategy", allowed);
  const excludeSystem = r.boolean(s.exclude_system, "strategy.exclude_system");
  const maxStored = r.count(s.max_stored, "strategy.max_stored");
  if (maxStored < 1 || maxStored > MAX_STORED_LIMIT) {
    r.fail("strategy.max_stored", `must be from 1 to ${MAX_STORED_LIMIT}`);
  }
  const base = { excludeSystem, maxStored };
  switch (kind) {
    case "buffer":
      return {
        kind,
        maxMessages: r.count(s.max_messages, "strategy.max_messages"),
        ...base,
      };
    case "window": {
      const window = r.count(s.window, "strategy.window");
      if (window < 1) r.fail("strategy.window", "must be positive");
      return { kind, window, ...base, ...decodeTokenOptions(r, s) };
    }
    default: {
      const summarizeEvery = r.count(s.summarize_every, "strategy.summarize_every");
      if (summarizeEvery < 1) r.fail("strategy.summarize_every", "must be positive");
      const model = r.string(s.model, "strategy.model");
      if (model === "") r.fail("strategy.model", "must name the summariser");
      return {
        kind: "summary",
        window: r.count(s.window, "strategy.window"),
        summarizeEvery,
        model,
        ...base,
        ...decodeTokenOptions(r, s),
        ...decodePlacement(r, s.summary_placement),
      };
    }
  }
}

/** max_tokens and token_encoding, absent when the thread has the defaults. */
function decodeTokenOptions(
  r: Reader,
  s: Record<string, unknown>,
): { maxTokens?: number; tokenEncoding?: TokenEncoding } {
  const out: { maxTokens?: number; tokenEncoding?: TokenEncoding } = {};
  if (s.max_tokens !== undefined) {
    const max = r.count(s.max_tokens, "strategy.max_tokens");
    if (max < 1 || max > MAX_TOKENS_LIMIT) {
      r.fail("strategy.max_tokens", `must be from 1 to ${MAX_TOKENS_LIMIT}`);
    }
    out.maxTokens = max;
  }
  if (s.token_encoding !== undefined) {
    const enc = r.string(s.token_encoding, "strategy.token_encoding");
    const known = TOKEN_ENCODINGS.find((e) => e === enc);
    if (known === undefined) {
      r.fail("strategy.token_encoding", `must be one of ${TOKEN_ENCODINGS.join(", ")}`);
    }
    out.tokenEncoding = known;
  }
  return out;
}

const PLACEMENTS: readonly SummaryPlacement[] = ["system", "user", "none"];

function decodePlacement(r: Reader, v: unknown): { summaryPlacement?: SummaryPlacement } {
  if (v === undefined) return {};
  const placement = r.string(v, "strategy.summary_placement");
  const known = PLACEMENTS.find((p) => p === placement);
  if (known === undefined) {
    r.fail("strategy.summary_placement", `must be one of ${PLACEMENTS.join(", ")}`);
  }
  return { summaryPlacement: known };
}

const ROLES: readonly Role[] = ["system", "user", "assistant", "tool"];

function decodeMessage(r: Reader, value: unknown, field: string): StoredMessage {
  const o = r.object(value, field, [
    "seq",
    "create_time",
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "metadata",
  ]);
  const role = r.string(o.role, `${field}.role`) as Role;
  if (!ROLES.includes(role)) r.fail(`${field}.role`, "must be system, user, assistant or tool");
  const m: StoredMessage = {
    role,
    content: r.string(o.content, `${field}.content`),
    seq: r.count(o.seq, `${field}.seq`),
    createTime: r.count(o.create_time, `${field}.create_time`),
  };
  if (o.name !== undefined) m.name = r.string(o.name, `${field}.name`);
  if (o.tool_calls !== undefined) {
    if (role !== "assistant") {
      r.fail(`${field}.tool_calls`, "only assistant messages may carry tool calls");
    }
    m.toolCalls = r.array(o.tool_calls, `${field}.tool_calls`).map((c, i): ToolCall => {
      const f = `${field}.tool_calls[${i}]`;
      const call = r.object(c, f, ["id", "name", "arguments"]);
      const id = r.string(call.id, `${f}.id`);
      if (id === "") r.fail(`${f}.id`, "must not be empty");
      return {
        id,
        name: r.string(call.name, `${f}.name`),
        arguments: r.string(call.arguments, `${f}.arguments`),
      };
    });
  }
  if (o.tool_call_id !== undefined) {
    if (role !== "tool") r.fail(`${field}.tool_call_id`, "only tool messages may carry one");
    m.toolCallId = r.string(o.tool_call_id, `${field}.tool_call_id`);
  } else if (role === "tool") {
    r.fail(`${field}.tool_call_id`, "must be set on tool messages");
  }
  if (o.metadata !== undefined) {
    const meta = r.object(o.metadata, `${field}.metadata`, undefined);
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(meta)) out[k] = r.string(v, `${field}.metadata.${k}`);
    m.metadata = out;
  }
  return m;
}
