import { createHash } from "node:crypto";
import { beforeEach, describe, expect, it, vi } from "vitest";

/**
 * The README promises bearer tokens are compared in constant time. Timing
 * cannot be measured reliably here, so this checks how the comparison is
 * made: node:crypto's timingSafeEqual is wrapped to record its arguments,
 * and every authentication must compare the presented token's SHA-256
 * digest (32 bytes, whatever the token's length) with every configured
 * token's digest, without stopping at a match. A plain `===`, a comparison
 * of the raw tokens (which throws on unequal lengths, or leaks them), or a
 * loop that stops at the first match fails one of these tests.
 */
const compared = vi.hoisted(() => ({ calls: [] as [Buffer, Buffer][] }));

vi.mock("node:crypto", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:crypto")>();
  const timingSafeEqual = (a: NodeJS.ArrayBufferView, b: NodeJS.ArrayBufferView): boolean => {
    compared.calls.push([Buffer.from(a as Uint8Array), Buffer.from(b as Uint8Array)]);
    return actual.timingSafeEqual(a, b);
  };
  return { ...actual, timingSafeEqual, default: { ...actual, timingSafeEqual } };
});

const { createAuthenticator } = await import("../../src/transport/auth.js");

const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest();

const TOKENS = new Map([
  ["alpha-token", "team-a"],
  ["b", "team-b"],
  ["a-much-longer-token-for-team-c-0123456789", "team-c"],
]);

describe("bearer token comparison", () => {
  beforeEach(() => {
    compared.calls.length = 0;
  });

  it.each([
    ["the first configured token", "alpha-token", "team-a"],
    ["the last configured token", "a-much-longer-token-for-team-c-0123456789", "team-c"],
  ])("compares %s against every configured token's digest", (_what, token, namespace) => {
    const auth = createAuthenticator(TOKENS);
    expect(auth.namespaceOf(`Bearer ${token}`)).toBe(namespace);
    // One comparison per configured token, none skipped after the match.
    expect(compared.calls).toHaveLength(TOKENS.size);
    const configured = [...TOKENS.keys()].map((t) => sha256(t).toString("hex"));
    const against = new Set<string>();
    for (const [a, b] of compared.calls) {
      expect(a).toHaveLength(32);
      expect(b).toHaveLength(32);
      // One side is the presented token's digest, the other a configured one's.
      const sides = [a.toString("hex"), b.toString("hex")];
      expect(sides).toContain(sha256(token).toString("hex"));
      against.add(sides.find((s) => s !== sha256(token).toString("hex")) ?? sides[0] ?? "");
    }
    expect([...against].sort()).toEqual([...configured].sort());
  });

  it.each([
    ["shorter than every token", "x"],
    ["longer than every token", "y".repeat(500)],
    ["a prefix of a token", "alpha"],
  ])("compares an unknown token %s as a 32-byte digest too", (_what, token) => {
    const auth = createAuthenticator(TOKENS);
    expect(() => auth.namespaceOf(`Bearer ${token}`)).toThrow(/unknown bearer token/);
    expect(compared.calls).toHaveLength(TOKENS.size);
    for (const [a, b] of compared.calls) {
      expect([a.length, b.length]).toEqual([32, 32]);
      expect([a.toString("hex"), b.toString("hex")]).toContain(sha256(token).toString("hex"));
    }
  });
});
