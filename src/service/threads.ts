import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import {
  type ClearRequest,
  type ClearResponse,
  ClearResponseSchema,
  type ListThreadsRequest,
  type ListThreadsResponse,
  ListThreadsResponseSchema,
  type Thread as ThreadPb,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { invalidArgument } from "../core/errors.js";
import type { CallContext } from "./context.js";
import { threadIdFrom, threadToPb } from "./convert.js";
import { assertOpen, type ServiceDeps } from "./deps.js";
import { labelsFrom } from "./labels.js";

const PAGE_SIZE_DEFAULT = 100;
const PAGE_SIZE_MAX = 1000;

/** MemoryService.Clear: one thread, or every thread of the namespace in batches. */
export async function clear(
  deps: ServiceDeps,
  req: ClearRequest,
  ctx: CallContext,
): Promise<ClearResponse> {
  assertOpen(deps);
  const { store, folds, now } = deps;
  if (req.all) {
    if (req.threadId !== "") {
      throw invalidArgument("thread_id", "must be empty when all is set");
    }
    return clearAll(deps, ctx);
  }
  const threadId = threadIdFrom(req.threadId);
  const existed = await store.clear(ctx.namespace, threadId, now());
  folds.forget(ctx.namespace, threadId);
  return create(ClearResponseSchema, { clearedThreads: existed ? 1 : 0 });
}

async function clearAll(deps: ServiceDeps, ctx: CallContext): Promise<ClearResponse> {
  const { store, folds, now } = deps;
  const ids: string[] = [];
  // Collect ids first so their fold state can be dropped after the clear;
  // a page at a time, with a turn of the event loop between pages, so a
  // namespace of many threads does not hold up other calls.
  for (let after = ""; ; ) {
    const page = await store.listThreads(ctx.namespace, after, PAGE_SIZE_MAX);
    for (const id of page) ids.push(id);
    if (page.length < PAGE_SIZE_MAX) break;
    after = page[page.length - 1] ?? "";
    await yieldToEventLoop();
    // Nothing is cleared yet: a cancelled call can still stop here.
    ctx.signal.throwIfAborted();
  }
  const cleared = await store.clearAll(ctx.namespace, now());
  for (let i = 0; i < ids.length; i++) {
    folds.forget(ctx.namespace, ids[i] ?? "");
    if ((i + 1) % PAGE_SIZE_MAX === 0) await yieldToEventLoop();
  }
  return create(ClearResponseSchema, { clearedThreads: cleared });
}

/** MemoryService.ListThreads: a page of ids after the page token, optionally by labels and parent. */
export async function listThreads(
  deps: ServiceDeps,
  req: ListThreadsRequest,
  ctx: CallContext,
): Promise<ListThreadsResponse> {
  assertOpen(deps);
  const pageSize = req.pageSize === 0 ? PAGE_SIZE_DEFAULT : Math.min(req.pageSize, PAGE_SIZE_MAX);
  const after = decodePageToken(req.pageToken);
  const labels = labelsFrom(req.labels, "labels");
  // Checked as a thread id, but "" means every thread here, not "default".
  const forksOf = req.forksOf === "" ? undefined : threadIdFrom(req.forksOf, "forks_of");
  const ids = await deps.store.listThreads(ctx.namespace, after, pageSize + 1, labels, forksOf);
  const page = ids.slice(0, pageSize);
  const last = page[page.length - 1];
  return create(ListThreadsResponseSchema, {
    threadIds: page,
    nextPageToken: ids.length > pageSize && last !== undefined ? encodePageToken(last) : "",
    ...(req.includeThreads ? { threads: await threadsOf(deps, ctx, page) } : {}),
  });
}

/**
 * The threads of a listed page, one getThread per id (at most the page
 * size), in the page's order; an id cleared since the listing is left out.
 */
async function threadsOf(
  deps: ServiceDeps,
  ctx: CallContext,
  ids: readonly string[],
): Promise<ThreadPb[]> {
  const out: ThreadPb[] = [];
  for (const id of ids) {
    const t = await deps.store.getThread(ctx.namespace, id);
    if (t !== undefined) out.push(threadToPb(t));
  }
  return out;
}

function encodePageToken(lastId: string): string {
  return Buffer.from(`p1:${lastId}`, "utf8").toString("base64url");
}

function decodePageToken(token: string): string {
  if (token === "") return "";
  const text = Buffer.from(token, "base64url").toString("utf8");
  if (!text.startsWith("p1:") || Buffer.from(text, "utf8").toString("base64url") !== token) {
    throw invalidArgument("page_token", "is not a token this server issued");
  }
  return text.slice(3);
}
