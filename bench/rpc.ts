import * as http2 from "node:http2";
import { performance } from "node:perf_hooks";
import { type DescMessage, fromBinary, type MessageShape, toBinary } from "@bufbuild/protobuf";
import { Client, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import {
  type AddRequest,
  AddRequestSchema,
  type AddResponse,
  AddResponseSchema,
  type GetRequest,
  GetRequestSchema,
  type GetResponse,
  GetResponseSchema,
  MemoryService,
  type WatchRequest,
  WatchRequestSchema,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";

/**
 * The service's public gRPC API as the scenarios call it: typed Add and Get
 * over one grpc-js channel, and Watch streams over node:http2 sessions (light
 * enough for a thousand streams in the driver, and able to stop reading).
 */

export const WATCH_PATH = `/${MemoryService.typeName}/${MemoryService.method.watch.name}`;
const identity = (bytes: Buffer): Buffer => bytes;

export class MemoryClient {
  private readonly client: Client;

  constructor(
    address: string,
    private readonly timeoutMs: number,
  ) {
    this.client = new Client(address, credentials.createInsecure(), {
      "grpc.max_receive_message_length": 64 * 1024 * 1024,
      "grpc.max_send_message_length": 64 * 1024 * 1024,
    });
  }

  add(request: AddRequest): Promise<AddResponse> {
    return this.unary(
      `/${MemoryService.typeName}/${MemoryService.method.add.name}`,
      AddRequestSchema,
      AddResponseSchema,
      request,
    );
  }

  get(request: GetRequest): Promise<GetResponse> {
    return this.unary(
      `/${MemoryService.typeName}/${MemoryService.method.get.name}`,
      GetRequestSchema,
      GetResponseSchema,
      request,
    );
  }

  close(): void {
    this.client.close();
  }

  private unary<I extends DescMessage, O extends DescMessage>(
    path: string,
    input: I,
    output: O,
    request: MessageShape<I>,
  ): Promise<MessageShape<O>> {
    const bytes = Buffer.from(toBinary(input, request));
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        path,
        identity,
        identity,
        bytes,
        new Metadata(),
        { deadline: Date.now() + this.timeoutMs },
        (err: ServiceError | null, value?: Buffer) => {
          if (err !== null) reject(new Error(`${path}: ${err.code} ${err.details}`));
          else if (value === undefined) reject(new Error(`${path}: no response`));
          else resolve(fromBinary(output, value));
        },
      );
    });
  }
}

/** Wall-clock milliseconds with sub-millisecond precision, comparable across processes. */
export function wallMs(): number {
  return performance.timeOrigin + performance.now();
}

/** One Watch stream on an HTTP/2 session, its messages split out of the gRPC framing. */
export interface WatchStream {
  /** grpc-status and message once the stream ended; undefined while open. */
  readonly status: string | undefined;
  /** Messages received so far. */
  readonly received: number;
  /** Starts reading a stream opened with `paused`; each message goes to `onMessage`. */
  resume(onMessage?: (message: Buffer, atMs: number) => void): void;
  /** Resolves when the stream has ended (status set). */
  readonly ended: Promise<void>;
  cancel(): void;
}

/**
 * Opens Watch(request) on `session`. Unless `paused`, every whole gRPC
 * message goes to `onMessage` with the wall time its bytes arrived (taken
 * first, before any parsing). A paused stream reads nothing: once the HTTP/2
 * flow-control window is full the server cannot send it more.
 */
export function openWatch(
  session: http2.ClientHttp2Session,
  request: WatchRequest,
  options: { paused: boolean; onMessage?: (message: Buffer, atMs: number) => void },
): WatchStream {
  const body = Buffer.from(toBinary(WatchRequestSchema, request));
  const frame = Buffer.alloc(5 + body.length);
  frame.writeUInt32BE(body.length, 1);
  body.copy(frame, 5);
  const stream = session.request({
    ":method": "POST",
    ":path": WATCH_PATH,
    "content-type": "application/grpc",
    te: "trailers",
  });
  let status: string | undefined;
  let received = 0;
  let pending: Buffer = Buffer.alloc(0);
  let resolveEnded: () => void = () => {};
  const ended = new Promise<void>((resolve) => {
    resolveEnded = resolve;
  });
  const onStatus = (headers: http2.IncomingHttpHeaders): void => {
    const s = headers["grpc-status"];
    if (typeof s === "string") {
      const m = headers["grpc-message"];
      status = `${s}${typeof m === "string" ? ` ${decodeURIComponent(m)}` : ""}`;
    }
  };
  stream.on("response", onStatus);
  stream.on("trailers", onStatus);
  stream.on("error", () => {});
  stream.on("close", () => {
    status ??= `closed without grpc-status (rst ${stream.rstCode})`;
    resolveEnded();
  });
  let handler: ((message: Buffer, atMs: number) => void) | undefined;
  const onData = (chunk: Buffer): void => {
    const at = wallMs();
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 5) {
      const length = pending.readUInt32BE(1);
      if (pending.length < 5 + length) break;
      const message = pending.subarray(5, 5 + length);
      pending = pending.subarray(5 + length);
      received++;
      handler?.(message, at);
    }
  };
  const resume = (onMessage?: (message: Buffer, atMs: number) => void): void => {
    handler = onMessage;
    stream.on("data", onData);
    // A 'data' listener alone does not restart a stream paused on purpose.
    stream.resume();
  };
  stream.end(frame);
  if (!options.paused) resume(options.onMessage);
  else stream.pause();
  return {
    get status() {
      return status;
    },
    get received() {
      return received;
    },
    resume,
    ended,
    cancel() {
      if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
    },
  };
}

/** An HTTP/2 session to a gRPC server; errors surface on its streams. */
export function connectSession(address: string): http2.ClientHttp2Session {
  const session = http2.connect(`http://${address}`);
  session.on("error", () => {});
  return session;
}
