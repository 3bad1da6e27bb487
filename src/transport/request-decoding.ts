import { isUtf8 } from "node:buffer";
import {
  type DescField,
  type DescMessage,
  fromBinary,
  fromJson,
  type JsonValue,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import { invalidArgument } from "../core/errors.js";

/**
 * Strict decoding of request bodies, for every transport. Anything that is not
 * a well-formed message of the method's input type is INVALID_ARGUMENT with
 * the field at fault named ("messages[0].content: invalid UTF-8"), never
 * INTERNAL, and nothing reaches the service.
 *
 * Binary: one pass over the wire format guided by the descriptor checks tags,
 * wire types, varints, length prefixes and UTF-8 before protobuf-es decodes
 * (protobuf-es neither checks wire types of known fields nor names fields in
 * its errors). Unknown fields stay allowed, as protobuf requires.
 *
 * JSON: the bytes must be UTF-8 (no silent U+FFFD), the text JSON, and the
 * value a message of the input type; unknown keys are refused unless
 * `ignoreUnknownFields`. Failures are located by walking the JSON value.
 */

/** The field name used when the fault is in the request as a whole. */
const WHOLE_REQUEST = "request";

// Past this nesting, the walk stops: protobuf-es' own recursion limit.
const MAX_DEPTH = 100;

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

export interface JsonDecodeOptions {
  /** Accept (and drop) keys that are not fields of the message. Default false. */
  readonly ignoreUnknownFields?: boolean;
}

// A leading byte-order mark is dropped, as connect-es' own JSON decoding does.
const utf8Fatal = new TextDecoder("utf-8", { fatal: true });

/** Decodes a protobuf JSON body strictly; throws MemoryError invalid_argument naming the field. */
export function decodeJsonRequest<D extends DescMessage>(
  desc: D,
  bytes: Uint8Array,
  options: JsonDecodeOptions = {},
): MessageShape<D> {
  const json = parseJsonBytes(bytes, desc);
  const readOptions = { ignoreUnknownFields: options.ignoreUnknownFields ?? false };
  try {
    return fromJson(desc, json, readOptions);
  } catch (err) {
    const fault = locateJsonFault(desc, json, "", readOptions.ignoreUnknownFields, 0);
    throw invalidArgument(
      fault?.path || WHOLE_REQUEST,
      fault?.problem ?? `is not a valid ${desc.name}: ${jsonProblem(err)}`,
    );
  }
}

/** Checks a protobuf JSON body; throws like decodeJsonRequest. */
export function checkJsonRequest(
  desc: DescMessage,
  bytes: Uint8Array,
  options: JsonDecodeOptions = {},
): void {
  decodeJsonRequest(desc, bytes, options);
}

function parseJsonBytes(bytes: Uint8Array, desc: DescMessage): JsonValue {
  let text: string;
  try {
    text = utf8Fatal.decode(bytes);
  } catch {
    const offset = firstInvalidUtf8(bytes);
    const path = jsonPathAt(utf8Fatal.decode(bytes.subarray(0, offset)), desc);
    throw invalidArgument(path || WHOLE_REQUEST, `invalid UTF-8 (byte ${offset} of the body)`);
  }
  try {
    return JSON.parse(text) as JsonValue;
  } catch (err) {
    throw invalidArgument(WHOLE_REQUEST, `is not valid JSON: ${messageOf(err)}`);
  }
}

// ---------------------------------------------------------------- binary

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

function joinPath(parent: string, name: string): string {
  return parent === "" ? name : `${parent}.${name}`;
}

const PLAIN_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_KEY_CHARS = 64;

/** A JSON key in a path: `.name` when plain, else `["…"]` (quoted, cut to 64 characters). */
function joinKey(parent: string, key: string): string {
  if (PLAIN_KEY.test(key) && key.length <= MAX_KEY_CHARS) return joinPath(parent, key);
  return bracketKey(parent, key);
}

function bracketKey(parent: string, key: string): string {
  const shown = key.length > MAX_KEY_CHARS ? `${key.slice(0, MAX_KEY_CHARS)}…` : key;
  return `${parent}[${JSON.stringify(shown)}]`;
}

// ---------------------------------------------------------------- JSON

interface JsonFault {
  readonly path: string;
  readonly problem: string;
}

/**
 * Finds the deepest field whose value fromJson refuses. Runs only after a
 * refusal; each level decodes its own subtree, so the cost is the body's size
 * times the (small) nesting depth.
 */
function locateJsonFault(
  desc: DescMessage,
  json: JsonValue,
  path: string,
  ignoreUnknownFields: boolean,
  depth: number,
): JsonFault | undefined {
  const options = { ignoreUnknownFields };
  let whole: unknown;
  try {
    fromJson(desc, json, options);
    return undefined;
  } catch (err) {
    whole = err;
  }
  if (json === null || typeof json !== "object" || Array.isArray(json) || isWellKnown(desc)) {
    return { path, problem: problemFor(desc, json, whole) };
  }
  if (depth > MAX_DEPTH) return { path, problem: "nested too deeply" };
  for (const [key, value] of Object.entries(json)) {
    const field = desc.fields.find((f) => f.jsonName === key || f.name === key);
    if (field === undefined) {
      // Not a field: there is no proto name to give, so the key as sent.
      if (!ignoreUnknownFields) {
        return { path: joinKey(path, key), problem: `unknown field of ${desc.name}` };
      }
      continue;
    }
    // The proto's name, whichever of its two JSON spellings was sent.
    const fpath = joinKey(path, field.name);
    try {
      fromJson(desc, { [key]: value } as JsonValue, options);
    } catch (err) {
      if (value === null || typeof value !== "object") {
        return { path: fpath, problem: fieldProblem(field, value, err) };
      }
      const inner = locateInField(field, value, fpath, ignoreUnknownFields, depth);
      return inner ?? { path: fpath, problem: fieldProblem(field, value, err) };
    }
  }
  // Every key is fine alone: the keys conflict (two members of one oneof).
  return { path, problem: jsonProblem(whole) };
}

function locateInField(
  field: DescField,
  value: JsonValue,
  path: string,
  ignoreUnknownFields: boolean,
  depth: number,
): JsonFault | undefined {
  if (field.fieldKind === "message") {
    return locateJsonFault(field.message, value, path, ignoreUnknownFields, depth + 1);
  }
  if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(value)) {
    for (const [i, item] of value.entries()) {
      const fault = locateJsonFault(
        field.message,
        item,
        `${path}[${i}]`,
        ignoreUnknownFields,
        depth + 1,
      );
      if (fault !== undefined) return fault;
    }
    return undefined;
  }
  if (field.fieldKind === "list" && Array.isArray(value)) {
    for (const [i, item] of value.entries()) {
      if (item === null || typeof item !== "object") {
        try {
          fromJson(field.parent, { [field.jsonName]: [item] } as JsonValue);
        } catch (err) {
          return { path: `${path}[${i}]`, problem: fieldProblem(field, item, err) };
        }
      }
    }
    return undefined;
  }
  if (field.fieldKind === "map" && !Array.isArray(value) && typeof value === "object") {
    for (const [key, item] of Object.entries(value ?? {})) {
      const ipath = bracketKey(path, key);
      if (field.mapKind === "message") {
        const fault = locateJsonFault(field.message, item, ipath, ignoreUnknownFields, depth + 1);
        if (fault !== undefined) return fault;
        continue;
      }
      try {
        fromJson(field.parent, { [field.jsonName]: { [key]: item } } as JsonValue);
      } catch (err) {
        return { path: ipath, problem: fieldProblem(field, item, err) };
      }
    }
  }
  return undefined;
}

function isWellKnown(desc: DescMessage): boolean {
  return desc.typeName.startsWith("google.protobuf.");
}

function problemFor(desc: DescMessage, json: JsonValue, err: unknown): string {
  if (desc.typeName === "google.protobuf.Timestamp") {
    return 'invalid timestamp (want RFC 3339, e.g. "2024-05-01T12:00:00Z")';
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    return `must be a JSON object (a ${desc.name})`;
  }
  return jsonProblem(err);
}

function fieldProblem(field: DescField, value: JsonValue, err: unknown): string {
  if (field.fieldKind === "message") return problemFor(field.message, value, err);
  return `invalid value: ${jsonProblem(err)}`;
}

/** protobuf-es' message without its "cannot decode … from JSON:" preamble. */
function jsonProblem(err: unknown): string {
  const message = messageOf(err);
  const at = message.lastIndexOf(" from JSON: ");
  return at === -1 ? message : message.slice(at + " from JSON: ".length);
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Offset of the first byte that is not part of a valid UTF-8 sequence. */
export function firstInvalidUtf8(bytes: Uint8Array): number {
  let i = 0;
  const n = bytes.length;
  while (i < n) {
    const b = bytes[i] as number;
    if (b < 0x80) {
      i++;
      continue;
    }
    let need: number;
    let min: number;
    if (b >= 0xc2 && b <= 0xdf) [need, min] = [1, 0x80];
    else if (b >= 0xe0 && b <= 0xef) [need, min] = [2, 0x800];
    else if (b >= 0xf0 && b <= 0xf4) [need, min] = [3, 0x10000];
    else return i;
    let cp = b & (0x3f >> need);
    for (let k = 1; k <= need; k++) {
      const c = bytes[i + k];
      if (c === undefined || (c & 0xc0) !== 0x80) return i;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += need + 1;
  }
  return n;
}

interface PathFrame {
  readonly array: boolean;
  key: string;
  index: number;
  expectingKey: boolean;
}

/**
 * The JSON path ("messages[0].content") of the position at the end of
 * `prefix`, a prefix of a JSON text. Linear, no backtracking; tolerant of
 * anything malformed (it only has to name a place for an error message).
 * With the message `desc`, keys that name its fields are given by their
 * proto names (`create_time` for `createTime`) and map keys in brackets.
 */
export function jsonPathAt(prefix: string, desc?: DescMessage): string {
  const stack: PathFrame[] = [];
  let inKey = false;
  let i = 0;
  while (i < prefix.length) {
    const c = prefix[i];
    const top = stack.at(-1);
    if (c === '"') {
      let j = i + 1;
      while (j < prefix.length && prefix[j] !== '"') j += prefix[j] === "\\" ? 2 : 1;
      const closed = j < prefix.length;
      if (top !== undefined && !top.array && top.expectingKey) {
        top.key = unescapeKey(prefix.slice(i + 1, Math.min(j, prefix.length)));
        inKey = !closed;
        if (closed) top.expectingKey = false;
      }
      i = j + 1;
      continue;
    }
    if (c === "{") stack.push({ array: false, key: "", index: 0, expectingKey: true });
    else if (c === "[") stack.push({ array: true, key: "", index: 0, expectingKey: false });
    else if (c === "}" || c === "]") stack.pop();
    else if (c === "," && top !== undefined) {
      if (top.array) top.index++;
      else top.expectingKey = true;
    }
    i++;
  }
  let path = "";
  // The message whose fields the next key names, and the map whose key it is.
  let message = desc;
  let mapField: (DescField & { fieldKind: "map" }) | undefined;
  for (const frame of stack) {
    if (frame.array) path += `[${frame.index}]`;
    else if (!frame.expectingKey || (inKey && frame === stack.at(-1))) {
      if (mapField !== undefined) {
        path = bracketKey(path, frame.key);
        message = mapField.mapKind === "message" ? mapField.message : undefined;
        mapField = undefined;
        continue;
      }
      const field = message?.fields.find((f) => f.jsonName === frame.key || f.name === frame.key);
      path = joinKey(path, field?.name ?? frame.key);
      message =
        field?.fieldKind === "message" ||
        (field?.fieldKind === "list" && field.listKind === "message")
          ? field.message
          : undefined;
      mapField = field?.fieldKind === "map" ? field : undefined;
    }
  }
  return inKey ? `${path} (a key)` : path;
}

function unescapeKey(raw: string): string {
  try {
    return JSON.parse(`"${raw}"`) as string;
  } catch {
    return raw;
  }
}
