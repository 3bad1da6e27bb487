import type {
  AppendCommand,
  CommitSummaryCommand,
  FoldFailureCommand,
  ForkCommand,
  ImportThreadCommand,
  RewindCommand,
} from "../../store.js";
import { appendWithTtl } from "./appends.js";
import { clearBatch, clearThread, sweepOne } from "./clears.js";
import type { WriteContext } from "./context.js";
import { commitSummary, recordFoldFailure } from "./folds.js";
import { fork } from "./forks.js";
import { importThread } from "./imports.js";
import type { Committed } from "./outcomes.js";
import { rewind } from "./rewind.js";

/** Every write the store makes, as the worker receives it. */
export type WriteOp =
  | { kind: "append"; cmd: AppendCommand }
  | { kind: "rewind"; cmd: RewindCommand }
  | { kind: "fork"; cmd: ForkCommand }
  | { kind: "commitSummary"; cmd: CommitSummaryCommand }
  | { kind: "recordFoldFailure"; cmd: FoldFailureCommand }
  | { kind: "acquireLease"; namespace: string; threadId: string; ttlMs: number }
  | { kind: "releaseLease"; namespace: string; threadId: string; token: number }
  | { kind: "clear"; namespace: string; threadId: string; now: number }
  | { kind: "clearBatch"; namespace: string; now: number; limit: number }
  | { kind: "import"; cmd: ImportThreadCommand }
  | { kind: "sweepOne"; namespace: string; threadId: string; now: number };

/** A write on its way to the worker. */
export interface QueuedWrite {
  id: number;
  /** Its slot in the WriteGate: whoever changes it first decides whether it runs. */
  slot: number;
  op: WriteOp;
  /** The call's deadline (ms since the epoch): not taken after it. */
  deadline?: number;
}

/** Runs one write inside the transaction (and savepoint) the caller holds. */
export function runWrite(ctx: WriteContext, op: WriteOp): Committed<unknown> {
  switch (op.kind) {
    case "append":
      return appendWithTtl(ctx, op.cmd);
    case "rewind":
      return rewind(ctx, op.cmd);
    case "fork":
      return fork(ctx, op.cmd);
    case "import":
      return importThread(ctx, op.cmd);
    case "sweepOne":
      return sweepOne(ctx, op.namespace, op.threadId, op.now);
    case "commitSummary":
      return commitSummary(ctx, op.cmd);
    case "recordFoldFailure":
      return recordFoldFailure(ctx, op.cmd);
    case "acquireLease":
      return { value: ctx.leases.acquire(op.namespace, op.threadId, op.ttlMs), events: [] };
    case "releaseLease":
      ctx.leases.release(op.namespace, op.threadId, op.token);
      return { value: undefined, events: [] };
    case "clear":
      return clearThread(ctx, op.namespace, op.threadId, op.now);
    case "clearBatch":
      return clearBatch(ctx, op.namespace, op.now, op.limit);
  }
}
