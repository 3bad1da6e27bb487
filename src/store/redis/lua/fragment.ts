import { createHash } from "node:crypto";

/**
 * How the Redis store's Lua is put together: each script (one store method
 * that changes state, run atomically on the server by EVALSHA) is its body
 * after the shared fragments it needs, each fragment once and after those it
 * needs itself, so a Lua local is always defined before its first use.
 */

/** Lua defining local functions, with the fragments they call. */
export interface LuaFragment {
  readonly name: string;
  readonly source: string;
  readonly needs: readonly LuaFragment[];
}

/** A script and its SHA1, for EVALSHA. */
export interface LuaScript {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

export function fragment(name: string, needs: readonly LuaFragment[], source: string): LuaFragment {
  return { name, source, needs };
}

export function script(name: string, needs: readonly LuaFragment[], body: string): LuaScript {
  const source = [...inOrder(needs).map((f) => f.source), body].join("\n");
  return { name, source, sha: createHash("sha1").update(source).digest("hex") };
}

/** The fragments and everything they need, dependencies first, each once. */
export function inOrder(needs: readonly LuaFragment[]): LuaFragment[] {
  const seen = new Set<LuaFragment>();
  const out: LuaFragment[] = [];
  const visit = (f: LuaFragment): void => {
    if (seen.has(f)) return;
    seen.add(f);
    for (const n of f.needs) visit(n);
    out.push(f);
  };
  for (const f of needs) visit(f);
  return out;
}
