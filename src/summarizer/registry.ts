import { invalidArgument } from "../core/errors.js";
import type { Summarizer } from "./summarizer.js";

/**
 * The summarisers configured on the server, by name: what
 * `SummaryStrategy.model` selects among. An empty model is resolved to
 * `defaultName` by the caller (strategy resolution), not here.
 */
export interface SummarizerRegistry {
  /** The summariser used when a strategy names none. */
  readonly defaultName: string;
  has(name: string): boolean;
  /** Throws invalid_argument on field "strategy.summary.model" for an unknown name. */
  get(name: string): Summarizer;
  /** The configured names, sorted. */
  names(): string[];
}

/**
 * Creates a registry over a fixed set of summarisers. A missing default or a
 * duplicate name is a configuration bug, so it throws a plain Error at start-up
 * rather than a request error later.
 */
export function createSummarizerRegistry(
  summarizers: Summarizer[],
  defaultName: string,
): SummarizerRegistry {
  const byName = new Map<string, Summarizer>();
  for (const summarizer of summarizers) {
    if (summarizer.name === "") throw new Error("summarizer registry: a summarizer has no name");
    if (byName.has(summarizer.name)) {
      throw new Error(`summarizer registry: duplicate summarizer name "${summarizer.name}"`);
    }
    byName.set(summarizer.name, summarizer);
  }
  if (!byName.has(defaultName)) {
    throw new Error(
      `summarizer registry: default summarizer "${defaultName}" is not configured ` +
        `(configured: ${[...byName.keys()].sort().join(", ") || "none"})`,
    );
  }
  const names = [...byName.keys()].sort();
  return {
    defaultName,
    has: (name) => byName.has(name),
    get(name) {
      const summarizer = byName.get(name);
      if (summarizer === undefined) {
        // The name comes from a request: quote it, but not at any length.
        const shown = name.length > 64 ? `${name.slice(0, 64)}…` : name;
        throw invalidArgument(
          "strategy.summary.model",
          `unknown summarizer ${JSON.stringify(shown)}; configured: ${names.join(", ")}`,
        );
      }
      return summarizer;
    },
    names: () => [...names],
  };
}
