import type { Strategy } from "../core/types.js";

/** Decoded strategies kept for reuse (see strategyFromJson). */
const KEPT = 1_024;
const decoded = new Map<string, Strategy>();

/**
 * A thread's strategy from the JSON a store keeps it in, as one frozen object
 * per distinct JSON. Every read of a thread decodes its strategy, and handing
 * the service the same object each time lets it build the strategy's wire
 * form once (service/convert.ts strategyToPb, service/response-encoding.ts)
 * instead of on every Add and Get. Bounded: oldest first out.
 */
export function strategyFromJson(json: string): Strategy {
  let strategy = decoded.get(json);
  if (strategy === undefined) {
    strategy = Object.freeze(JSON.parse(json) as Strategy);
    if (decoded.size >= KEPT) {
      const oldest = decoded.keys().next();
      if (oldest.done !== true) decoded.delete(oldest.value);
    }
    decoded.set(json, strategy);
  }
  return strategy;
}
