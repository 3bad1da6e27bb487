import type { MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";
import type {
  AddRequestSchema,
  AddResponse,
  ClearRequestSchema,
  ClearResponse,
  ForkRequestSchema,
  ForkResponse,
  GetRequestSchema,
  GetResponse,
  ListThreadsRequestSchema,
  ListThreadsResponse,
  RewindRequestSchema,
  RewindResponse,
  WatchRequestSchema,
  WatchResponse,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { createConnectClient, createGrpcClient } from "../transport/clients.js";

/**
 * One MemoryService client per transport, behind the same small interface,
 * so every integration case runs unchanged over gRPC (grpc-js) and over the
 * Connect server's protocols. Errors are normalised to the gRPC code name and
 * the message.
 */
export interface Driver {
  readonly name: string;
  add(req: MessageInitShape<typeof AddRequestSchema>, opts?: CallOpts): Promise<AddResponse>;
  get(req: MessageInitShape<typeof GetRequestSchema>, opts?: CallOpts): Promise<GetResponse>;
  clear(req: MessageInitShape<typeof ClearRequestSchema>, opts?: CallOpts): Promise<ClearResponse>;
  listThreads(
    req: MessageInitShape<typeof ListThreadsRequestSchema>,
    opts?: CallOpts,
  ): Promise<ListThreadsResponse>;
  rewind(
    req: MessageInitShape<typeof RewindRequestSchema>,
    opts?: CallOpts,
  ): Promise<RewindResponse>;
  fork(req: MessageInitShape<typeof ForkRequestSchema>, opts?: CallOpts): Promise<ForkResponse>;
  /** Opens a Watch; `next()` returns the next event, `cancel()` ends it from the client side. */
  watch(req: MessageInitShape<typeof WatchRequestSchema>, opts?: CallOpts): WatchHandle;
  close(): void;
}

export interface CallOpts {
  timeoutMs?: number;
  token?: string;
}

export interface WatchHandle {
  next(timeoutMs?: number): Promise<WatchResponse>;
  cancel(): void;
}

/** A failed call: the gRPC code name ("INVALID_ARGUMENT") and the message. */
export class CallFailed extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

const GRPC_NAMES = new Map<number, string>(
  Object.entries(GrpcStatus)
    .filter((e): e is [string, number] => typeof e[1] === "number")
    .map(([k, v]) => [v, k]),
);

// Connect's Code enum numbers are gRPC's.
const codeName = (n: number): string => GRPC_NAMES.get(n) ?? `CODE_${n}`;

function normalise(err: unknown): CallFailed {
  if (err instanceof CallFailed) return err;
  if (err instanceof ConnectError) return new CallFailed(codeName(err.code), err.rawMessage);
  const e = err as Partial<ServiceError>;
  if (typeof e.code === "number") return new CallFailed(codeName(e.code), e.details ?? "");
  return new CallFailed("CLIENT", String(err));
}

async function call<T>(p: () => Promise<T>): Promise<T> {
  try {
    return await p();
  } catch (err) {
    throw normalise(err);
  }
}

/** A queue that turns pushed events and the end of a stream into awaitable next() calls. */
function eventQueue() {
  const items: WatchResponse[] = [];
  let failure: CallFailed | undefined;
  let ended = false;
  let wake: (() => void) | undefined;
  return {
    push(e: WatchResponse) {
      items.push(e);
      wake?.();
    },
    fail(err: unknown) {
      failure = normalise(err);
      wake?.();
    },
    end() {
      ended = true;
      wake?.();
    },
    async next(timeoutMs = 10_000): Promise<WatchResponse> {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const item = items.shift();
        if (item !== undefined) return item;
        if (failure !== undefined) throw failure;
        if (ended) throw new CallFailed("ENDED", "stream ended");
        const left = until - Date.now();
        if (left <= 0) throw new CallFailed("TIMEOUT", "no event in time");
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, left);
          wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
        wake = undefined;
      }
    },
  };
}

export function grpcDriver(grpcPort: number, token?: string): Driver {
  const c = createGrpcClient(`127.0.0.1:${grpcPort}`, token === undefined ? {} : { token });
  const o = (opts?: CallOpts) => ({
    ...(opts?.timeoutMs === undefined ? {} : { deadline: Date.now() + opts.timeoutMs }),
    ...(opts?.token === undefined ? {} : { token: opts.token }),
  });
  return {
    name: "grpc (grpc-js)",
    add: (r, opts) => call(() => c.add(r, o(opts))),
    get: (r, opts) => call(() => c.get(r, o(opts))),
    clear: (r, opts) => call(() => c.clear(r, o(opts))),
    listThreads: (r, opts) => call(() => c.listThreads(r, o(opts))),
    rewind: (r, opts) => call(() => c.rewind(r, o(opts))),
    fork: (r, opts) => call(() => c.fork(r, o(opts))),
    watch(r, opts) {
      const q = eventQueue();
      const stream = c.watch(r, o(opts));
      stream.on("data", (e: WatchResponse) => q.push(e));
      stream.on("error", (err) => q.fail(err));
      stream.on("end", () => q.end());
      return { next: (ms) => q.next(ms), cancel: () => stream.cancel() };
    },
    close: () => c.close(),
  };
}

export function connectDriver(
  httpPort: number,
  protocol: "connect" | "grpc-web" | "grpc",
  httpVersion: "1.1" | "2",
  token?: string,
): Driver {
  const h = createConnectClient(`http://127.0.0.1:${httpPort}`, {
    protocol,
    httpVersion,
    ...(token === undefined ? {} : { token }),
  });
  const c = h.client;
  const o = (opts?: CallOpts) => ({
    ...(opts?.timeoutMs === undefined ? {} : { timeoutMs: opts.timeoutMs }),
    ...(opts?.token === undefined ? {} : { headers: { authorization: `Bearer ${opts.token}` } }),
  });
  return {
    name: `${protocol} over HTTP/${httpVersion} (connect-node)`,
    add: (r, opts) => call(() => c.add(r, o(opts))),
    get: (r, opts) => call(() => c.get(r, o(opts))),
    clear: (r, opts) => call(() => c.clear(r, o(opts))),
    listThreads: (r, opts) => call(() => c.listThreads(r, o(opts))),
    rewind: (r, opts) => call(() => c.rewind(r, o(opts))),
    fork: (r, opts) => call(() => c.fork(r, o(opts))),
    watch(r, opts) {
      const q = eventQueue();
      const ac = new AbortController();
      void (async () => {
        try {
          for await (const e of c.watch(r, { ...o(opts), signal: ac.signal })) q.push(e);
          q.end();
        } catch (err) {
          q.fail(err);
        }
      })();
      return { next: (ms) => q.next(ms), cancel: () => ac.abort() };
    },
    close: () => h.close(),
  };
}
