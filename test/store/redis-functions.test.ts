import { describe, expect, it } from "vitest";
import { RedisFunctions } from "../../src/store/redis/functions.js";
import { type LuaFunction, script } from "../../src/store/redis/lua/fragment.js";

const asFunction = script("demo", [], "return 1", { asFunction: true });
const onlyScript = script("plain", [], "return 2");

/** A load that waits until the test settles it, counting the loads asked for. */
function loads(): {
  readonly asked: string[];
  settle(ok: boolean): Promise<void>;
  load(library: string): Promise<void>;
} {
  const pending: { resolve(): void; reject(err: Error): void }[] = [];
  const asked: string[] = [];
  return {
    asked,
    load(library) {
      asked.push(library);
      return new Promise<void>((resolve, reject) => pending.push({ resolve, reject }));
    },
    async settle(ok) {
      const next = pending.shift();
      if (next === undefined) throw new Error("no load is pending");
      if (ok) next.resolve();
      else next.reject(new Error("NOPERM"));
      // Let the load's continuation run.
      await new Promise((r) => setImmediate(r));
    },
  };
}

/** RedisFunctions whose start-up load of asFunction succeeded (or failed), on the clock `now`. */
async function afterStartUp(
  ok: boolean,
  now: () => number,
): Promise<{ l: ReturnType<typeof loads>; functions: RedisFunctions; fn: LuaFunction }> {
  const l = loads();
  const functions = new RedisFunctions(l.load, 60_000, now);
  const started = functions.loadAll([asFunction]);
  await l.settle(ok);
  await started;
  const fn = asFunction.fn;
  if (fn === undefined) throw new Error("no function");
  return { l, functions, fn };
}

describe("Redis Functions", () => {
  it("names a function after its script and its library's hash, and leaves other scripts without one", () => {
    expect(asFunction.fn?.name).toMatch(/^windlass_demo_[0-9a-f]{16}$/);
    expect(asFunction.fn?.library).toMatch(/^#!lua name=windlass_demo_[0-9a-f]{16}\n/);
    expect(asFunction.fn?.library).toContain(
      `redis.register_function('${asFunction.fn?.name}', function(KEYS, ARGV)\nreturn 1\nend)`,
    );
    expect(script("demo", [], "return 3", { asFunction: true }).fn?.name).not.toBe(
      asFunction.fn?.name,
    );
    expect(onlyScript.fn).toBeUndefined();
    // A library's name holds letters, digits and underscores only.
    expect(() => script("two-words", [], "return 1", { asFunction: true })).toThrow(
      /must be a word: two-words/,
    );
  });

  it("calls a function only once its load succeeded, and never a script without one", async () => {
    const l = loads();
    const functions = new RedisFunctions(l.load, 60_000);
    const started = functions.loadAll([onlyScript, asFunction]);
    expect(l.asked).toEqual([asFunction.fn?.library]);
    expect(functions.callable(asFunction)).toBeUndefined();
    await l.settle(true);
    await started;
    expect(functions.callable(asFunction)).toBe(asFunction.fn);
    expect(functions.callable(onlyScript)).toBeUndefined();
  });

  it("leaves a function Redis refused to load to EVALSHA, and loads it again when asked for, after 1 s, then 2 s", async () => {
    let now = 0;
    const { l, functions } = await afterStartUp(false, () => now);
    expect(functions.callable(asFunction)).toBeUndefined();
    expect(l.asked).toHaveLength(1);
    now = 999;
    functions.callable(asFunction);
    expect(l.asked).toHaveLength(1);
    now = 1000;
    expect(functions.callable(asFunction)).toBeUndefined();
    functions.callable(asFunction);
    // One load at a time.
    expect(l.asked).toHaveLength(2);
    await l.settle(false);
    now = 2999;
    functions.callable(asFunction);
    expect(l.asked).toHaveLength(2);
    now = 3000;
    functions.callable(asFunction);
    expect(l.asked).toHaveLength(3);
    await l.settle(true);
    expect(functions.callable(asFunction)).toBe(asFunction.fn);
  });

  it("calls by EVALSHA for a minute a function the ACL forbids, then tries it again", async () => {
    let now = 0;
    const { l, functions, fn } = await afterStartUp(true, () => now);
    functions.refused(fn);
    now = 59_999;
    expect(functions.callable(asFunction)).toBeUndefined();
    expect(l.asked).toHaveLength(1);
    now = 60_000;
    functions.callable(asFunction);
    expect(l.asked).toHaveLength(2);
    await l.settle(true);
    expect(functions.callable(asFunction)).toBe(fn);
  });

  it("counts a load Redis never answers (hung) as failed, and tries again after its backoff", async () => {
    let now = 0;
    const asked: string[] = [];
    const functions = new RedisFunctions(
      (library) => {
        asked.push(library);
        return new Promise<void>(() => {});
      },
      20,
      () => now,
    );
    await functions.loadAll([asFunction]);
    expect(functions.callable(asFunction)).toBeUndefined();
    expect(asked).toHaveLength(1);
    now = 1000;
    functions.callable(asFunction);
    expect(asked).toHaveLength(2);
  });

  it("stops calling a function a primary said it lacks, until it is loaded again", async () => {
    const { l, functions, fn } = await afterStartUp(true, () => 0);
    functions.missing(fn);
    expect(functions.callable(asFunction)).toBeUndefined();
    expect(l.asked).toHaveLength(2);
    await l.settle(true);
    expect(functions.callable(asFunction)).toBe(fn);
  });
});
