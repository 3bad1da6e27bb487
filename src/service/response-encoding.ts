import { toBinary } from "@bufbuild/protobuf";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import {
  type AddResponse,
  AddResponseSchema,
  ForkOriginSchema,
  type GetResponse,
  type Strategy,
  StrategySchema,
  type Thread,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";

/**
 * Hand-written binary encoders for the responses every Add and Get returns:
 * AddResponse, and GetResponse around its messages' bytes (pre-encoded.ts
 * keeps each stored message's encoding). protobuf-es's toBinary walks a compiled field list with a
 * growing writer per call, about 2.2 us for an AddResponse; this writes the
 * same bytes (fields in number order, proto3 defaults left out, map entries
 * with key and value) in a fraction of that.
 *
 * Only what the service itself builds takes this path: any value it does not
 * expect (unknown fields, a seq or time past 2^53, a negative time) makes the
 * encoder return undefined and the caller fall back to toBinary, so the
 * output is always toBinary's. test/service/response-encoding.test.ts checks
 * that byte for byte over generated values.
 */

/** Thrown (one object, made once) where a value cannot take the fast path. */
const UNSUPPORTED = new Error("value outside the hand-written encoder's range");

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A Strategy's bytes: strategy objects are shared and never changed (convert.ts strategyToPb). */
const strategyBytes = new WeakMap<Strategy, Uint8Array>();

function strategyWire(s: Strategy): Uint8Array {
  let bytes = strategyBytes.get(s);
  if (bytes === undefined) {
    bytes = toBinary(StrategySchema, s);
    strategyBytes.set(s, bytes);
  }
  return bytes;
}

/** Bytes of `n` (0 to 2^53) as a varint. */
function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function u64(v: bigint): number {
  if (v < 0n || v > MAX_SAFE) throw UNSUPPORTED;
  return Number(v);
}

/** Sizes first, then one buffer of exactly that size, written front to back. */
class Out {
  readonly buf: Buffer;
  at = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  varint(n: number): void {
    const buf = this.buf;
    while (n >= 0x80) {
      buf[this.at++] = (n & 0x7f) | 0x80;
      n = Math.floor(n / 128);
    }
    buf[this.at++] = n;
  }
  /** A string field whose UTF-8 length is `len`. */
  string(tag: number, s: string, len: number): void {
    this.varint(tag);
    this.varint(len);
    this.at += this.buf.write(s, this.at, len, "utf8");
  }
  bytes(b: Uint8Array): void {
    this.buf.set(b, this.at);
    this.at += b.length;
  }
  /** A varint field with a one-byte tag; proto3 leaves out 0 (and false). */
  uint(tag: number, n: number): void {
    if (n === 0) return;
    this.varint(tag);
    this.varint(n);
  }
}

/** Size of what Out.uint writes. */
const uintSize = (n: number): number => (n === 0 ? 0 : 1 + varintSize(n));

const strLen = (s: string): number => Buffer.byteLength(s, "utf8");
/** Size of a length-delimited field with a one-byte tag and a body of `n` bytes. */
const delimited = (n: number): number => 1 + varintSize(n) + n;

/** Timestamp and Duration share their layout: int64 seconds = 1, int32 nanos = 2. */
function secondsNanosSize(t: Timestamp | Duration): number {
  if (t.$unknown !== undefined && t.$unknown.length > 0) throw UNSUPPORTED;
  const seconds = u64(t.seconds);
  if (t.nanos < 0) throw UNSUPPORTED;
  return uintSize(seconds) + uintSize(t.nanos);
}

function writeSecondsNanos(out: Out, t: Timestamp | Duration, size: number): void {
  out.varint(size);
  out.uint(0x08, Number(t.seconds));
  out.uint(0x10, t.nanos);
}

/** A Thread's body and the sizes measured for writing it. */
interface ThreadPlan {
  readonly thread: Thread;
  readonly size: number;
  readonly idLen: number;
  readonly strategy: Uint8Array | undefined;
  readonly lastSeq: number;
  readonly summarizedThroughSeq: number;
  readonly createSize: number;
  readonly updateSize: number;
  readonly labels: readonly (readonly [string, number, string, number])[];
  readonly ttlSize: number;
  readonly expireSize: number;
  /** Thread.parent's bytes: only forks have one, so toBinary's own is fast enough. */
  readonly parent: Uint8Array | undefined;
}

// Tags of Thread's fields past 15 take two bytes: (20 << 3) | 2 = 162, then 21, 22 and 23.
const LABELS_TAG = 162;
const TTL_TAG = 170;
const EXPIRE_TAG = 178;
const PARENT_TAG = 186;

function planThread(t: Thread): ThreadPlan {
  if (t.$unknown !== undefined && t.$unknown.length > 0) throw UNSUPPORTED;
  const idLen = strLen(t.threadId);
  let size = idLen === 0 ? 0 : delimited(idLen);
  const strategy = t.strategy === undefined ? undefined : strategyWire(t.strategy);
  if (strategy !== undefined) size += delimited(strategy.length);
  const lastSeq = u64(t.lastSeq);
  size += uintSize(lastSeq);
  const summarizedThroughSeq = u64(t.summarizedThroughSeq);
  size += uintSize(summarizedThroughSeq);
  const createSize = t.createTime === undefined ? -1 : secondsNanosSize(t.createTime);
  if (createSize >= 0) size += delimited(createSize);
  const updateSize = t.updateTime === undefined ? -1 : secondsNanosSize(t.updateTime);
  if (updateSize >= 0) size += delimited(updateSize);
  const labels: [string, number, string, number][] = [];
  for (const key of Object.keys(t.labels)) {
    const value = t.labels[key] as string;
    const kLen = strLen(key);
    const vLen = strLen(value);
    const entry = delimited(kLen) + delimited(vLen);
    size += 2 + varintSize(entry) + entry;
    labels.push([key, kLen, value, vLen]);
  }
  const ttlSize = t.ttl === undefined ? -1 : secondsNanosSize(t.ttl);
  if (ttlSize >= 0) size += 2 + varintSize(ttlSize) + ttlSize;
  const expireSize = t.expireTime === undefined ? -1 : secondsNanosSize(t.expireTime);
  if (expireSize >= 0) size += 2 + varintSize(expireSize) + expireSize;
  const parent = t.parent === undefined ? undefined : toBinary(ForkOriginSchema, t.parent);
  if (parent !== undefined) size += 2 + varintSize(parent.length) + parent.length;
  return {
    thread: t,
    size,
    idLen,
    strategy,
    lastSeq,
    summarizedThroughSeq,
    createSize,
    updateSize,
    labels,
    ttlSize,
    expireSize,
    parent,
  };
}

/** Writes a Thread as field `tag` (its length first). */
function writeThread(out: Out, tag: number, p: ThreadPlan): void {
  const t = p.thread;
  out.varint(tag);
  out.varint(p.size);
  if (p.idLen !== 0) out.string(0x0a, t.threadId, p.idLen);
  if (p.strategy !== undefined) {
    out.varint(0x12);
    out.varint(p.strategy.length);
    out.bytes(p.strategy);
  }
  out.uint(0x18, p.lastSeq);
  out.uint(0x20, p.summarizedThroughSeq);
  if (t.createTime !== undefined) {
    out.varint(0x2a);
    writeSecondsNanos(out, t.createTime, p.createSize);
  }
  if (t.updateTime !== undefined) {
    out.varint(0x32);
    writeSecondsNanos(out, t.updateTime, p.updateSize);
  }
  for (const [key, kLen, value, vLen] of p.labels) {
    out.varint(LABELS_TAG);
    out.varint(delimited(kLen) + delimited(vLen));
    out.string(0x0a, key, kLen);
    out.string(0x12, value, vLen);
  }
  if (t.ttl !== undefined) {
    out.varint(TTL_TAG);
    writeSecondsNanos(out, t.ttl, p.ttlSize);
  }
  if (t.expireTime !== undefined) {
    out.varint(EXPIRE_TAG);
    writeSecondsNanos(out, t.expireTime, p.expireSize);
  }
  if (p.parent !== undefined) {
    out.varint(PARENT_TAG);
    out.varint(p.parent.length);
    out.bytes(p.parent);
  }
}

function tryEncodeAddResponse(res: AddResponse): Uint8Array {
  if (res.$unknown !== undefined && res.$unknown.length > 0) throw UNSUPPORTED;
  const thread = res.thread === undefined ? undefined : planThread(res.thread);
  const firstSeq = u64(res.firstSeq);
  const lastSeq = u64(res.lastSeq);
  let size = thread === undefined ? 0 : delimited(thread.size);
  size += uintSize(firstSeq) + uintSize(lastSeq);
  const out = new Out(size);
  if (thread !== undefined) writeThread(out, 0x0a, thread);
  out.uint(0x10, firstSeq);
  out.uint(0x18, lastSeq);
  return out.buf;
}

/** AddResponse's binary form, byte for byte toBinary's. */
export function encodeAddResponse(res: AddResponse): Uint8Array {
  try {
    return tryEncodeAddResponse(res);
  } catch (err) {
    if (err !== UNSUPPORTED) throw err;
    return toBinary(AddResponseSchema, res);
  }
}

/** A GetResponse's fields after `messages` (2 to 10), measured for writing. */
interface GetTailPlan {
  readonly res: GetResponse;
  readonly size: number;
  readonly summaryLen: number;
  readonly reasonLen: number;
  readonly thread: ThreadPlan | undefined;
}

function planGetResponseTail(res: GetResponse): GetTailPlan {
  if (res.$unknown !== undefined && res.$unknown.length > 0) throw UNSUPPORTED;
  const summaryLen = strLen(res.summary);
  const reasonLen = strLen(res.degradedReason);
  const thread = res.thread === undefined ? undefined : planThread(res.thread);
  let size = summaryLen === 0 ? 0 : delimited(summaryLen);
  if (thread !== undefined) size += delimited(thread.size);
  size += uintSize(res.degraded ? 1 : 0) + (reasonLen === 0 ? 0 : delimited(reasonLen));
  size += uintSize(res.tokens) + uintSize(res.maxTokens) + uintSize(res.overBudget ? 1 : 0);
  size += uintSize(res.clearedToolResults) + uintSize(res.clearedToolTokens);
  return { res, size, summaryLen, reasonLen, thread };
}

function writeGetResponseTail(out: Out, p: GetTailPlan): void {
  const res = p.res;
  if (p.summaryLen !== 0) out.string(0x12, res.summary, p.summaryLen);
  if (p.thread !== undefined) writeThread(out, 0x1a, p.thread);
  out.uint(0x20, res.degraded ? 1 : 0);
  if (p.reasonLen !== 0) out.string(0x2a, res.degradedReason, p.reasonLen);
  out.uint(0x30, res.tokens);
  out.uint(0x38, res.maxTokens);
  out.uint(0x40, res.overBudget ? 1 : 0);
  out.uint(0x48, res.clearedToolResults);
  out.uint(0x50, res.clearedToolTokens);
}

/**
 * A GetResponse's fields after `messages` (2 to 10), or undefined when one of
 * them cannot take the fast path.
 */
export function encodeGetResponseTail(res: GetResponse): Uint8Array | undefined {
  try {
    const plan = planGetResponseTail(res);
    const out = new Out(plan.size);
    writeGetResponseTail(out, plan);
    return out.buf;
  } catch (err) {
    if (err !== UNSUPPORTED) throw err;
    return undefined;
  }
}

/**
 * A whole GetResponse in one buffer: field 1 (messages) from `messages`,
 * each message's encoded bytes, then the other fields; undefined when one of
 * them cannot take the fast path. Field 1 comes first on the wire, as
 * toBinary writes it.
 */
export function encodeGetResponseWithMessages(
  res: GetResponse,
  messages: readonly Uint8Array[],
): Uint8Array | undefined {
  try {
    const plan = planGetResponseTail(res);
    let size = plan.size;
    for (const m of messages) size += delimited(m.length);
    const out = new Out(size);
    for (const m of messages) {
      out.varint(0x0a);
      out.varint(m.length);
      out.bytes(m);
    }
    writeGetResponseTail(out, plan);
    return out.buf;
  } catch (err) {
    if (err !== UNSUPPORTED) throw err;
    return undefined;
  }
}
