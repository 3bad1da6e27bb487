import { isUtf8 } from "node:buffer";
import {
  type DescField,
  type DescMessage,
  fromBinary,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import { invalidArgument } from "../core/errors.js";
import { joinPath, MAX_DEPTH, messageOf, WHOLE_REQUEST } from "./decoding-paths.js";

// Binary: one pass over the wire format guided by the descriptor checks tags,
// wire types, varints, length prefixes and UTF-8 before protobuf-es decodes
// (protobuf-es neither checks wire types of known fields nor names fields in
// its errors). Unknown fields stay allowed, as protobuf requires.

const WIRE_VARINT = 0;
const WIRE_I64 = 1;
const WIRE_LEN = 2;
const WIRE_SGROUP = 3;
const WIRE_EGROUP = 4;
const WIRE_I32 = 5;

/** Decodes protobuf binary strictly; throws MemoryError invalid_argument naming the field. */
export function decodeBinaryRequest<D extends DescMessage>(
  desc: D,
  bytes: Uint8Array,
): MessageShape<D> {
  checkBinaryRequest(desc, bytes);
  try {
    return fromBinary(desc, bytes);
  } catch (err) {
    // The check above accepts nothing protobuf-es refuses; kept as a net.
    throw invalidArgument(WHOLE_REQUEST, `is not a valid ${desc.name}: ${messageOf(err)}`);
  }
}

/** Checks protobuf binary without building a message; throws like decodeBinaryRequest. */
export function checkBinaryRequest(desc: DescMessage, bytes: Uint8Array): void {
  const reader = new WireReader(bytes);
  walkMessage(desc, reader, bytes.byteLength, "", 0);
}

class WireReader {
  pos = 0;
  constructor(readonly buf: Uint8Array) {}

  /** A varint of at most 10 bytes whose value fits 64 bits; returns its low 32 bits. */
  varint(path: string, end: number): number {
    let low = 0;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= end) throw invalidArgument(path || WHOLE_REQUEST, "truncated varint");
      const byte = this.buf[this.pos++] as number;
      if (i < 5) low |= (byte & 0x7f) << (7 * i);
      if ((byte & 0x80) === 0) {
        // The 10th byte holds only the 64th bit.
        if (i === 9 && byte > 1) break;
        return low >>> 0;
      }
    }
    throw invalidArgument(path || WHOLE_REQUEST, "varint overflows 64 bits");
  }

  /** A length prefix; the bytes it announces must be there. Returns the end offset. */
  length(path: string, end: number): number {
    const startVarint = this.pos;
    const len = this.varintAsLength(path, end);
    if (len > end - this.pos) {
      this.pos = startVarint;
      throw invalidArgument(
        path || WHOLE_REQUEST,
        `length ${len} runs past the end of the message (truncated or bad length prefix)`,
      );
    }
    return this.pos + len;
  }

  /** A tag: a uint32 varint. */
  tag(path: string, end: number): number {
    return this.uint32(path, end, "tag");
  }

  private varintAsLength(path: string, end: number): number {
    return this.uint32(path, end, "length prefix");
  }

  /** A varint of at most 5 bytes below 2^32 (tags and lengths are uint32). */
  private uint32(path: string, end: number, what: string): number {
    const start = this.pos;
    this.varint(path, end);
    const size = this.pos - start;
    let value = 0;
    for (let i = size - 1; i >= 0; i--) {
      value = value * 128 + ((this.buf[start + i] as number) & 0x7f);
    }
    if (size > 5 || value > 0xffffffff) {
      throw invalidArgument(path || WHOLE_REQUEST, `${what} out of range`);
    }
    return value;
  }

  skipFixed(n: number, path: string, end: number): void {
    if (end - this.pos < n) throw invalidArgument(path || WHOLE_REQUEST, "truncated value");
    this.pos += n;
  }
}

// Field lookup by number, per message type.
const fieldsByNumber = new WeakMap<DescMessage, Map<number, DescField>>();

function fieldOf(desc: DescMessage, no: number): DescField | undefined {
  let map = fieldsByNumber.get(desc);
  if (map === undefined) {
    map = new Map(desc.fields.map((f) => [f.number, f]));
    fieldsByNumber.set(desc, map);
  }
  return map.get(no);
}

/** A message-typed value (a field, a list element, a map value) one level down. */
function walkNested(
  message: DescMessage,
  r: WireReader,
  wire: number,
  path: string,
  end: number,
  depth: number,
): void {
  expectWire(wire, WIRE_LEN, "a message", path);
  walkMessage(message, r, r.length(path, end), path, depth + 1);
}

function walkMessage(
  desc: DescMessage,
  r: WireReader,
  end: number,
  path: string,
  depth: number,
): void {
  if (depth > MAX_DEPTH) throw invalidArgument(path || WHOLE_REQUEST, "nested too deeply");
  const start = r.pos;
  let counts: Map<number, number> | undefined;
  while (r.pos < end) {
    const tag = r.tag(path, end);
    const no = tag >>> 3;
    const wire = tag & 7;
    if (no === 0) throw invalidArgument(path || WHOLE_REQUEST, "field number 0 is not allowed");
    const field = fieldOf(desc, no);
    if (field === undefined) {
      skipUnknown(r, no, wire, joinPath(path, `#${no}`), end, depth);
      continue;
    }
    const fpath = joinPath(path, field.name);
    switch (field.fieldKind) {
      case "scalar":
        readScalar(r, field.scalar, wire, fpath, end);
        break;
      case "enum":
        readScalar(r, ScalarType.INT32, wire, fpath, end);
        break;
      case "message": {
        walkNested(field.message, r, wire, fpath, end, depth);
        break;
      }
      case "list": {
        counts ??= new Map();
        let index = counts.get(no) ?? 0;
        if (field.listKind === "message") {
          const ipath = `${fpath}[${index}]`;
          walkNested(field.message, r, wire, ipath, end, depth);
          index++;
        } else {
          const scalar = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
          const packable = scalar !== ScalarType.STRING && scalar !== ScalarType.BYTES;
          if (packable && wire === WIRE_LEN) {
            const packedEnd = r.length(fpath, end);
            while (r.pos < packedEnd) {
              readScalar(r, scalar, wireTypeOf(scalar), `${fpath}[${index}]`, packedEnd);
              index++;
            }
          } else {
            readScalar(r, scalar, wire, `${fpath}[${index}]`, end);
            index++;
          }
        }
        counts.set(no, index);
        break;
      }
      case "map": {
        expectWire(wire, WIRE_LEN, "a map entry", fpath);
        const entryEnd = r.length(fpath, end);
        walkMapEntry(field, r, entryEnd, fpath, depth);
        break;
      }
    }
  }
  if (desc.typeName === TIMESTAMP) checkTimestamp(r.buf.subarray(start, end), path);
}

const TIMESTAMP = "google.protobuf.Timestamp";
// The range of google.protobuf.Timestamp: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
const MIN_SECONDS = -62_135_596_800n;
const MAX_SECONDS = 253_402_300_799n;

/** A well-formed Timestamp must also be in range (as its JSON form must be). */
function checkTimestamp(bytes: Uint8Array, path: string): void {
  let seconds = 0n;
  let nanos = 0n;
  let at = 0;
  const varint = (): bigint => {
    let value = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const byte = bytes[at++] as number;
      value |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return value;
    }
  };
  // Already walked: every tag, varint and length here is well-formed.
  while (at < bytes.length) {
    const tag = Number(varint());
    const wire = tag & 7;
    if (tag === (1 << 3) + WIRE_VARINT) seconds = BigInt.asIntN(64, varint());
    else if (tag === (2 << 3) + WIRE_VARINT) nanos = BigInt.asIntN(32, varint());
    else if (wire === WIRE_VARINT) varint();
    else if (wire === WIRE_I64) at += 8;
    else if (wire === WIRE_I32) at += 4;
    else if (wire === WIRE_LEN) at += Number(varint());
    else return; // an unknown group: leave it to protobuf-es
  }
  if (seconds < MIN_SECONDS || seconds > MAX_SECONDS) {
    throw invalidArgument(path, "invalid timestamp: seconds out of range (years 1 to 9999)");
  }
  if (nanos < 0n || nanos > 999_999_999n) {
    throw invalidArgument(path, "invalid timestamp: nanos out of range (0 to 999999999)");
  }
}

function walkMapEntry(
  field: DescField & { fieldKind: "map" },
  r: WireReader,
  end: number,
  path: string,
  depth: number,
): void {
  while (r.pos < end) {
    const tag = r.tag(path, end);
    const no = tag >>> 3;
    const wire = tag & 7;
    if (no === 1) {
      readScalar(r, field.mapKey, wire, `${path} key`, end);
    } else if (no === 2) {
      const vpath = `${path} value`;
      switch (field.mapKind) {
        case "scalar":
          readScalar(r, field.scalar, wire, vpath, end);
          break;
        case "enum":
          readScalar(r, ScalarType.INT32, wire, vpath, end);
          break;
        case "message": {
          walkNested(field.message, r, wire, vpath, end, depth);
          break;
        }
      }
    } else {
      if (no === 0) throw invalidArgument(path, "field number 0 is not allowed");
      skipUnknown(r, no, wire, path, end, depth);
    }
  }
}

function wireTypeOf(scalar: ScalarType): number {
  switch (scalar) {
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return WIRE_I64;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return WIRE_I32;
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return WIRE_LEN;
    default:
      return WIRE_VARINT;
  }
}

const WIRE_NAMES = ["varint", "64-bit", "length-delimited", "group start", "group end", "32-bit"];

function expectWire(got: number, want: number, what: string, path: string): void {
  if (got !== want) {
    throw invalidArgument(
      path,
      `wrong wire type for ${what}: ${WIRE_NAMES[got] ?? `invalid (${got})`}, expected ${WIRE_NAMES[want]}`,
    );
  }
}

function readScalar(
  r: WireReader,
  scalar: ScalarType,
  wire: number,
  path: string,
  end: number,
): void {
  const want = wireTypeOf(scalar);
  expectWire(wire, want, scalarName(scalar), path);
  switch (want) {
    case WIRE_VARINT:
      r.varint(path, end);
      return;
    case WIRE_I64:
      r.skipFixed(8, path, end);
      return;
    case WIRE_I32:
      r.skipFixed(4, path, end);
      return;
    default: {
      const valueEnd = r.length(path, end);
      if (scalar === ScalarType.STRING && !isUtf8(r.buf.subarray(r.pos, valueEnd))) {
        throw invalidArgument(path, "invalid UTF-8 in a string field");
      }
      r.pos = valueEnd;
    }
  }
}

function scalarName(scalar: ScalarType): string {
  return `a ${ScalarType[scalar]?.toLowerCase() ?? "scalar"} field`;
}

function skipUnknown(
  r: WireReader,
  no: number,
  wire: number,
  path: string,
  end: number,
  depth: number,
): void {
  switch (wire) {
    case WIRE_VARINT:
      r.varint(path, end);
      return;
    case WIRE_I64:
      r.skipFixed(8, path, end);
      return;
    case WIRE_I32:
      r.skipFixed(4, path, end);
      return;
    case WIRE_LEN:
      r.pos = r.length(path, end);
      return;
    case WIRE_SGROUP: {
      if (depth > MAX_DEPTH) throw invalidArgument(path, "nested too deeply");
      for (;;) {
        if (r.pos >= end) throw invalidArgument(path, "group without its end");
        const tag = r.tag(path, end);
        if ((tag & 7) === WIRE_EGROUP) {
          if (tag >>> 3 !== no) throw invalidArgument(path, "group ends with another field's tag");
          return;
        }
        skipUnknown(r, tag >>> 3, tag & 7, path, end, depth + 1);
      }
    }
    case WIRE_EGROUP:
      throw invalidArgument(path, "group end without a group start");
    default:
      throw invalidArgument(path, `invalid wire type ${wire}`);
  }
}
