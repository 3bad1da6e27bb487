/**
 * A namespace's thread ids in UTF-8 byte order, for the memory store's
 * ListThreads and Clear(all): a page costs O(log n + page), an insert or a
 * removal O(log n + CHUNK).
 *
 * Why chunks: one sorted array with binary-search insert moves up to n
 * pointers per new thread (4 MB of memmove at a million threads), and
 * sorting every id per page is what this replaces. A list of sorted chunks of
 * at most 2 * CHUNK ids each (the layout of Python's sortedcontainers) keeps
 * each memmove within one chunk and the chunk index small (n / CHUNK
 * entries), with plain arrays that are fast to scan; a B-tree or a skip list
 * would give the same bounds with more code and more pointer chasing.
 */
export class SortedIds {
  /** Non-empty sorted chunks, in order: every id of chunks[i] < every id of chunks[i + 1]. */
  readonly #chunks: string[][] = [];
  #size = 0;

  get size(): number {
    return this.#size;
  }

  /** Adds `id`; false when it was there already. */
  add(id: string): boolean {
    const chunks = this.#chunks;
    if (chunks.length === 0) {
      chunks.push([id]);
      this.#size = 1;
      return true;
    }
    const c = Math.min(this.#chunkFor(id, false), chunks.length - 1);
    const chunk = chunks[c] as string[];
    const i = lowerBound(chunk, id, false);
    if (i < chunk.length && chunk[i] === id) return false;
    chunk.splice(i, 0, id);
    this.#size++;
    if (chunk.length > 2 * CHUNK) chunks.splice(c + 1, 0, chunk.splice(CHUNK));
    return true;
  }

  /** Removes `id`; false when it was not there. */
  delete(id: string): boolean {
    const c = this.#chunkFor(id, false);
    const chunk = this.#chunks[c];
    if (chunk === undefined) return false;
    const i = lowerBound(chunk, id, false);
    if (chunk[i] !== id) return false;
    chunk.splice(i, 1);
    this.#size--;
    if (chunk.length === 0) this.#chunks.splice(c, 1);
    return true;
  }

  /** At most `limit` ids greater than `after`, ascending. */
  after(after: string, limit: number): string[] {
    const out: string[] = [];
    const chunks = this.#chunks;
    for (let c = this.#chunkFor(after, true); c < chunks.length && out.length < limit; c++) {
      const chunk = chunks[c] as string[];
      const from = out.length === 0 ? lowerBound(chunk, after, true) : 0;
      for (let i = from; i < chunk.length && out.length < limit; i++) out.push(chunk[i] as string);
    }
    return out;
  }

  /** Removes and returns the `limit` smallest ids, ascending. */
  shift(limit: number): string[] {
    const out: string[] = [];
    const chunks = this.#chunks;
    while (out.length < limit && chunks.length > 0) {
      const chunk = chunks[0] as string[];
      const take = Math.min(limit - out.length, chunk.length);
      if (take === chunk.length) {
        chunks.shift();
        for (const id of chunk) out.push(id);
      } else {
        for (const id of chunk.splice(0, take)) out.push(id);
      }
    }
    this.#size -= out.length;
    return out;
  }

  /**
   * Index of the first chunk whose last id is >= `id` (> when `strict`), or
   * the number of chunks when there is none.
   */
  #chunkFor(id: string, strict: boolean): number {
    const chunks = this.#chunks;
    let lo = 0;
    let hi = chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const chunk = chunks[mid] as string[];
      const cmp = compareCodePoints(chunk[chunk.length - 1] as string, id);
      if (cmp < 0 || (strict && cmp === 0)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

const CHUNK = 512;

/** First index whose id is >= `id` (> when `strict`). */
function lowerBound(chunk: string[], id: string, strict: boolean): number {
  let lo = 0;
  let hi = chunk.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const cmp = compareCodePoints(chunk[mid] as string, id);
    if (cmp < 0 || (strict && cmp === 0)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Code point order, which is UTF-8 byte order, without encoding: UTF-16 code
 * units compare the same except that surrogates (astral code points,
 * U+D800–DFFF) sort before U+E000–FFFF in UTF-16 and after them in code
 * points; `lift` moves them above.
 */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return lift(x) - lift(y);
  }
  return a.length - b.length;
}

function lift(unit: number): number {
  if (unit < 0xd800) return unit;
  return unit < 0xe000 ? unit + 0x2000 : unit - 0x800;
}

/**
 * Byte order of UTF-8, which is the order ListThreads promises, by encoding:
 * the reference compareCodePoints is checked against.
 */
export function compareBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}
