import type { Store } from "../store/store.js";
import { decodeThreadLine, encodeThreadLine, ThreadLineError } from "./thread-line.js";

/** What an import did. */
export interface ImportOutcome {
  /** Threads written. */
  imported: number;
  /** Lines whose thread was already there with the same content. */
  unchanged: number;
}

/**
 * Reads export lines (thread-line.ts) into `store`, one thread at a time,
 * each written atomically by Store.importThread. Idempotent: a thread that
 * already exists with the same content (everything but its incarnation) is
 * counted unchanged and left alone, so importing a file twice changes
 * nothing. A thread that exists with other content is refused: the import
 * stops there with a ThreadLineError naming the line, having written the
 * lines before it (run it again after clearing the thread, or into another
 * store; the lines already imported are then unchanged). Blank lines are
 * skipped. Quota refusals (resource_exhausted) stop it the same way.
 */
export async function importLines(
  store: Store,
  lines: AsyncIterable<string>,
  now: () => number = Date.now,
): Promise<ImportOutcome> {
  const outcome: ImportOutcome = { imported: 0, unchanged: 0 };
  let no = 0;
  for await (const text of lines) {
    no++;
    if (text.trim() === "") continue;
    const where = `line ${no}`;
    const line = decodeThreadLine(text, where);
    let written: boolean;
    try {
      written = await store.importThread({ ...line, now: now() });
    } catch (err) {
      throw new ThreadLineError(`${where}: ${(err as Error).message}`, { cause: err });
    }
    if (written) {
      outcome.imported++;
      continue;
    }
    const existing = await store.read(line.namespace, line.threadId);
    const same =
      existing !== undefined &&
      encodeThreadLine({
        ...existing.thread,
        namespace: line.namespace,
        messages: existing.messages,
      }) === encodeThreadLine(line);
    if (!same) {
      throw new ThreadLineError(
        `${where}: thread "${line.threadId}" of namespace "${line.namespace}" already exists with other content; nothing of it was changed (clear it first to replace it)`,
      );
    }
    outcome.unchanged++;
  }
  return outcome;
}
