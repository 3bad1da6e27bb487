import { toBinary } from "@bufbuild/protobuf";
import {
  type ChatMessage as ChatMessagePb,
  ChatMessageSchema,
  type GetResponse,
  GetResponseSchema,
  type WatchResponse,
  WatchResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import type { MemoryEvent, StoredMessage } from "../core/types.js";
import { encodeResumeToken, eventToPb, messageToPb } from "./convert.js";
import { encodeGetResponseWithMessages } from "./response-encoding.js";

/**
 * Stored messages never change after their Add, yet a Get of a window sends
 * the same ones again and again: encoding a 20-message GetResponse was the
 * largest single cost of a Get (bench/hot-path.ts). So each stored message's
 * wire form is built once, kept while the store keeps the message object, and
 * a GetResponse carries its messages' bytes for the binary serializer to
 * splice in. Readers that want objects (Connect JSON) still get `messages`.
 */
interface WireMessage {
  pb: ChatMessagePb;
  bytes: Uint8Array;
}

const wireForms = new WeakMap<StoredMessage, WireMessage>();

function wireMessage(m: StoredMessage): WireMessage {
  let w = wireForms.get(m);
  if (w === undefined) {
    const pb = messageToPb(m);
    w = { pb, bytes: toBinary(ChatMessageSchema, pb) };
    // Synthetic messages (the summary, seq 0) are built per Get: caching them would only churn.
    if (m.seq > 0) wireForms.set(m, w);
  }
  return w;
}

const ENCODED_MESSAGES = Symbol("windlass.encodedMessages");

interface WithEncodedMessages {
  [ENCODED_MESSAGES]?: Uint8Array[];
}

/** Sets `res.messages` from stored messages and remembers their bytes for toBinary. */
export function setMessages(res: GetResponse, messages: readonly StoredMessage[]): GetResponse {
  const pbs: ChatMessagePb[] = new Array(messages.length);
  const bytes: Uint8Array[] = new Array(messages.length);
  for (let i = 0; i < messages.length; i++) {
    const w = wireMessage(messages[i] as StoredMessage);
    pbs[i] = w.pb;
    bytes[i] = w.bytes;
  }
  res.messages = pbs;
  // Not enumerable: the bytes are no field of the message.
  Object.defineProperty(res, ENCODED_MESSAGES, { value: bytes });
  return res;
}

/**
 * The binary form of a GetResponse, byte-identical to toBinary's: field 1
 * (messages) spliced from the cached bytes, then the other fields, in one
 * buffer (response-encoding.ts). A response without cached bytes, or with a
 * field the hand-written encoder does not take, goes through toBinary.
 */
export function encodeGetResponse(res: GetResponse): Uint8Array {
  const parts = (res as GetResponse & WithEncodedMessages)[ENCODED_MESSAGES];
  if (parts === undefined || parts.length !== res.messages.length) {
    return toBinary(GetResponseSchema, res);
  }
  return encodeGetResponseWithMessages(res, parts) ?? toBinary(GetResponseSchema, res);
}

/** Events whose wire form is kept for sharedEventToPb. */
const SHARED_EVENTS_KEPT = 1024;
const sharedEvents = new Map<string, WatchResponse>();

const SHARED_BYTES = Symbol("windlass.sharedBytes");

interface WithSharedBytes {
  [SHARED_BYTES]?: { bytes: Uint8Array | undefined };
}

/**
 * The wire form of a logged event, one object for every watcher that sends
 * it: a fold's SummaryUpdated goes to every watcher of the namespace, and
 * converting and encoding it once per watcher was most of the fan-out's
 * work. Keyed by cursor, which names one event of one namespace of one
 * database; bounded, oldest out. The object is never changed after it is
 * made, so its bytes are encoded once too (encodeWatchResponse).
 */
export function sharedEventToPb(e: MemoryEvent): WatchResponse {
  const cursor = e.cursor;
  let res = sharedEvents.get(cursor);
  if (res === undefined) {
    res = eventToPb(e, encodeResumeToken(cursor));
    // Not enumerable: the bytes are no field of the message.
    Object.defineProperty(res, SHARED_BYTES, { value: { bytes: undefined } });
    if (sharedEvents.size >= SHARED_EVENTS_KEPT) {
      const oldest = sharedEvents.keys().next();
      if (oldest.done !== true) sharedEvents.delete(oldest.value);
    }
    sharedEvents.set(cursor, res);
  }
  return res;
}

/**
 * The binary form of a WatchResponse: encoded once for a shared event
 * (sharedEventToPb), plainly for any other (initial state, Progress), which
 * is sent once.
 */
export function encodeWatchResponse(res: WatchResponse): Uint8Array {
  const shared = (res as WatchResponse & WithSharedBytes)[SHARED_BYTES];
  if (shared === undefined) return toBinary(WatchResponseSchema, res);
  shared.bytes ??= toBinary(WatchResponseSchema, res);
  return shared.bytes;
}
