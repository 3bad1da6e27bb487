import type { ForkOrigin, StoredMessage, Strategy, TokenEncoding } from "../core/types.js";
import type { ImportThreadCommand } from "../store/store.js";
import { ThreadLineError } from "./line-reader.js";

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
