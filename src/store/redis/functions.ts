import { withTimeout } from "./commands.js";
import type { LuaFunction, LuaScript } from "./lua/fragment.js";

/**
 * Which of the store's scripts can be called as Redis Functions
 * (lua/fragment.ts LuaFunction) now. Each is loaded on every primary at
 * start-up, and again when a primary answers that it has not got it (it
 * restarted empty, someone ran FUNCTION FLUSH, a primary joined the
 * cluster). Until a load succeeds the script goes by EVALSHA, as every
 * other script does: a function is only a cheaper way to run the same Lua,
 * so a Redis that refuses FUNCTION LOAD (an ACL without it, a full memory)
 * costs speed, never a call; so do the FCALLs commands.ts runs again as
 * scripts (errors.ts fcallGoesByScript).
 */
export class RedisFunctions {
  /** FUNCTION LOAD REPLACE on every primary; rejects if any refused it. */
  readonly #loadEverywhere: (library: string) => Promise<void>;
  readonly #now: () => number;
  /** Function names every primary answered a load of, and has not since said it lacks. */
  readonly #loaded = new Set<string>();
  /** Loads under way, one per function. */
  readonly #loading = new Set<string>();
  /** Per function not loaded: loads failed in a row, and when the next may start. */
  readonly #backoff = new Map<string, { failures: number; retryAt: number }>();

  /** Longest a load may take before it counts as failed (a hung Redis would hold it for good). */
  readonly #loadTimeoutMs: number;

  constructor(
    loadEverywhere: (library: string) => Promise<void>,
    loadTimeoutMs: number,
    now: () => number = Date.now,
  ) {
    this.#loadEverywhere = loadEverywhere;
    this.#loadTimeoutMs = loadTimeoutMs;
    this.#now = now;
  }

  /** Loads every script's function (start-up); one that fails is left to EVALSHA, and tried again. */
  async loadAll(scripts: readonly LuaScript[]): Promise<void> {
    for (const script of scripts) {
      if (script.fn !== undefined) await this.#load(script.fn);
    }
  }

  /**
   * The function to FCALL for `script`, or undefined: call it by EVALSHA.
   * Asking for one not loaded starts its load again once its backoff is
   * over (1 s after a failed load, doubling to a minute), so a load that
   * failed (Redis restarting, full, or refusing it) is not the last.
   */
  callable(script: LuaScript): LuaFunction | undefined {
    const fn = script.fn;
    if (fn === undefined) return undefined;
    if (this.#loaded.has(fn.name)) return fn;
    this.#loadWhenDue(fn);
    return undefined;
  }

  /** A primary answered that it has not got `fn`: calls go by EVALSHA until it is loaded again. */
  missing(fn: LuaFunction): void {
    this.#loaded.delete(fn.name);
    this.#loadWhenDue(fn);
  }

  /**
   * Redis may not be asked to call `fn` (an ACL with FUNCTION LOAD but not
   * FCALL): calls go by EVALSHA, and the function is tried again only after
   * the longest backoff.
   */
  refused(fn: LuaFunction): void {
    this.#loaded.delete(fn.name);
    const failures = (this.#backoff.get(fn.name)?.failures ?? 0) + 1;
    this.#backoff.set(fn.name, { failures, retryAt: this.#now() + MAX_RETRY_MS });
  }

  #loadWhenDue(fn: LuaFunction): void {
    if (this.#loading.has(fn.name) || this.#now() < (this.#backoff.get(fn.name)?.retryAt ?? 0)) {
      return;
    }
    void this.#load(fn);
  }

  async #load(fn: LuaFunction): Promise<void> {
    this.#loading.add(fn.name);
    try {
      await withTimeout(this.#loadEverywhere(fn.library), this.#loadTimeoutMs, fn.name);
      this.#loaded.add(fn.name);
      this.#backoff.delete(fn.name);
    } catch {
      const failures = (this.#backoff.get(fn.name)?.failures ?? 0) + 1;
      const wait = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** Math.min(failures - 1, 16));
      this.#backoff.set(fn.name, { failures, retryAt: this.#now() + wait });
    } finally {
      this.#loading.delete(fn.name);
    }
  }
}

/** How long after a first failed load the next may start; it doubles with each failure. */
const FIRST_RETRY_MS = 1000;
/** The longest wait between loads. */
const MAX_RETRY_MS = 60_000;
