import { afterEach, describe, expect, it } from "vitest";
import { type AppHarness, startAppHarness } from "./app-harness.js";
import { CallFailed, type Driver, grpcDriver } from "./drivers.js";

/**
 * Without WINDLASS_AUTH_TOKENS every caller shares one namespace, so the
 * per-namespace rate limit and quotas would be the whole server's: by default
 * they are off there, and on (1,000/s, 10,000 threads, …) with auth.
 */
const TOKEN = "single-tenant-defaults-token";
const AUTH = { WINDLASS_AUTH_TOKENS: `${TOKEN}=team` };

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function start(flags: string[], env: Record<string, string> = {}): Promise<Driver> {
  const h: AppHarness = await startAppHarness(flags, env);
  cleanups.push(() => h.close());
  const d = grpcDriver(h.app.grpcPort, env === AUTH ? TOKEN : undefined);
  cleanups.push(() => d.close());
  return d;
}

/** Runs `count` calls, `inFlight` at a time; returns how many were refused with RESOURCE_EXHAUSTED. */
async function load(
  count: number,
  inFlight: number,
  call: (i: number) => Promise<unknown>,
  stopAtFirstRefusal = false,
): Promise<{ sent: number; refused: number; messages: string[] }> {
  let next = 0;
  let refused = 0;
  const messages: string[] = [];
  const worker = async (): Promise<void> => {
    while (next < count && !(stopAtFirstRefusal && refused > 0)) {
      const i = next++;
      try {
        await call(i);
      } catch (err) {
        if (!(err instanceof CallFailed) || err.code !== "RESOURCE_EXHAUSTED") throw err;
        refused++;
        messages.push(err.message);
      }
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return { sent: next, refused, messages };
}

const user = (content: string) => [{ role: 1, content }];

describe("limits of a single-tenant server (no auth) against one with auth", () => {
  it("rate-limits a namespace by default only with auth; without it the same load, doubled, is served", async () => {
    // With auth, the default 1,000/s (burst 2,000) refuses this load at some call K.
    const withAuth = await start([], AUTH);
    const control = await load(40_000, 64, () => withAuth.get({ threadId: "r" }), true);
    expect(control.refused, "the load must outrun the default limit").toBeGreaterThan(0);
    expect(control.messages[0]).toContain("rate limit of this namespace exceeded");

    // Without auth, twice K calls at the same pace: a 1,000/s limit would refuse about half.
    const open = await start([]);
    const served = await load(2 * control.sent, 64, () => open.get({ threadId: "r" }));
    expect(served).toMatchObject({ sent: 2 * control.sent, refused: 0 });
  });

  it("holds more than 10,000 threads by default only without auth", async () => {
    const threads = 10_001;
    const open = await start([]);
    expect(
      await load(threads, 64, (i) => open.add({ threadId: `t${i}`, messages: user("x") })),
    ).toMatchObject({ sent: threads, refused: 0 });

    // The rate limit is off here so that only the quota can refuse.
    const withAuth = await start(["--rate-limit-rps", "0"], AUTH);
    const r = await load(threads, 64, (i) =>
      withAuth.add({ threadId: `t${i}`, messages: user("x") }),
    );
    expect(r.refused).toBe(1);
    expect(r.messages[0]).toContain("max_threads_per_namespace (10000) reached");
  });

  it("applies a rate limit or quota given explicitly without auth", async () => {
    const open = await start([
      "--rate-limit-rps",
      "1",
      "--rate-limit-burst",
      "3",
      "--max-threads-per-namespace",
      "1",
    ]);
    await open.add({ threadId: "a", messages: user("x") });
    const quota = await open.add({ threadId: "b", messages: user("y") }).catch((e: unknown) => e);
    expect(quota).toBeInstanceOf(CallFailed);
    expect((quota as CallFailed).message).toContain("max_threads_per_namespace (1) reached");
    // Two tokens of the burst are gone; of ten more calls at once at most a few refill in time.
    const r = await load(10, 10, () => open.get({ threadId: "a" }));
    expect(r.refused).toBeGreaterThanOrEqual(5);
    expect(r.messages[0]).toContain("rate limit of this namespace exceeded");
  });
});
