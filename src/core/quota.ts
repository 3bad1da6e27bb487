import { MemoryError } from "./errors.js";
import type { ChatMessage } from "./types.js";

/** What a namespace holds, as the quotas count it. */
export interface NamespaceUsage {
  threads: number;
  messages: number;
  /** Sum of messageBytes over its stored messages. */
  bytes: number;
}

/**
 * Namespace quotas (0: unlimited), part of StoreLimits, enforced by every
 * store's append atomically with the write, across replicas too: an Add
 * that would grow the namespace's thread count, stored message count or
 * stored message bytes (messageBytes) past its quota, counted after the
 * Add's own trim, is refused with resource_exhausted naming the quota, and
 * stores nothing. Trims, summary commits, rewinds and clears give the room
 * back.
 */
export interface QuotaLimits {
  maxThreadsPerNamespace: number;
  maxMessagesPerNamespace: number;
  maxBytesPerNamespace: number;
}

/** The quotas, by the name errors and the README use for them. */
export const QUOTAS = [
  ["threads", "max_threads_per_namespace", "maxThreadsPerNamespace"],
  ["messages", "max_messages_per_namespace", "maxMessagesPerNamespace"],
  ["bytes", "max_bytes_per_namespace", "maxBytesPerNamespace"],
] as const;

export type QuotaName = (typeof QUOTAS)[number][1];

/**
 * The size of a message as the byte quota counts it: the UTF-8 bytes of its
 * content, name, tool_call_id, each tool call's id, name and arguments, and
 * each metadata key and value. Framing (JSON, protobuf tags, seqs, times) is
 * not counted, so the figure is the same in every store.
 */
export function messageBytes(m: ChatMessage): number {
  let n = Buffer.byteLength(m.content, "utf8");
  if (m.name !== undefined) n += Buffer.byteLength(m.name, "utf8");
  if (m.toolCallId !== undefined) n += Buffer.byteLength(m.toolCallId, "utf8");
  for (const c of m.toolCalls ?? []) {
    n += Buffer.byteLength(c.id, "utf8");
    n += Buffer.byteLength(c.name, "utf8");
    n += Buffer.byteLength(c.arguments, "utf8");
  }
  for (const [k, v] of Object.entries(m.metadata ?? {})) {
    n += Buffer.byteLength(k, "utf8") + Buffer.byteLength(v, "utf8");
  }
  return n;
}

/** The resource_exhausted error of an Add refused by a quota. */
export function quotaExceededError(quota: QuotaName, limit: number): MemoryError {
  return new MemoryError(
    "resource_exhausted",
    `namespace quota ${quota} (${limit}) reached; nothing was stored: clear threads to make room`,
  );
}

/**
 * Throws quotaExceededError when `delta`, applied to `usage`, grows a count
 * past its limit (0: unlimited). A change that does not grow a count is
 * always allowed, so an Add whose trim gives back as much as it adds passes
 * even when a lowered quota is already exceeded.
 */
export function checkQuotas(
  limits: QuotaLimits,
  usage: NamespaceUsage,
  delta: NamespaceUsage,
): void {
  for (const [count, name, limitKey] of QUOTAS) {
    const limit = limits[limitKey];
    if (limit > 0 && delta[count] > 0 && usage[count] + delta[count] > limit) {
      throw quotaExceededError(name, limit);
    }
  }
}
