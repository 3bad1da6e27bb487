import { describe, expect, it } from "vitest";
import { inOrder } from "../../src/store/redis/lua/fragment.js";
import { ALL_SCRIPTS } from "../../src/store/redis/lua/index.js";

/**
 * The Redis store's scripts are put together from shared fragments
 * (src/store/redis/lua/fragment.ts); Redis only finds a missing helper when
 * a script calls it, so each script is checked here for the helpers it calls.
 */
const DEFINITION = /local function (\w+)/g;
const helpers = new Set(
  ALL_SCRIPTS.flatMap((s) => [...s.source.matchAll(DEFINITION)].map((m) => m[1] ?? "")),
);

describe("the Redis store's Lua scripts", () => {
  it.each(ALL_SCRIPTS.map((s) => [s.name, s] as const))(
    "%s defines every shared helper it calls, before its first call, once",
    (_name, script) => {
      const defined = [...script.source.matchAll(DEFINITION)];
      const names = defined.map((m) => m[1]);
      expect(new Set(names).size).toBe(names.length);
      for (const call of script.source.matchAll(/\b(\w+)\(/g)) {
        const name = call[1] ?? "";
        if (!helpers.has(name) || call.index === undefined) continue;
        const at = defined.find((m) => m[1] === name)?.index;
        expect(at, `${script.name} calls ${name}`).toBeDefined();
        expect(at ?? Infinity).toBeLessThanOrEqual(call.index);
      }
    },
  );

  it.each(ALL_SCRIPTS.filter((s) => s.fn !== undefined).map((s) => [s.name, s] as const))(
    "%s, run as a Redis Function, keeps no state between calls: its fragments define only functions",
    (_name, script) => {
      // A function's library runs once, so a fragment's top-level value
      // would outlive a call (as a script, every call defines it again).
      const library = script.fn?.library ?? "";
      const top = library.slice(0, library.indexOf("redis.register_function("));
      const statements = top.split("\n").filter((l) => /^[^\s-]/.test(l) && !l.startsWith("#!lua"));
      for (const line of statements) {
        expect(line, `${script.name}: ${line}`).toMatch(/^(local function \w+\(|end\b)/);
      }
      expect(statements.length).toBeGreaterThan(10);
    },
  );

  it("puts a fragment's own needs first and each fragment once", () => {
    const a = { name: "a", source: "", needs: [] };
    const b = { name: "b", source: "", needs: [a] };
    const c = { name: "c", source: "", needs: [a, b] };
    expect(inOrder([c, b]).map((f) => f.name)).toEqual(["a", "b", "c"]);
  });
});
