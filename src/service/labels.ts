import { invalidArgument } from "../core/errors.js";
import type { Labels } from "../core/types.js";

/** Labels a thread may carry (AddRequest.labels); a filter may name as many. */
export const MAX_LABELS = 16;
export const MAX_LABEL_KEY_BYTES = 64;
export const MAX_LABEL_VALUE_BYTES = 256;

// Linear, anchored, no nested quantifiers: safe on any input.
const LABEL_KEY = /^[A-Za-z0-9_.\-/]+$/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what we refuse.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * The labels of a request (`field`: "labels"), checked; undefined when there
 * are none. Keys: 1 to 64 bytes of letters, digits, "_", "-", "." and "/"
 * (never "=", which the stores' label index names rely on); values: at most
 * 256 bytes, no control characters; at most 16 labels. Errors name the label.
 */
export function labelsFrom(map: Record<string, string>, field: string): Labels | undefined {
  const entries = Object.entries(map);
  if (entries.length === 0) return undefined;
  if (entries.length > MAX_LABELS) {
    throw invalidArgument(field, `at most ${MAX_LABELS} labels (got ${entries.length})`);
  }
  const out: Labels = {};
  for (const [key, value] of entries) {
    const at = `${field}[${JSON.stringify(key)}]`;
    if (key === "" || Buffer.byteLength(key, "utf8") > MAX_LABEL_KEY_BYTES) {
      throw invalidArgument(at, `the key must be 1 to ${MAX_LABEL_KEY_BYTES} bytes`);
    }
    if (!LABEL_KEY.test(key)) {
      throw invalidArgument(at, 'the key may hold only letters, digits, "_", "-", "." and "/"');
    }
    if (Buffer.byteLength(value, "utf8") > MAX_LABEL_VALUE_BYTES) {
      throw invalidArgument(at, `the value must be at most ${MAX_LABEL_VALUE_BYTES} bytes`);
    }
    if (CONTROL.test(value)) {
      throw invalidArgument(at, "the value must not contain control characters");
    }
    out[key] = value;
  }
  return out;
}
