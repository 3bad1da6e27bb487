import type { Labels } from "../../core/types.js";
import { SortedIds } from "./sorted-ids.js";

/**
 * A namespace's threads by label: for each (key, value), the ids of the
 * threads carrying it, in byte order, so a filtered listing walks only the
 * threads of its rarest label instead of the namespace.
 */
export class LabelIndex {
  readonly #byLabel = new Map<string, SortedIds>();

  /** Moves `threadId` from the entries of `before` to those of `after`. */
  replace(threadId: string, before: Labels | undefined, after: Labels | undefined): void {
    if (before !== undefined) this.remove(threadId, before);
    if (after === undefined) return;
    for (const [key, value] of Object.entries(after)) {
      const name = labelName(key, value);
      let ids = this.#byLabel.get(name);
      if (ids === undefined) {
        ids = new SortedIds();
        this.#byLabel.set(name, ids);
      }
      ids.add(threadId);
    }
  }

  remove(threadId: string, labels: Labels): void {
    for (const [key, value] of Object.entries(labels)) {
      const name = labelName(key, value);
      const ids = this.#byLabel.get(name);
      if (ids === undefined) continue;
      ids.delete(threadId);
      if (ids.size === 0) this.#byLabel.delete(name);
    }
  }

  /**
   * Ids after `after` carrying every label of `filter`, at most `limit`;
   * `labelsOf` gives a thread's labels for the labels other than the rarest.
   */
  list(
    filter: Labels,
    after: string,
    limit: number,
    labelsOf: (threadId: string) => Labels | undefined,
  ): string[] {
    let rarest: SortedIds | undefined;
    for (const [key, value] of Object.entries(filter)) {
      const ids = this.#byLabel.get(labelName(key, value));
      if (ids === undefined) return [];
      if (rarest === undefined || ids.size < rarest.size) rarest = ids;
    }
    const out: string[] = [];
    if (rarest === undefined || limit <= 0) return out;
    const chunk = Math.max(limit, 64);
    let cursor = after;
    for (;;) {
      const page = rarest.after(cursor, chunk);
      for (const id of page) {
        if (hasAll(labelsOf(id), filter)) {
          out.push(id);
          if (out.length >= limit) return out;
        }
      }
      if (page.length < chunk) return out;
      cursor = page[page.length - 1] ?? cursor;
    }
  }
}

function labelName(key: string, value: string): string {
  // Keys never contain "=" (service/labels.ts), so the name is unambiguous.
  return `${key}=${value}`;
}

/** Whether `labels` carries every label of `filter`. */
export function hasAll(labels: Labels | undefined, filter: Labels): boolean {
  for (const [key, value] of Object.entries(filter)) {
    if (labels?.[key] !== value) return false;
  }
  return true;
}
