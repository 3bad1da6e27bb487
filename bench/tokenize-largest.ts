/**
 * Cost of counting the tokens of the largest message the server accepts
 * (--max-message-bytes, 4 MiB by default): total time and the longest stretch
 * without a turn of the event loop, for prose, one run without spaces and CJK.
 *
 *   npm run build && node dist/bench/tokenize-largest.js
 */
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { countMessageTokensSliced, countTextTokens } from "../src/core/tokens.js";

const BYTES = 4 * 1024 * 1024;
const words = ["memory", "thread", "the", "a", "summary", "window", "tool", "call", "42,", "über"];
let prose = "";
for (let i = 0; prose.length < BYTES; i++) prose += `${words[(i * 7919) % words.length]} `;
const texts: [string, string][] = [
  ["prose", prose],
  ["one run of 'a'", "a".repeat(BYTES)],
  ["CJK (3 bytes each)", "数".repeat(BYTES / 3)],
];
countTextTokens("warm up", "o200k_base");
for (const [name, text] of texts) {
  let maxGap = 0;
  let last = performance.now();
  const started = last;
  const n = await countMessageTokensSliced(
    { role: "user", content: text },
    "o200k_base",
    async () => {
      maxGap = Math.max(maxGap, performance.now() - last);
      await yieldToEventLoop();
      last = performance.now();
    },
  );
  maxGap = Math.max(maxGap, performance.now() - last);
  console.log(
    `${name}: ${n} tokens in ${(performance.now() - started).toFixed(0)} ms, longest stretch without yielding ${maxGap.toFixed(1)} ms`,
  );
}
