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
): Promise<{ sent: number; refused: number; messages: string[] }> {
  let next = 0;
  let refused = 0;
  const messages: string[] = [];
  const worker = async (): Promise<void> => {
    while (next < count) {
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
  it("rate-limits a namespace by default only with auth", async () => {
    // A bucket of one token, refilled at the default rate: with auth (1,000/s)
    // 200 calls at once find it empty; without auth the default rate is 0,
    // which turns the limiter off whatever the bucket, so none is refused.
    const burst = ["--rate-limit-burst", "1"];
    const withAuth = await start(burst, AUTH);
    const control = await load(200, 200, () => withAuth.get({ threadId: "r" }));
    expect(control.refused, "the default rate must refuse most of them").toBeGreaterThan(0);
    expect(control.messages[0]).toContain("rate limit of this namespace exceeded");

    const open = await start(burst);
    expect(await load(200, 200, () => open.get({ threadId: "r" }))).toMatchObject({
      sent: 200,
      refused: 0,
    });
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
    // 20,002 Adds: generous room for a loaded machine.
  }, 180_000);

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
