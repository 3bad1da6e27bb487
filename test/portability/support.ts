/** What the portability tests of forks share: Adds, Forks, an export to lines, lines to import. */
import { exportNamespace } from "../../src/portability/export.js";
import type { Store } from "../../src/store/store.js";
import { cmd, forkCmd } from "../store/contract/support.js";
import { user } from "../store/fixtures.js";

/** An Add of user messages `contents` to `threadId` of namespace "ns". */
export function addUsers(store: Store, threadId: string, contents: string[], now: number) {
  return store.append(cmd({ threadId, messages: contents.map((c) => user(c)), now }));
}

/** A Fork of `parent` into `fork` at `atSeq` (undefined: its last seq) in namespace "ns". */
export function forkOf(store: Store, parent: string, fork: string, atSeq?: number, now = 3000) {
  return store.fork(forkCmd(fork, { threadId: parent, atSeq, now }));
}

/** The export of namespace "ns", one string a line. */
export async function exported(store: Store): Promise<string[]> {
  const lines: string[] = [];
  await exportNamespace(store, "ns", async (line) => {
    lines.push(line.trimEnd());
  });
  return lines;
}

export async function* linesOf(texts: string[]): AsyncIterable<string> {
  yield* texts;
}
