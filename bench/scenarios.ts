import { create, toBinary } from "@bufbuild/protobuf";
import {
  AddRequestSchema,
  type ChatMessage,
  ChatMessageSchema,
  GetRequestSchema,
  MemoryService,
  Role,
} from "../gen/ts/windlass/memory/v1/memory_pb.js";

/** The request bytes of the benchmark's workloads, encoded once up front. */

export const ADD_PATH = `/${MemoryService.typeName}/${MemoryService.method.add.name}`;
export const GET_PATH = `/${MemoryService.typeName}/${MemoryService.method.get.name}`;
export const FORK_PATH = `/${MemoryService.typeName}/${MemoryService.method.fork.name}`;

/** The thread the Get scenario reads: window strategy, GET_SEED_MESSAGES stored. */
export const GET_THREAD = "bench-get";
export const GET_WINDOW = 20;
export const GET_SEED_MESSAGES = 200;
const SEED_BATCH = 20;
const ADD_CONTENT_BYTES = 100;

const PROSE =
  "The quick brown fox jumps over the lazy dog while the harbour pilot checks the windlass, " +
  "the tide tables and the weather report before the ship leaves port at dawn. ";

/** Deterministic ASCII text of exactly `bytes` bytes, varied by `seed`. */
export function text(bytes: number, seed: number): string {
  const offset = (seed * 37) % PROSE.length;
  const rotated = PROSE.slice(offset) + PROSE.slice(0, offset);
  return `#${seed} ${rotated.repeat(Math.ceil(bytes / PROSE.length) + 1)}`.slice(0, bytes);
}

function encodeAdd(threadId: string, messages: ChatMessage[], window?: number): Buffer {
  const request = create(AddRequestSchema, {
    threadId,
    messages,
    ...(window === undefined ? {} : { strategy: { kind: { case: "window", value: { window } } } }),
  });
  return Buffer.from(toBinary(AddRequestSchema, request));
}

/** Add scenario: one user message of ~100 bytes per call, one request per thread, round-robin. */
export function addRequests(threads: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < threads; i++) {
    const message = create(ChatMessageSchema, {
      role: Role.USER,
      content: text(ADD_CONTENT_BYTES, i),
    });
    out.push(encodeAdd(`bench-add-${String(i).padStart(4, "0")}`, [message]));
  }
  return out;
}

/**
 * Seeds GET_THREAD: GET_SEED_MESSAGES alternating user/assistant messages of
 * 100-200 bytes, in batches; the first Add sets the window strategy.
 */
export function getSeedRequests(): Buffer[] {
  const out: Buffer[] = [];
  for (let first = 0; first < GET_SEED_MESSAGES; first += SEED_BATCH) {
    const messages: ChatMessage[] = [];
    for (let i = first; i < Math.min(first + SEED_BATCH, GET_SEED_MESSAGES); i++) {
      messages.push(
        create(ChatMessageSchema, {
          role: i % 2 === 0 ? Role.USER : Role.ASSISTANT,
          content: text(100 + ((i * 53) % 101), i),
        }),
      );
    }
    out.push(encodeAdd(GET_THREAD, messages, first === 0 ? GET_WINDOW : undefined));
  }
  return out;
}

/** Get scenario: the thread's window, as a client without a per-call limit asks for it. */
export function getRequest(): Buffer {
  return Buffer.from(
    toBinary(GetRequestSchema, create(GetRequestSchema, { threadId: GET_THREAD })),
  );
}
