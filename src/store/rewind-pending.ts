import type { RewindCommand, RewindResult } from "./store.js";

// TODO(rewind): removed once every backend implements Store.rewind; a
// placeholder so the backends compile while each is split and given it.
export async function rewindPending(_cmd: RewindCommand): Promise<RewindResult> {
  throw new Error("rewind: not built for this store yet");
}
