import type { ChatMessage, Strategy } from "../../src/core/types.js";
import type { AppendCommand } from "../../src/store/store.js";

/** Strategies and commands shared by the store tests. */
export const window20: Extract<Strategy, { kind: "window" }> = {
  kind: "window",
  window: 20,
  excludeSystem: false,
  maxStored: 1000,
};
export const buffer: Strategy = {
  kind: "buffer",
  maxMessages: 0,
  excludeSystem: false,
  maxStored: 1000,
};
export const summary: Extract<Strategy, { kind: "summary" }> = {
  kind: "summary",
  window: 2,
  summarizeEvery: 2,
  model: "extractive",
  excludeSystem: false,
  maxStored: 1000,
};

export const user = (content: string): ChatMessage => ({ role: "user", content });

/** An Add of one user message "a" to thread "t" of namespace "ns", changed by `over`. */
export function appendCommands(defaultStrategy: Strategy) {
  return (over: Partial<AppendCommand> = {}): AppendCommand => ({
    namespace: "ns",
    threadId: "t",
    messages: [user("a")],
    strategy: undefined,
    defaultStrategy,
    replaceStrategy: false,
    requestId: "",
    requestHash: "",
    expectedLastSeq: undefined,
    now: 1000,
    ...over,
  });
}
