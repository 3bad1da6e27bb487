import { describe, expect, it } from "vitest";
import { RedisFunctions } from "../../src/store/redis/functions.js";
import { script } from "../../src/store/redis/lua/fragment.js";

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
  });

  it("calls a function only once its load succeeded, and never a script without one", async () => {
    const l = loads();
    const functions = new RedisFunctions(l.load);
    const started = functions.loadAll([onlyScript, asFunction]);
    expect(l.asked).toEqual([asFunction.fn?.library]);
    expect(functions.callable(asFunction)).toBeUndefined();
    await l.settle(true);
    await started;
    expect(functions.callable(asFunction)).toBe(asFunction.fn);
    expect(functions.callable(onlyScript)).toBeUndefined();
  });

  it("leaves a function Redis refused to load to EVALSHA, and asks again on a miss at most once a second", async () => {
    let now = 0;
    const l = loads();
    const functions = new RedisFunctions(l.load, () => now);
    const started = functions.loadAll([asFunction]);
    await l.settle(false);
    await started;
    expect(functions.callable(asFunction)).toBeUndefined();
    const fn = asFunction.fn;
    if (fn === undefined) throw new Error("no function");
    functions.missing(fn);
    expect(l.asked).toHaveLength(1);
    now = 1000;
    functions.missing(fn);
    functions.missing(fn);
    // One load at a time.
    expect(l.asked).toHaveLength(2);
    await l.settle(true);
    expect(functions.callable(asFunction)).toBe(fn);
  });

  it("stops calling a function a primary said it lacks, until it is loaded again", async () => {
    const l = loads();
    const functions = new RedisFunctions(l.load, () => 0);
    const started = functions.loadAll([asFunction]);
    await l.settle(true);
    await started;
    const fn = asFunction.fn;
    if (fn === undefined) throw new Error("no function");
    functions.missing(fn);
    expect(functions.callable(asFunction)).toBeUndefined();
    expect(l.asked).toHaveLength(2);
    await l.settle(true);
    expect(functions.callable(asFunction)).toBe(fn);
  });
});
