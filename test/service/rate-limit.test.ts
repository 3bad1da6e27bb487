import { describe, expect, it } from "vitest";
import { RateLimiter } from "../../src/service/rate-limit.js";

/** A limiter on a clock the test moves by hand. */
function limiter(ratePerSecond: number, burst: number, maxNamespaces?: number) {
  const clock = { now: 0 };
  const rl = new RateLimiter({
    ratePerSecond,
    burst,
    now: () => clock.now,
    ...(maxNamespaces === undefined ? {} : { maxNamespaces }),
  });
  return { rl, clock };
}

describe("RateLimiter (token bucket per namespace)", () => {
  it("allows a burst, then refuses with the time until the next token", () => {
    const { rl } = limiter(10, 3);
    expect([1, 2, 3].map(() => rl.take("a").allowed)).toEqual([true, true, true]);
    // 10 per second: one token every 100 ms.
    expect(rl.take("a")).toEqual({ allowed: false, retryAfterMs: 100 });
  });

  it("refills at the rate, never above the burst", () => {
    const { rl, clock } = limiter(10, 3);
    for (let i = 0; i < 3; i++) rl.take("a");
    clock.now += 50;
    expect(rl.take("a")).toEqual({ allowed: false, retryAfterMs: 50 });
    clock.now += 50;
    expect(rl.take("a").allowed).toBe(true);
    clock.now += 60_000;
    const allowed = Array.from({ length: 5 }, () => rl.take("a").allowed);
    expect(allowed).toEqual([true, true, true, false, false]);
  });

  it("keeps namespaces apart", () => {
    const { rl } = limiter(1, 1);
    expect(rl.take("a").allowed).toBe(true);
    expect(rl.take("a").allowed).toBe(false);
    expect(rl.take("b").allowed).toBe(true);
  });

  it("refuses nothing at rate 0", () => {
    const { rl } = limiter(0, 1);
    expect(rl.enabled).toBe(false);
    for (let i = 0; i < 1_000; i++) expect(rl.take("a").allowed).toBe(true);
    expect(rl.size).toBe(0);
  });

  it("tracks at most maxNamespaces, forgetting full buckets first, then the least recently used", () => {
    const { rl, clock } = limiter(1, 2, 3);
    rl.take("a");
    rl.take("b");
    rl.take("c");
    expect(rl.size).toBe(3);
    // All three are still below their burst: the least recently used ("a") goes.
    rl.take("d");
    expect(rl.size).toBe(3);
    // "a" starts again from a full bucket; "d" (recently used) keeps its state.
    expect([rl.take("a").allowed, rl.take("a").allowed]).toEqual([true, true]);
    expect(rl.take("d").allowed).toBe(true);
    expect(rl.take("d").allowed).toBe(false);
    // After a quiet spell every bucket is full again, and they are dropped as new ones come.
    clock.now += 10_000;
    rl.take("e");
    expect(rl.size).toBe(1);
  });
});
