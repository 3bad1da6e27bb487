import type { LuaFunction, LuaScript } from "./lua/fragment.js";

/**
 * Which of the store's scripts can be called as Redis Functions
 * (lua/fragment.ts LuaFunction) now. Each is loaded on every primary at
 * start-up, and again when a primary answers that it has not got it (it
 * restarted empty, someone ran FUNCTION FLUSH, a primary joined the
 * cluster). Until a load succeeds the script goes by EVALSHA, as every
 * other script does: a function is only a cheaper way to run the same Lua,
 * so a Redis that refuses FUNCTION LOAD (an ACL without it, a full memory)
 * costs speed, never a call.
 */
export class RedisFunctions {
  /** FUNCTION LOAD REPLACE on every primary; rejects if any refused it. */
  readonly #loadEverywhere: (library: string) => Promise<void>;
  readonly #now: () => number;
  /** Function names every primary answered a load of, and has not since said it lacks. */
  readonly #loaded = new Set<string>();
  /** Loads under way, one per function. */
  readonly #loading = new Set<string>();
  /** When a function whose load failed may be tried again. */
  readonly #retryAt = new Map<string, number>();

  constructor(loadEverywhere: (library: string) => Promise<void>, now: () => number = Date.now) {
    this.#loadEverywhere = loadEverywhere;
    this.#now = now;
  }

  /** Loads every script's function (start-up); one that fails is left to EVALSHA. */
  async loadAll(scripts: readonly LuaScript[]): Promise<void> {
    for (const script of scripts) {
      if (script.fn !== undefined) await this.#load(script.fn);
    }
  }

  /** The function to FCALL for `script`, or undefined: call it by EVALSHA. */
  callable(script: LuaScript): LuaFunction | undefined {
    const fn = script.fn;
    return fn !== undefined && this.#loaded.has(fn.name) ? fn : undefined;
  }

  /**
   * A primary answered that it has not got `fn`: calls go by EVALSHA until
   * it is loaded again, which starts now (at most once a second after a
   * failed load, so a Redis that refuses it is not asked on every call).
   */
  missing(fn: LuaFunction): void {
    this.#loaded.delete(fn.name);
    if (this.#loading.has(fn.name) || this.#now() < (this.#retryAt.get(fn.name) ?? 0)) return;
    void this.#load(fn);
  }

  async #load(fn: LuaFunction): Promise<void> {
    this.#loading.add(fn.name);
    try {
      await this.#loadEverywhere(fn.library);
      this.#loaded.add(fn.name);
      this.#retryAt.delete(fn.name);
    } catch {
      this.#retryAt.set(fn.name, this.#now() + RETRY_AFTER_MS);
    } finally {
      this.#loading.delete(fn.name);
    }
  }
}

/** How long after a failed load the next miss tries again. */
const RETRY_AFTER_MS = 1000;
