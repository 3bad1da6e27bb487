/**
 * o200k_base token counts of ASCII text, without a regular expression and
 * without a string per pre-token. Most chat text is ASCII, and counting it
 * with gpt-tokenizer was the largest part of an Add's CPU spent in the
 * service's own path (about 8 % of the server's CPU per Add on Redis in a
 * profile; bench/RESULTS.md): its pre-token regular expression has Unicode
 * property classes, and each pre-token becomes a string looked up in a map
 * of 200,000 strings.
 *
 * The count is exactly gpt-tokenizer's, which is the definition of it
 * (test/core/ascii-token-counter.test.ts compares the two on random ASCII):
 *
 * - Pre-tokens are cut as o200k_base's pattern cuts ASCII text. In ASCII its
 *   classes are simple: letters are A-Z (upper) and a-z (lower), numbers
 *   0-9, whitespace \t \n \v \f \r and space (what JavaScript's \s matches
 *   in ASCII), and every other character is "other". Each rule below is one
 *   alternative of the pattern, tried in the pattern's order, with the
 *   result its backtracking gives.
 * - A pre-token that is one token of the vocabulary counts 1. The
 *   vocabulary's ASCII strings are kept in an open-addressing table of typed
 *   arrays (FNV-1a hashes, checked against the bytes), built by prepare()
 *   or else on first use (about 50 ms and 3 MB).
 * - Any other pre-token is counted by the given `countPiece` (gpt-tokenizer:
 *   a pre-token counted alone is cut as in its text, so the count is the
 *   same), remembered in a bounded map, as the same words recur.
 *
 * Text with any character above U+007F is not counted here (undefined).
 * Work is linear in the text; the caller bounds a pre-token's length.
 */

/** Character classes of ASCII, as o200k_base's pattern sees them. */
const UPPER = 1;
const LOWER = 2;
const DIGIT = 3;
const LINE_BREAK = 4; // \r \n
const SPACE = 5; // \t \v \f and space: whitespace that is not a line break
const OTHER = 6;

const CLASS = new Uint8Array(128).fill(OTHER);
for (let c = 65; c <= 90; c++) CLASS[c] = UPPER; // A-Z
for (let c = 97; c <= 122; c++) CLASS[c] = LOWER; // a-z
for (let c = 48; c <= 57; c++) CLASS[c] = DIGIT; // 0-9
for (const c of [10, 13]) CLASS[c] = LINE_BREAK;
for (const c of [9, 11, 12, 32]) CLASS[c] = SPACE;

const APOSTROPHE = 39;
const SLASH = 47;
const BLANK = 32;

/** Distinct pre-tokens that are not one token, remembered with their counts. */
export const PIECE_COUNTS_KEPT = 4096;

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** The vocabulary's ASCII strings, found by hash. */
interface SingleTokens {
  /** Index into offsets/lengths per slot; -1 for an empty slot. */
  readonly slots: Int32Array;
  readonly mask: number;
  readonly offsets: Int32Array;
  readonly lengths: Int32Array;
  readonly bytes: Uint8Array;
}

function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 127) return false;
  return true;
}

function buildSingleTokens(vocabulary: readonly (string | readonly number[])[]): SingleTokens {
  const strings: string[] = [];
  let total = 0;
  // Only the string entries: gpt-tokenizer finds a pre-token by its string
  // among these; the others (byte sequences that are not UTF-8) it reaches
  // by merging, which countPiece does.
  for (const entry of vocabulary) {
    if (typeof entry === "string" && entry.length > 0 && isAscii(entry)) {
      strings.push(entry);
      total += entry.length;
    }
  }
  // At most half full, so probes stay short.
  let size = 1;
  while (size < strings.length * 2) size *= 2;
  const slots = new Int32Array(size).fill(-1);
  const offsets = new Int32Array(strings.length);
  const lengths = new Int32Array(strings.length);
  const bytes = new Uint8Array(total);
  const mask = size - 1;
  let at = 0;
  for (let k = 0; k < strings.length; k++) {
    const s = strings[k] as string;
    offsets[k] = at;
    lengths[k] = s.length;
    let h = FNV_OFFSET;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      bytes[at++] = c;
      h = Math.imul(h ^ c, FNV_PRIME);
    }
    let slot = h & mask;
    while (slots[slot] !== -1) slot = (slot + 1) & mask;
    slots[slot] = k;
  }
  return { slots, mask, offsets, lengths, bytes };
}

/** Whether text[start, end) is one token of the vocabulary. */
function isSingleToken(t: SingleTokens, text: string, start: number, end: number): boolean {
  const n = end - start;
  let h = FNV_OFFSET;
  for (let i = start; i < end; i++) h = Math.imul(h ^ text.charCodeAt(i), FNV_PRIME);
  for (let slot = h & t.mask; ; slot = (slot + 1) & t.mask) {
    const k = t.slots[slot] as number;
    if (k === -1) return false;
    if (t.lengths[k] !== n) continue;
    const o = t.offsets[k] as number;
    let i = 0;
    while (i < n && t.bytes[o + i] === text.charCodeAt(start + i)) i++;
    if (i === n) return true;
  }
}

function classAt(text: string, i: number): number {
  return CLASS[text.charCodeAt(i)] as number;
}

/** The length of a contraction ('s 'd 'm 't 'll 've 're, any case) at i, else 0. */
function contractionAt(text: string, i: number, n: number): number {
  if (i + 1 >= n || text.charCodeAt(i) !== APOSTROPHE) return 0;
  const a = text.charCodeAt(i + 1) | 0x20;
  if (a === 0x73 || a === 0x64 || a === 0x6d || a === 0x74) return 2; // s d m t
  if (i + 2 < n) {
    const b = text.charCodeAt(i + 2) | 0x20;
    if ((a === 0x6c && b === 0x6c) || (a === 0x76 && b === 0x65) || (a === 0x72 && b === 0x65)) {
      return 3; // ll ve re
    }
  }
  return 0;
}

/**
 * From i, where a letter is: upper* lower+ contraction? (the first
 * alternative), else upper+ lower* contraction? (the second). Returns the end.
 */
function wordEnd(text: string, i: number, n: number): number {
  let j = i;
  while (j < n && classAt(text, j) === UPPER) j++;
  while (j < n && classAt(text, j) === LOWER) j++;
  return j + contractionAt(text, j, n);
}

/** The end of the pre-token that starts at i (i < n). */
function preTokenEnd(text: string, i: number, n: number): number {
  const c = classAt(text, i);
  // 1st and 2nd alternatives: an optional leading character that is neither
  // a letter, a number nor a line break, then letters.
  if (c === UPPER || c === LOWER) return wordEnd(text, i, n);
  if ((c === SPACE || c === OTHER) && i + 1 < n) {
    const d = classAt(text, i + 1);
    if (d === UPPER || d === LOWER) return wordEnd(text, i + 1, n);
  }
  // 3rd: one to three digits.
  if (c === DIGIT) {
    let j = i + 1;
    while (j < n && j < i + 3 && classAt(text, j) === DIGIT) j++;
    return j;
  }
  // 4th: an optional space, others, then line breaks and slashes.
  const first = text.charCodeAt(i) === BLANK && i + 1 < n && classAt(text, i + 1) === OTHER;
  if (c === OTHER || first) {
    let j = first ? i + 2 : i + 1;
    while (j < n && classAt(text, j) === OTHER) j++;
    while (j < n && (classAt(text, j) === LINE_BREAK || text.charCodeAt(j) === SLASH)) j++;
    return j;
  }
  // Whitespace from here on.
  let end = i;
  let lastBreak = -1;
  for (; end < n; end++) {
    const w = classAt(text, end);
    if (w === LINE_BREAK) lastBreak = end;
    else if (w !== SPACE) break;
  }
  // 5th: whitespace through its last line break.
  if (lastBreak >= 0) return lastBreak + 1;
  // 6th: whitespace not followed by a non-space: all of it at the end of the
  // text, else all but its last character (left to start the next word).
  if (end === n) return end;
  if (end - i >= 2) return end - 1;
  // 7th: the one whitespace character.
  return end;
}

/**
 * A counter of o200k_base tokens for ASCII text. `vocabulary` is the
 * encoding's ranks (gpt-tokenizer's bpeRanks/o200k_base); `countPiece`
 * counts one pre-token that is not a single token.
 */
export interface AsciiTokenCounter {
  /** The text's tokens, or undefined when it has a character above U+007F. */
  count(text: string): number | undefined;
  /** Builds the vocabulary table now rather than in the first count (a server's start-up). */
  prepare(): void;
}

export function asciiTokenCounter(
  vocabulary: readonly (string | readonly number[])[],
  countPiece: (piece: string) => number,
): AsciiTokenCounter {
  let singles: SingleTokens | undefined;
  const pieceCounts = new Map<string, number>();
  const prepare = (): SingleTokens => {
    singles ??= buildSingleTokens(vocabulary);
    return singles;
  };
  const count = (text: string): number | undefined => {
    if (!isAscii(text)) return undefined;
    const table = prepare();
    const n = text.length;
    let tokens = 0;
    for (let i = 0; i < n; ) {
      const end = preTokenEnd(text, i, n);
      if (end - i === 1 || isSingleToken(table, text, i, end)) {
        // Every ASCII character is a token of its own.
        tokens += 1;
      } else {
        const piece = text.slice(i, end);
        let pieceCount = pieceCounts.get(piece);
        if (pieceCount === undefined) {
          pieceCount = countPiece(piece);
          if (pieceCounts.size >= PIECE_COUNTS_KEPT) pieceCounts.clear();
          pieceCounts.set(piece, pieceCount);
        }
        tokens += pieceCount;
      }
      i = end;
    }
    return tokens;
  };
  return { count, prepare };
}
