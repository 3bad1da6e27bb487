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
import { Reader, ThreadLineError } from "./line-reader.js";
import {
  SHARED_LINE_FORMAT,
  type SharedPrefix,
  THREAD_LINE_FORMAT,
  type ThreadLine,
} from "./thread-line.js";

/**
 * Reading a line of an export file (the format is thread-line.ts's, which
 * writes it): every field checked, each refusal naming the line and the field.
 */

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
