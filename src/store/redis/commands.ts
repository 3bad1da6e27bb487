import { MemoryError } from "../../core/errors.js";
import type { RedisConnection } from "./connection.js";
import {
  CommandTimeout,
  fcallGoesByScript,
  isFcallForbidden,
  isFunctionNotFound,
  isNoScript,
  storeClosed,
  storeError,
  unavailable,
} from "./errors.js";
import type { RedisFunctions } from "./functions.js";
import type { LuaScript } from "./lua/fragment.js";

/**
 * Sending commands and scripts, each bounded by the command timeout, with
 * failures mapped to the domain's errors (errors.ts). Every other module
 * of the store talks to Redis through this.
 */
export class Commands {
  #closed = false;

  constructor(
    /** "host:port" or the sentinels: never a password. */
    readonly target: string,
    readonly main: RedisConnection,
    readonly timeoutMs: number,
    /** The scripts callable as Redis Functions; none: every script by EVALSHA. */
    readonly functions?: RedisFunctions,
  ) {}

  get closed(): boolean {
    return this.#closed;
  }

  /** From now on every call is refused with unavailable. */
  close(): void {
    this.#closed = true;
  }

  /** One raw command, failures left as they are (for callers that tell them apart). */
  send(connection: RedisConnection, args: readonly string[], timeoutMs: number): Promise<unknown> {
    if (this.#closed) return Promise.reject(storeClosed());
    return withTimeout(connection.sendCommand(args), timeoutMs, this.target);
  }

  async command(args: readonly string[], via: RedisConnection = this.main): Promise<unknown> {
    try {
      return await this.send(via, args, this.timeoutMs);
    } catch (err) {
      throw storeError(err, this.target);
    }
  }

  /** Whether the main connection can send atomic(). */
  get atomicSupported(): boolean {
    return this.main.sendAtomic !== undefined;
  }

  /**
   * The commands as one MULTI … EXEC on the main connection (atomicSupported
   * must be true): cheaper than a script for what needs no decision, as
   * Redis copies no reply through Lua.
   */
  async atomic(commands: readonly (readonly string[])[]): Promise<unknown[]> {
    if (this.#closed) throw storeClosed();
    const sendAtomic = this.main.sendAtomic;
    if (sendAtomic === undefined)
      throw new Error("redis store: atomic() on a connection without MULTI");
    try {
      return await withTimeout(sendAtomic.call(this.main, commands), this.timeoutMs, this.target);
    } catch (err) {
      throw storeError(err, this.target);
    }
  }

  /**
   * One script call: FCALL where it runs as a Redis Function (functions.ts),
   * else EVALSHA, or EVAL when Redis lost its script cache (restart, SCRIPT
   * FLUSH). An FCALL errors.ts fcallGoesByScript names is run again by
   * EVALSHA: a primary without the function (it restarted empty) while it
   * is loaded again, one refusing it before it ran (full, read-only), and
   * one whose ACL forbids FCALL.
   */
  async run(
    script: LuaScript,
    keys: readonly string[],
    args: readonly string[],
    via: RedisConnection = this.main,
  ): Promise<unknown> {
    const fn = this.functions?.callable(script);
    if (fn !== undefined) {
      try {
        return await this.send(
          via,
          ["FCALL", fn.name, String(keys.length), ...keys, ...args],
          this.timeoutMs,
        );
      } catch (err) {
        if (!fcallGoesByScript(err)) throw storeError(err, this.target);
        if (isFunctionNotFound(err)) this.functions?.missing(fn);
        else if (isFcallForbidden(err)) this.functions?.refused(fn);
      }
    }
    const call = ["EVALSHA", script.sha, String(keys.length), ...keys, ...args];
    try {
      return await this.send(via, call, this.timeoutMs);
    } catch (err) {
      if (!isNoScript(err)) throw storeError(err, this.target);
    }
    try {
      // The same call with the script's text in place of its SHA.
      call[0] = "EVAL";
      call[1] = script.source;
      return await this.send(via, call, this.timeoutMs);
    } catch (err) {
      throw storeError(err, this.target);
    }
  }
}

export function withTimeout<T>(promise: Promise<T>, ms: number, target: string): Promise<T> {
  // One promise and one timer per command, nothing more: this runs on every
  // call (Promise.race and finally cost two more promises and a closure).
  // The command may still settle after the timeout; nobody waits for it then.
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new CommandTimeout(`redis at ${target} did not answer within ${ms} ms`)),
      ms,
    );
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}

/** Connects, or gives up after `waitMs` (start-up should not hang on a Redis that is not there). */
export async function connectWithin(
  client: RedisConnection,
  waitMs: number,
  target: string,
  lastError: () => Error | undefined,
): Promise<void> {
  const connecting = client.connect();
  connecting.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), waitMs);
  });
  try {
    const outcome = await Promise.race([connecting, gaveUp]);
    if (outcome === "timeout") {
      client.destroy();
      // Redis's own words (ECONNREFUSED, WRONGPASS …) never contain the password.
      const why = lastError()?.message ?? "no answer";
      throw new MemoryError(
        "unavailable",
        `the redis store at ${target} is unreachable (no connection within ${waitMs} ms: ${why})`,
        { cause: lastError() },
      );
    }
  } catch (err) {
    client.destroy();
    if (err instanceof MemoryError) throw err;
    throw unavailable(target, err);
  } finally {
    clearTimeout(timer);
  }
}

export function backoffMs(attempt: number): number {
  return Math.min(2000, 50 * 2 ** Math.min(attempt, 10)) + Math.random() * 50;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
