import { messageBytes, type NamespaceUsage } from "./quota.js";
import type { ChatMessage } from "./types.js";

/**
 * What a write changes in its namespace's usage, as the quotas count it
 * (core/quota.ts checkQuotas takes it with the usage before): worked out
 * before anything is written, so a refusal stores nothing.
 */

/** The bytes of `messages` as the byte quota counts them. */
export function bytesOf(messages: readonly ChatMessage[]): number {
  let n = 0;
  for (const m of messages) n += messageBytes(m);
  return n;
}

/**
 * An Add's change: a thread when it creates one, its messages less those
 * its own trim drops (count and bytes).
 */
export function appendDelta(
  created: boolean,
  added: readonly ChatMessage[],
  trimmed: { count: number; bytes: number },
): NamespaceUsage {
  return {
    threads: created ? 1 : 0,
    messages: added.length - trimmed.count,
    bytes: bytesOf(added) - trimmed.bytes,
  };
}

/**
 * An import's change, or undefined when it must change nothing: the
 * namespace already has a thread of that id (Store.importThread never
 * overwrites).
 */
export function importDelta(
  exists: boolean,
  messages: readonly ChatMessage[],
): NamespaceUsage | undefined {
  if (exists) return undefined;
  return { threads: 1, messages: messages.length, bytes: bytesOf(messages) };
}

/** What removing a thread gives back. */
export function removalDelta(stored: { messages: number; bytes: number }): NamespaceUsage {
  return { threads: -1, messages: -stored.messages, bytes: -stored.bytes };
}

/** What dropping stored messages from a thread that stays gives back (a trim, a fold's trim, a Rewind). */
export function droppedDelta(count: number, bytes: number): NamespaceUsage {
  return { threads: 0, messages: -count, bytes: -bytes };
}
