import { create } from "@bufbuild/protobuf";
import {
  type Duration,
  DurationSchema,
  type Timestamp,
  timestampFromMs,
} from "@bufbuild/protobuf/wkt";
import {
  type ChatMessage as ChatMessagePb,
  ChatMessageSchema,
  EventType as EventTypePb,
  type ForkOrigin as ForkOriginPb,
  ForkOriginSchema,
  Role as RolePb,
  type Strategy as StrategyPb,
  StrategySchema,
  SummaryPlacement as SummaryPlacementPb,
  type Thread as ThreadPb,
  ThreadSchema,
  type WatchResponse,
  WatchResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { invalidArgument } from "../core/errors.js";
import type { StrategyDraft } from "../core/strategy.js";
import { DEFAULT_TOKEN_ENCODING } from "../core/tokens.js";
import type {
  ChatMessage,
  EventType,
  ForkOrigin,
  MemoryEvent,
  Role,
  StoredMessage,
  Strategy,
  SummaryPlacement,
  ThreadState,
} from "../core/types.js";
import { clearingDraftFromPb, clearingToPb } from "./shaping-options.js";

/**
 * Conversion between the wire types (protobuf-es) and the domain types, with
 * the input checks that belong to the shape of a request. Every error names
 * the request field at fault.
 */

const ROLE_FROM_PB: Partial<Record<number, Role>> = {
  [RolePb.SYSTEM]: "system",
  [RolePb.USER]: "user",
  [RolePb.ASSISTANT]: "assistant",
  [RolePb.TOOL]: "tool",
};
const ROLE_TO_PB: Record<Role, RolePb> = {
  system: RolePb.SYSTEM,
  user: RolePb.USER,
  assistant: RolePb.ASSISTANT,
  tool: RolePb.TOOL,
};

export const DEFAULT_THREAD_ID = "default";
const MAX_THREAD_ID_BYTES = 256;
export const MAX_REQUEST_ID_BYTES = 128;

/**
 * The thread id a request means: "" is the default thread. Refuses ids longer
 * than 256 bytes or holding control characters.
 */
export function threadIdFrom(raw: string, field = "thread_id"): string {
  const id = raw === "" ? DEFAULT_THREAD_ID : raw;
  if (Buffer.byteLength(id, "utf8") > MAX_THREAD_ID_BYTES) {
    throw invalidArgument(field, `must be at most ${MAX_THREAD_ID_BYTES} bytes`);
  }
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what we refuse.
  if (/[\u0000-\u001f\u007f-\u009f]/.test(id)) {
    throw invalidArgument(field, "must not contain control characters");
  }
  return id;
}

/**
 * Domain message from a wire message; `field` is its path, e.g.
 * "messages[2]", given as a function so the hot path builds no text unless
 * a check fails.
 */
export function messageFromPb(m: ChatMessagePb, field: () => string): ChatMessage {
  const role = ROLE_FROM_PB[m.role];
  if (role === undefined) {
    throw invalidArgument(
      `${field()}.role`,
      "must be ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT or ROLE_TOOL",
    );
  }
  const out: ChatMessage = { role, content: m.content };
  if (m.name !== "") out.name = m.name;
  if (m.toolCalls.length > 0) {
    if (role !== "assistant") {
      throw invalidArgument(
        `${field()}.tool_calls`,
        "only assistant messages may carry tool calls",
      );
    }
    out.toolCalls = m.toolCalls.map((c, i) => {
      if (c.id === "") throw invalidArgument(`${field()}.tool_calls[${i}].id`, "must not be empty");
      return { id: c.id, name: c.name, arguments: c.arguments };
    });
  }
  if (role === "tool") {
    if (m.toolCallId === "") {
      throw invalidArgument(`${field()}.tool_call_id`, "must be set on tool messages");
    }
    out.toolCallId = m.toolCallId;
  } else if (m.toolCallId !== "") {
    throw invalidArgument(`${field()}.tool_call_id`, "only tool messages may carry a tool_call_id");
  }
  const keys = Object.keys(m.metadata);
  if (keys.length > 0) out.metadata = { ...m.metadata };
  return out;
}

export function messageToPb(m: StoredMessage): ChatMessagePb {
  return create(ChatMessageSchema, {
    role: ROLE_TO_PB[m.role],
    content: m.content,
    name: m.name ?? "",
    toolCalls: m.toolCalls ?? [],
    toolCallId: m.toolCallId ?? "",
    metadata: m.metadata ?? {},
    seq: BigInt(m.seq),
    createTime: timestampFromMs(m.createTime),
    tokens: m.tokens ?? 0,
  });
}

const PLACEMENT_FROM_PB: Partial<Record<number, SummaryPlacement>> = {
  [SummaryPlacementPb.UNSPECIFIED]: "system",
  [SummaryPlacementPb.SYSTEM]: "system",
  [SummaryPlacementPb.USER]: "user",
  [SummaryPlacementPb.NONE]: "none",
};
const PLACEMENT_TO_PB: Record<SummaryPlacement, SummaryPlacementPb> = {
  system: SummaryPlacementPb.SYSTEM,
  user: SummaryPlacementPb.USER,
  none: SummaryPlacementPb.NONE,
};

function placementFromPb(p: SummaryPlacementPb): SummaryPlacement {
  const placement = PLACEMENT_FROM_PB[p];
  if (placement === undefined) {
    throw invalidArgument(
      "strategy.summary.summary_placement",
      "must be SUMMARY_PLACEMENT_SYSTEM, SUMMARY_PLACEMENT_USER or SUMMARY_PLACEMENT_NONE",
    );
  }
  return placement;
}

/** The draft strategy of a request; undefined when the request has none. */
export function strategyDraftFromPb(s: StrategyPb | undefined): StrategyDraft | undefined {
  if (s === undefined) return undefined;
  const base = {
    excludeSystem: s.excludeSystem,
    maxStored: s.maxStored,
    clearToolResults: clearingDraftFromPb(s.clearToolResults),
  };
  switch (s.kind.case) {
    case "buffer":
      return { ...base, kind: "buffer", maxMessages: s.kind.value.maxMessages };
    case "window":
      return {
        ...base,
        kind: "window",
        window: s.kind.value.window,
        maxTokens: s.kind.value.maxTokens,
        tokenEncoding: s.kind.value.tokenEncoding,
      };
    case "summary":
      return {
        ...base,
        kind: "summary",
        window: s.kind.value.window,
        summarizeEvery: s.kind.value.summarizeEvery,
        model: s.kind.value.model,
        maxTokens: s.kind.value.maxTokens,
        tokenEncoding: s.kind.value.tokenEncoding,
        summaryPlacement: placementFromPb(s.kind.value.summaryPlacement),
      };
    default:
      return { ...base, kind: undefined };
  }
}

/**
 * Wire forms of strategies, by object: a thread keeps its Strategy object
 * from Add to Add (memory store), and every Add and Get answers with it.
 * Responses are encoded and dropped, never changed, so one wire form serves
 * them all.
 */
const strategyWireForms = new WeakMap<Strategy, StrategyPb>();

export function strategyToPb(s: Strategy): StrategyPb {
  let pb = strategyWireForms.get(s);
  if (pb === undefined) {
    pb = newStrategyPb(s);
    strategyWireForms.set(s, pb);
  }
  return pb;
}

function newStrategyPb(s: Strategy): StrategyPb {
  const base = {
    excludeSystem: s.excludeSystem,
    maxStored: s.maxStored,
    ...(s.clearToolResults === undefined
      ? {}
      : { clearToolResults: clearingToPb(s.clearToolResults) }),
  };
  switch (s.kind) {
    case "buffer":
      return create(StrategySchema, {
        ...base,
        kind: { case: "buffer", value: { maxMessages: s.maxMessages } },
      });
    case "window":
      return create(StrategySchema, {
        ...base,
        kind: { case: "window", value: { window: s.window, ...tokenOptionsToPb(s) } },
      });
    case "summary":
      return create(StrategySchema, {
        ...base,
        kind: {
          case: "summary",
          value: {
            window: s.window,
            summarizeEvery: s.summarizeEvery,
            model: s.model,
            ...tokenOptionsToPb(s),
            summaryPlacement: PLACEMENT_TO_PB[s.summaryPlacement ?? "system"],
          },
        },
      });
  }
}

/**
 * A strategy's token options on the wire, the encoding's default filled in;
 * max_tokens stays unset when there is no budget.
 */
function tokenOptionsToPb(s: { maxTokens?: number; tokenEncoding?: string }): {
  maxTokens?: number;
  tokenEncoding: string;
} {
  return {
    ...(s.maxTokens === undefined ? {} : { maxTokens: s.maxTokens }),
    tokenEncoding: s.tokenEncoding ?? DEFAULT_TOKEN_ENCODING,
  };
}

export function threadToPb(t: ThreadState): ThreadPb {
  return create(ThreadSchema, {
    threadId: t.threadId,
    strategy: strategyToPb(t.strategy),
    lastSeq: BigInt(t.lastSeq),
    summarizedThroughSeq: BigInt(t.summarizedThroughSeq),
    createTime: timestampFromMs(t.createTime),
    updateTime: timestampFromMs(t.updateTime),
    ...(t.labels === undefined ? {} : { labels: t.labels }),
    ...(t.ttlMs === undefined || t.expireTime === undefined
      ? {}
      : { ttl: durationFromMs(t.ttlMs), expireTime: timestampFromMs(t.expireTime) }),
    ...(t.parent === undefined ? {} : { parent: forkOriginToPb(t.parent) }),
  });
}

function forkOriginToPb(o: ForkOrigin): ForkOriginPb {
  return create(ForkOriginSchema, {
    threadId: o.threadId,
    atSeq: BigInt(o.atSeq),
    forkTime: timestampFromMs(o.forkTime),
    parentCreateTime: timestampFromMs(o.parentCreateTime),
  });
}

/** The longest ttl an Add may set: 10 years. */
export const MAX_TTL_MS = 10 * 365 * 24 * 3600 * 1000;

/** A Duration as milliseconds, checked: whole ms, 0 to MAX_TTL_MS. */
export function ttlMsFromPb(d: Duration, field: string): number {
  const seconds = Number(d.seconds);
  if (d.seconds < 0n || d.nanos < 0 || seconds * 1000 > MAX_TTL_MS) {
    throw invalidArgument(field, "must be from 0 to 10 years");
  }
  if (d.nanos % 1_000_000 !== 0) throw invalidArgument(field, "must be whole milliseconds");
  const ms = seconds * 1000 + d.nanos / 1_000_000;
  if (ms > MAX_TTL_MS) throw invalidArgument(field, "must be from 0 to 10 years");
  return ms;
}

function durationFromMs(ms: number): Duration {
  return create(DurationSchema, {
    seconds: BigInt(Math.floor(ms / 1000)),
    nanos: (ms % 1000) * 1_000_000,
  });
}

/** A uint64 from the wire as a JS number; refuses values past 2^53. */
export function safeNumber(v: bigint, field: string): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw invalidArgument(field, "is out of range");
  return Number(v);
}

const EVENT_TYPE_FROM_PB: Partial<Record<number, EventType>> = {
  [EventTypePb.SUMMARY_UPDATED]: "summary_updated",
  [EventTypePb.MESSAGES_ADDED]: "messages_added",
  [EventTypePb.THREAD_CLEARED]: "thread_cleared",
  [EventTypePb.SUMMARY_FAILED]: "summary_failed",
  [EventTypePb.THREAD_REWOUND]: "thread_rewound",
  [EventTypePb.THREAD_FORKED]: "thread_forked",
};

export function eventTypeFromPb(t: EventTypePb, field: string): EventType {
  const type = EVENT_TYPE_FROM_PB[t];
  if (type === undefined)
    throw invalidArgument(field, "must be a known event type, not UNSPECIFIED");
  return type;
}

/** The wire form of an event; `resumeToken` is the opaque token of its cursor. */
export function eventToPb(e: MemoryEvent, resumeToken: string): WatchResponse {
  const time: Timestamp = timestampFromMs(e.time);
  const common = { resumeToken, threadId: e.threadId, time };
  switch (e.type) {
    case "messages_added":
      return create(WatchResponseSchema, {
        ...common,
        event: {
          case: "messagesAdded",
          value: { firstSeq: BigInt(e.firstSeq), lastSeq: BigInt(e.lastSeq) },
        },
      });
    case "summary_updated":
      return create(WatchResponseSchema, {
        ...common,
        event: {
          case: "summaryUpdated",
          value: {
            summary: e.summary,
            summarizedThroughSeq: BigInt(e.summarizedThroughSeq),
            foldedCount: e.foldedCount,
          },
        },
      });
    case "thread_cleared":
      return create(WatchResponseSchema, {
        ...common,
        event: { case: "threadCleared", value: e.reason === undefined ? {} : { reason: e.reason } },
      });
    case "summary_failed":
      return create(WatchResponseSchema, {
        ...common,
        event: { case: "summaryFailed", value: { reason: e.reason, attempt: e.attempt } },
      });
    case "thread_rewound":
      return create(WatchResponseSchema, {
        ...common,
        event: {
          case: "threadRewound",
          value: {
            toSeq: BigInt(e.toSeq),
            removedCount: e.removedCount,
            summaryDropped: e.summaryDropped,
          },
        },
      });
    case "thread_forked":
      return create(WatchResponseSchema, {
        ...common,
        event: {
          case: "threadForked",
          value: {
            parentThreadId: e.parentThreadId,
            atSeq: BigInt(e.atSeq),
            sharedCount: e.sharedCount,
            summaryInherited: e.summaryInherited,
          },
        },
      });
  }
}

/** A Progress event: nothing was missed up to `resumeToken`. */
export function progressToPb(resumeToken: string, now: number): WatchResponse {
  return create(WatchResponseSchema, {
    resumeToken,
    time: timestampFromMs(now),
    event: { case: "progress", value: {} },
  });
}

/** Resume tokens are the store's cursors behind a version tag, base64url. */
export function encodeResumeToken(cursor: string): string {
  return Buffer.from(`v1:${cursor}`, "utf8").toString("base64url");
}

export function decodeResumeToken(token: string): string {
  const text = Buffer.from(token, "base64url").toString("utf8");
  if (!text.startsWith("v1:") || Buffer.from(text, "utf8").toString("base64url") !== token) {
    throw invalidArgument("resume_token", "is not a token this server issued");
  }
  return text.slice(3);
}
