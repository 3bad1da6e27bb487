import type { ChatMessage } from "../core/types.js";

/**
 * Turns (previous summary, new messages) into a new summary: one fold.
 * Implementations must honour `signal` (abort the model call) and throw on
 * failure; they never see or log secrets beyond their own configuration.
 */
export interface Summarizer {
  /** The name SummaryStrategy.model selects it by. */
  readonly name: string;
  summarize(input: SummarizeInput, signal: AbortSignal): Promise<string>;
}

export interface SummarizeInput {
  /** The running summary so far; "" for the first fold. */
  previousSummary: string;
  /** The messages to fold in, oldest first. */
  messages: ChatMessage[];
}
