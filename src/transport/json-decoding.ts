import {
  type DescField,
  type DescMessage,
  fromJson,
  type JsonValue,
  type MessageShape,
} from "@bufbuild/protobuf";
import { invalidArgument } from "../core/errors.js";
import { bracketKey, joinKey, MAX_DEPTH, messageOf, WHOLE_REQUEST } from "./decoding-paths.js";

// JSON: the bytes must be UTF-8 (no silent U+FFFD), the text JSON, and the
// value a message of the input type; unknown keys are refused unless
// `ignoreUnknownFields`. Failures are located by walking the JSON value.

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
