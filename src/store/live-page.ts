/**
 * One page of thread ids without the expired ones: a thread past its ttl is
 * gone for every call at once, though the sweep that removes it (and logs its
 * ThreadCleared) runs up to --ttl-sweep-interval-ms later. `fetch` reads ids
 * after a cursor in order; `expired` says which of them have expired. Pages
 * on past expired ids until the page is full or the ids run out, so the cost
 * is the page plus the expired ids not yet swept (the sweep bounds those).
 */
export async function livePage(
  after: string,
  limit: number,
  fetch: (after: string, limit: number) => Promise<string[]>,
  expired: (ids: string[]) => Promise<boolean[]>,
): Promise<string[]> {
  const out: string[] = [];
  let cursor = after;
  while (out.length < limit) {
    const want = limit - out.length;
    const ids = await fetch(cursor, want);
    if (ids.length === 0) break;
    const gone = await expired(ids);
    ids.forEach((id, i) => {
      if (gone[i] !== true) out.push(id);
    });
    if (ids.length < want) break;
    cursor = ids[ids.length - 1] ?? cursor;
  }
  return out;
}
