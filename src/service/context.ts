import type {
  AddRequest,
  AddResponse,
  ClearRequest,
  ClearResponse,
  ForkRequest,
  ForkResponse,
  GetRequest,
  GetResponse,
  ListThreadsRequest,
  ListThreadsResponse,
  RewindRequest,
  RewindResponse,
  WatchRequest,
  WatchResponse,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";

/** What a transport tells the service about one call. */
export interface CallContext {
  /** The caller's namespace (from auth; "" without auth). */
  namespace: string;
  /** Aborted when the client cancels, the deadline passes or the server shuts down. */
  signal: AbortSignal;
  /** Absolute deadline in ms since the epoch, if the client set one. */
  deadline: number | undefined;
}

/**
 * The MemoryService behaviour, free of any transport: the grpc-js and the
 * Connect adapters both call this. Methods throw MemoryError for domain
 * failures; anything else is an internal error.
 */
export interface MemoryServiceCore {
  add(req: AddRequest, ctx: CallContext): Promise<AddResponse>;
  get(req: GetRequest, ctx: CallContext): Promise<GetResponse>;
  clear(req: ClearRequest, ctx: CallContext): Promise<ClearResponse>;
  listThreads(req: ListThreadsRequest, ctx: CallContext): Promise<ListThreadsResponse>;
  rewind(req: RewindRequest, ctx: CallContext): Promise<RewindResponse>;
  fork(req: ForkRequest, ctx: CallContext): Promise<ForkResponse>;
  /** Ends (returns) only when ctx.signal aborts or the service shuts down (throws unavailable). */
  watch(req: WatchRequest, ctx: CallContext): AsyncIterable<WatchResponse>;
}
