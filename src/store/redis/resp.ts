import { ErrorReply } from "redis";

/**
 * RESP2, the Redis wire protocol, for the single-node connection
 * (resp-connection.ts): commands out as arrays of bulk strings, replies in
 * as the values node-redis gives for RESP2 (strings, numbers, null, arrays;
 * an error reply is an ErrorReply, as node-redis's, so errors.ts tells
 * them apart the same way for every client).
 *
 * Linear in the bytes: the reader keeps the arrays it is filling and only
 * the bytes of the one element not yet complete, and tries again only once
 * enough bytes for that element have come, so a reply of many megabytes
 * read in thousands of chunks is parsed once, not once per chunk.
 */

const CR = 13;
const LF = 10;
const PLUS = 43;
const MINUS = 45;
const COLON = 58;
const DOLLAR = 36;
const STAR = 42;

/** The longest header or simple line accepted (an error reply's text, a length). */
export const MAX_LINE_BYTES = 64 * 1024;

/**
 * Buffer's own utf8Slice, which toString("utf8", start, end) calls after
 * checking its arguments (Node has had it since its first releases; it is
 * not in @types/node). A Get's reply holds dozens of bulk strings, and the
 * wrapper was a third of their decoding's CPU. Should a Node release drop
 * it, bulk strings go through toString again.
 */
interface Utf8Slicing {
  utf8Slice(start: number, end: number): string;
}

const HAS_UTF8_SLICE =
  typeof (Buffer.prototype as unknown as Partial<Utf8Slicing>).utf8Slice === "function";

/** The UTF-8 text of buf[start, end), bounds already checked. */
function utf8(buf: Buffer, start: number, end: number): string {
  return HAS_UTF8_SLICE
    ? (buf as unknown as Utf8Slicing).utf8Slice(start, end)
    : buf.toString("utf8", start, end);
}

/** Bytes Redis sent that are not RESP2: the connection cannot go on. */
export class RespProtocolError extends Error {
  override readonly name = "RespProtocolError";
}

/** What a CommandWriter starts with; it doubles as needed. */
const WRITER_START_BYTES = 4 * 1024;
/** The most it keeps between writes: a larger buffer (an import's) is let go. */
const WRITER_KEPT_BYTES = 64 * 1024;
/** Up to this many UTF-16 units an argument is copied byte by byte while it is ASCII. */
const COPY_BY_BYTE_UNITS = 256;

/**
 * Commands as RESP2 (each an array of bulk strings, lengths in UTF-8
 * bytes), encoded straight into one buffer for one write. This takes about
 * half the CPU of building the command as a string: that built some 150
 * strings for an Add's 38 arguments, asked Buffer for each argument's UTF-8
 * length and had the socket encode the whole text again (3.7 µs against
 * 2.0 µs a command, encoding 30 Adds' commands in a loop). An
 * argument of ASCII, as almost all are (keys, numbers, JSON of ASCII text),
 * is copied unit by unit up to 256 units, and by Buffer's latin1 writer
 * once its UTF-8 length is found to equal its length; one with any other
 * character is measured and written by Buffer's UTF-8 encoder.
 */
export class CommandWriter {
  #buf = Buffer.allocUnsafe(WRITER_START_BYTES);
  #pos = 0;

  /** Whether nothing is waiting to be taken. */
  get empty(): boolean {
    return this.#pos === 0;
  }

  write(args: readonly string[]): void {
    // The most the command can take: 3 bytes per UTF-16 unit, and a header each.
    let most = 16;
    for (const arg of args) most += arg.length * 3 + 16;
    this.#reserve(most);
    const buf = this.#buf;
    let pos = this.#pos;
    buf[pos++] = STAR;
    pos = writeDecimal(buf, pos, args.length);
    for (const arg of args) {
      const units = arg.length;
      const start = pos;
      buf[pos++] = DOLLAR;
      pos = writeDecimal(buf, pos, units);
      let ascii = true;
      if (units <= COPY_BY_BYTE_UNITS) {
        for (let i = 0; i < units; i++) {
          const unit = arg.charCodeAt(i);
          if (unit > 0x7f) {
            ascii = false;
            break;
          }
          buf[pos++] = unit;
        }
      } else {
        ascii = Buffer.byteLength(arg, "utf8") === units;
        if (ascii) pos += buf.write(arg, pos, units, "latin1");
      }
      if (!ascii) {
        pos = start;
        buf[pos++] = DOLLAR;
        pos = writeDecimal(buf, pos, Buffer.byteLength(arg, "utf8"));
        pos += buf.write(arg, pos, "utf8");
      }
      buf[pos++] = CR;
      buf[pos++] = LF;
    }
    this.#pos = pos;
  }

  /** The bytes written since the last take, as a buffer of their own; the writer is empty again. */
  take(): Buffer {
    const out = Buffer.from(this.#buf.subarray(0, this.#pos));
    this.#pos = 0;
    this.#shrink();
    return out;
  }

  /** Forgets what was written and not taken. */
  clear(): void {
    this.#pos = 0;
    this.#shrink();
  }

  /** The bytes it holds for the next commands (for tests). */
  get capacity(): number {
    return this.#buf.length;
  }

  #shrink(): void {
    // A batch of large commands (an import) grew it: that memory is not kept.
    if (this.#buf.length > WRITER_KEPT_BYTES) this.#buf = Buffer.allocUnsafe(WRITER_START_BYTES);
  }

  #reserve(bytes: number): void {
    if (this.#pos + bytes <= this.#buf.length) return;
    const grown = Buffer.allocUnsafe(Math.max(this.#buf.length * 2, this.#pos + bytes));
    this.#buf.copy(grown, 0, 0, this.#pos);
    this.#buf = grown;
  }
}

/** Writes n (a whole number >= 0) in decimal, then CRLF; returns the position after. */
function writeDecimal(buf: Buffer, at: number, n: number): number {
  let pos = at;
  if (n < 10) {
    buf[pos++] = 48 + n;
  } else {
    const digits = String(n);
    for (let i = 0; i < digits.length; i++) buf[pos++] = digits.charCodeAt(i);
  }
  buf[pos++] = CR;
  buf[pos++] = LF;
  return pos;
}

interface ArrayFrame {
  readonly items: unknown[];
  readonly size: number;
}

/** Turns the bytes of a connection into whole replies, in order. */
export class RespReader {
  readonly #onReply: (reply: unknown) => void;
  /** Bytes received and not yet parsed (the start of an element not yet complete). */
  #chunks: Buffer[] = [];
  #buffered = 0;
  /** Bytes the pending element needs before another try is worth it. */
  #need = 0;
  /** The arrays being filled, outermost first. */
  readonly #open: ArrayFrame[] = [];

  constructor(onReply: (reply: unknown) => void) {
    this.#onReply = onReply;
  }

  /** Bytes held for an element not yet complete. */
  get buffered(): number {
    return this.#buffered;
  }

  /** Feeds received bytes; calls onReply for each reply they complete. Throws RespProtocolError. */
  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    if (this.#buffered < this.#need) return;
    const bytes =
      this.#chunks.length === 1
        ? (this.#chunks[0] as Buffer)
        : Buffer.concat(this.#chunks, this.#buffered);
    const used = this.#parse(bytes);
    if (used === bytes.length) {
      this.#chunks = [];
      this.#buffered = 0;
    } else {
      const rest = bytes.subarray(used);
      this.#chunks = [rest];
      this.#buffered = rest.length;
    }
  }

  /** Parses whole elements from the start of `buf`; returns the bytes it used. */
  #parse(buf: Buffer): number {
    let pos = 0;
    const end = buf.length;
    while (pos < end) {
      const type = buf[pos];
      let value: unknown;
      let next: number;
      if (type === DOLLAR || type === STAR || type === COLON) {
        const n = readHeaderInteger(buf, pos + 1, end);
        if (headerEnd < 0) return this.#wait(pos, end - pos + 1);
        next = headerEnd + 2;
        if (type === DOLLAR) {
          if (n < 0) {
            value = null;
          } else {
            const stop = next + n;
            if (stop + 2 > end) return this.#wait(pos, stop + 2 - pos);
            if (buf[stop] !== CR || buf[stop + 1] !== LF) {
              throw new RespProtocolError("a bulk string does not end where its length says");
            }
            value = utf8(buf, next, stop);
            next = stop + 2;
          }
        } else if (type === STAR) {
          if (n > 0) {
            this.#open.push({ items: [], size: n });
            pos = next;
            continue;
          }
          value = n < 0 ? null : [];
        } else {
          value = n;
        }
      } else if (type === PLUS || type === MINUS) {
        const lineEnd = buf.indexOf(CR, pos + 1);
        if (lineEnd === -1 || lineEnd + 1 >= end) {
          if (end - pos > MAX_LINE_BYTES) throw new RespProtocolError("a reply line is too long");
          return this.#wait(pos, end - pos + 1);
        }
        const text = buf.toString("utf8", pos + 1, lineEnd);
        value = type === PLUS ? text : new ErrorReply(text);
        next = lineEnd + 2;
      } else {
        throw new RespProtocolError(`unexpected reply type byte ${String(type)}`);
      }
      pos = next;
      this.#place(value);
    }
    this.#need = 0;
    return pos;
  }

  /** The element at `pos` is not all here: wait for `need` bytes from it. */
  #wait(pos: number, need: number): number {
    this.#need = need;
    return pos;
  }

  /** Puts a complete element into the array being filled, or hands out a complete reply. */
  #place(element: unknown): void {
    let value = element;
    for (;;) {
      const frame = this.#open[this.#open.length - 1];
      if (frame === undefined) {
        this.#onReply(value);
        return;
      }
      frame.items.push(value);
      if (frame.items.length < frame.size) return;
      this.#open.pop();
      value = frame.items;
    }
  }
}

/** Where readHeaderInteger found its line's CR; -1 when the line is not all there yet. */
let headerEnd = 0;

/** Longest integer line accepted: a sign and 20 digits. */
const MAX_INTEGER_DIGITS = 21;

/**
 * The integer of a header line (a length, a count, an integer reply) from
 * `from`, read up to its CR (set in headerEnd, which is -1 when the line
 * and its LF have not all arrived).
 */
function readHeaderInteger(buf: Buffer, from: number, end: number): number {
  let i = from;
  const negative = i < end && buf[i] === MINUS;
  if (negative) i++;
  const digits = i;
  let n = 0;
  for (; i < end; i++) {
    const c = buf[i] as number;
    if (c === CR) break;
    const digit = c - 48;
    if (digit < 0 || digit > 9) throw new RespProtocolError("a malformed integer");
    if (i - from >= MAX_INTEGER_DIGITS) throw new RespProtocolError("an integer is too long");
    n = n * 10 + digit;
  }
  if (i + 1 >= end) {
    headerEnd = -1;
    return 0;
  }
  if (i === digits) throw new RespProtocolError("an empty integer");
  headerEnd = i;
  return negative ? -n : n;
}
