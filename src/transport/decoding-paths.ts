// The field paths and shared limits of strict request decoding
// (request-decoding.ts): binary and JSON faults are named the same way.

/** The field name used when the fault is in the request as a whole. */
export const WHOLE_REQUEST = "request";

// Past this nesting, the walk stops: protobuf-es' own recursion limit.
export const MAX_DEPTH = 100;

export function joinPath(parent: string, name: string): string {
  return parent === "" ? name : `${parent}.${name}`;
}

const PLAIN_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_KEY_CHARS = 64;

/** A JSON key in a path: `.name` when plain, else `["…"]` (quoted, cut to 64 characters). */
export function joinKey(parent: string, key: string): string {
  if (PLAIN_KEY.test(key) && key.length <= MAX_KEY_CHARS) return joinPath(parent, key);
  return bracketKey(parent, key);
}

export function bracketKey(parent: string, key: string): string {
  const shown = key.length > MAX_KEY_CHARS ? `${key.slice(0, MAX_KEY_CHARS)}…` : key;
  return `${parent}[${JSON.stringify(shown)}]`;
}

export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
