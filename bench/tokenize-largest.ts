/**
 * Cost of counting the tokens of the largest message the server accepts
 * (--max-message-bytes, 4 MiB by default): total time and the longest stretch
 * without a turn of the event loop, for prose, one run without spaces and CJK.
 * Stretches are given in wall time and in CPU time of this thread: on a
 * loaded machine the wall time includes time the OS ran something else.
 *
 *   npm run build && node dist/bench/tokenize-largest.js
 */
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { countMessageTokensSliced, countTextTokens } from "../src/core/tokens.js";

const BYTES = 4 * 1024 * 1024;

/** `n` CJK characters from a fixed pseudo-random sequence (no two pieces alike, so no cache helps). */
function variedCjk(n: number): string {
  const codes: number[] = [];
  let x = 12345;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    codes.push(0x4e00 + (x % 3000));
  }
  let out = "";
  for (let i = 0; i < codes.length; i += 4096)
    out += String.fromCharCode(...codes.slice(i, i + 4096));
  return out;
}
const words = ["memory", "thread", "the", "a", "summary", "window", "tool", "call", "42,", "über"];
let prose = "";
for (let i = 0; prose.length < BYTES; i++) prose += `${words[(i * 7919) % words.length]} `;
const texts: [string, string][] = [
  ["prose", prose],
  ["one run of 'a'", "a".repeat(BYTES)],
  ["one CJK character repeated", "数".repeat(BYTES / 3)],
  ["varied CJK, no spaces", variedCjk(BYTES / 3)],
];
countTextTokens("warm up", "o200k_base");
const cpuMs = (): number => {
  const u = process.threadCpuUsage();
  return (u.user + u.system) / 1000;
};
for (const [name, text] of texts) {
  let maxWall = 0;
  let maxCpu = 0;
  let last = performance.now();
  let lastCpu = cpuMs();
  const started = last;
  const startedCpu = lastCpu;
  const stretchEnds = (): void => {
    maxWall = Math.max(maxWall, performance.now() - last);
    maxCpu = Math.max(maxCpu, cpuMs() - lastCpu);
  };
  const n = await countMessageTokensSliced(
    { role: "user", content: text },
    "o200k_base",
    async () => {
      stretchEnds();
      await yieldToEventLoop();
      last = performance.now();
      lastCpu = cpuMs();
    },
  );
  stretchEnds();
  const wall = (performance.now() - started).toFixed(0);
  const cpu = (cpuMs() - startedCpu).toFixed(0);
  console.log(
    `${name}: ${n} tokens in ${wall} ms wall, ${cpu} ms CPU; longest stretch without yielding ${maxWall.toFixed(1)} ms wall, ${maxCpu.toFixed(1)} ms CPU`,
  );
}
