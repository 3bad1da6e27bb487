import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import { createRedisStore, type RedisStoreOptions } from "../../src/store/redis/index.js";
import type { Store } from "../../src/store/store.js";
import { addCommand, NAMESPACE, STRATEGY } from "../support/acknowledged-writers.js";
import { ask, QUICK_REPLICATION, waitForLinkOf } from "../support/redis-replication.js";
import { freePort, type RedisServer, startRedisServer } from "../support/redis-server.js";

/**
 * A primary and one replica: with minReplicas 1 an Add is acknowledged only
 * once the replica has it (WAIT). The replica is frozen with SIGSTOP, or cut
 * off (pointed at a port where nothing listens), to make it fall behind, and
 * "promoted" by REPLICAOF NO ONE after a kill -9 of the primary, which is
 * what a failover does.
 */
// Success needs one WAIT round trip (up to ~200 ms seen on a loaded machine); a refusal takes all of it.
const WAIT_MS = 2000;

let primary: RedisServer;
let replica: RedisServer;
let stopped: number | undefined;
const stores: Store[] = [];
beforeEach(async () => {
  primary = await startRedisServer({ args: QUICK_REPLICATION });
  replica = await startRedisServer({ args: ["--replicaof", "127.0.0.1", String(primary.port)] });
  await waitForLinkOf(replica);
});
afterEach(async () => {
  if (stopped !== undefined) process.kill(stopped, "SIGCONT");
  stopped = undefined;
  for (const s of stores.splice(0)) await s.close();
  await replica.stop();
  await primary.stop();
});

const prefix = () => `replica-${randomUUID()}`;
async function open(server: RedisServer, options: RedisStoreOptions): Promise<Store> {
  const store = await createRedisStore(server.url, {}, options);
  stores.push(store);
  return store;
}

const add = (requestId: string, content: string, threadId = "t") =>
  addCommand(threadId, requestId, content);

function freezeReplica(): void {
  const pid = replica.pid;
  if (pid === undefined) throw new Error("the replica is not running");
  process.kill(pid, "SIGSTOP");
  stopped = pid;
}

function thawReplica(): void {
  if (stopped !== undefined) process.kill(stopped, "SIGCONT");
  stopped = undefined;
}

/** kill -9 of the primary, the replica made primary: the failover, by hand. */
async function failOver(): Promise<void> {
  thawReplica();
  await primary.kill();
  await ask(replica.port, ["REPLICAOF", "NO", "ONE"]);
}

/** Resolves once the replica has everything the primary has (their replication offsets match). */
async function caughtUp(): Promise<void> {
  const offset = async (port: number, field: string) =>
    Number(
      new RegExp(`${field}:(\\d+)`).exec(String(await ask(port, ["INFO", "replication"])))?.[1],
    );
  const deadline = Date.now() + 10_000;
  while (
    (await offset(replica.port, "slave_repl_offset")) <
    (await offset(primary.port, "master_repl_offset"))
  ) {
    if (Date.now() > deadline) throw new Error("the replica did not catch up in 10 s");
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function contents(store: Store, threadId = "t"): Promise<string[]> {
  return ((await store.read(NAMESPACE, threadId))?.messages ?? []).map((m) => m.content);
}

async function waitCalls(server: RedisServer): Promise<number> {
  const info = String(await ask(server.port, ["INFO", "commandstats"]));
  return Number(/cmdstat_wait:calls=(\d+)/.exec(info)?.[1] ?? 0);
}

describe("acknowledged means replicated (minReplicas)", () => {
  it("refuses an Add the replica does not confirm, and its retry answers the stored result, which survives a failover", async () => {
    const keyPrefix = prefix();
    const store = await open(primary, { keyPrefix, minReplicas: 1, replicaWaitMs: WAIT_MS });
    await store.append(add("r1", "before"));
    freezeReplica();
    const err = await store.append(add("r2", "while frozen")).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(MemoryError);
    expect((err as MemoryError).code).toBe("unavailable");
    expect((err as MemoryError).message).toMatch(
      /0 of the 1 Redis replicas required \(--redis-min-replicas\) confirmed the write within 2000 ms; it may have been stored: a retry with the same request_id answers the stored result/,
    );
    // Reads do not queue behind a WAIT: one answers while an Add waits for the frozen replica.
    const waiting = store.append(add("r3", "also while frozen")).then(
      () => "acknowledged",
      () => "refused",
    );
    const read = store.read(NAMESPACE, "t").then(() => "read");
    expect(await Promise.race([read, waiting])).toBe("read");
    expect(await waiting).toBe("refused");
    thawReplica();
    const retried = await store.append(add("r2", "while frozen"));
    expect(retried.replayed).toBe(true);
    expect(retried.firstSeq).toBe(2);
    expect(await contents(store)).toEqual(["before", "while frozen", "also while frozen"]);
    await failOver();
    const promoted = await open(replica, { keyPrefix });
    expect(await contents(promoted)).toEqual(["before", "while frozen", "also while frozen"]);
  });

  it("acknowledges an Add on a primary that lost the Add's Redis Function, by script on the same session", async () => {
    const keyPrefix = prefix();
    const store = await open(primary, { keyPrefix, minReplicas: 1, replicaWaitMs: WAIT_MS });
    await store.append(add("r1", "before"));
    // What a primary restarted empty has lost (the replica too: FUNCTION FLUSH replicates).
    await ask(primary.port, ["FUNCTION", "FLUSH"]);
    const after = await store.append(add("r2", "after the flush"));
    expect([after.firstSeq, after.replayed]).toEqual([2, false]);
    // Reloaded: later Adds are function calls again, and acknowledged.
    const fcalls = async () =>
      Number(
        /cmdstat_fcall:calls=(\d+)/.exec(
          String(await ask(primary.port, ["INFO", "commandstats"])),
        )?.[1] ?? 0,
      );
    const before = await fcalls();
    let n = 0;
    while ((await fcalls()) - before < 2 && n < 50) {
      await store.append(add(`r-more-${n}`, `more ${n}`));
      n += 1;
    }
    expect((await fcalls()) - before).toBeGreaterThanOrEqual(2);
    await caughtUp();
    await failOver();
    const promoted = await open(replica, { keyPrefix });
    expect((await contents(promoted)).slice(0, 2)).toEqual(["before", "after the flush"]);
    expect(await contents(promoted)).toHaveLength(2 + n);
  });

  it("shows a Watch no event, and no head token, that the replica has not confirmed", async () => {
    const store = await open(primary, { keyPrefix: prefix(), minReplicas: 1, replicaWaitMs: 300 });
    await store.append(add("r1", "before"));
    const start = await store.headCursor(NAMESPACE);
    freezeReplica();
    // Logged on the primary, not replicated: a failover now would take it back.
    await store.append(add("r2", "while frozen")).catch(() => undefined);
    const readWhileFrozen = await store.readEvents(NAMESPACE, start, 10).then(
      (events) => `read ${events.length}`,
      (e: unknown) => (e instanceof MemoryError ? e.code : String(e)),
    );
    expect(readWhileFrozen).toBe("unavailable");
    const headWhileFrozen = await store.headCursor(NAMESPACE).then(
      () => "a token",
      (e: unknown) => (e instanceof MemoryError ? e.message : String(e)),
    );
    expect(headWhileFrozen).toMatch(
      /did not confirm the events read.*retry from the same resume token/,
    );
    thawReplica();
    const events = await store.readEvents(NAMESPACE, start, 10);
    expect(events.map((e) => e.type)).toEqual(["messages_added"]);
    expect(await store.readEvents(NAMESPACE, await store.headCursor(NAMESPACE), 10)).toEqual([]);
  });

  it("holds an import, a Rewind and a Clear to the same rule", async () => {
    const store = await open(primary, {
      keyPrefix: prefix(),
      minReplicas: 1,
      replicaWaitMs: WAIT_MS,
    });
    await store.append(add("r1", "to be cleared", "cleared"));
    await store.append(add("r1", "kept", "rewound"));
    await store.append(add("r2", "to be rewound", "rewound"));
    const rewind = {
      namespace: NAMESPACE,
      threadId: "rewound",
      toSeq: 1,
      expectedLastSeq: 2,
      requestId: "rw",
      requestHash: "rewind-1",
      now: 300,
    };
    const imported = {
      namespace: NAMESPACE,
      threadId: "imported",
      strategy: STRATEGY,
      lastSeq: 1,
      summarizedThroughSeq: 0,
      summary: "",
      summaryTime: 0,
      createTime: 100,
      updateTime: 100,
      messages: [{ seq: 1, role: "user" as const, content: "imported", createTime: 100 }],
      now: 200,
    };
    freezeReplica();
    const codes = await Promise.all(
      [
        store.importThread(imported),
        store.rewind(rewind),
        store.clear(NAMESPACE, "cleared", 300),
      ].map((p) =>
        p.then(
          () => "acknowledged",
          (e: unknown) => (e instanceof MemoryError ? e.code : String(e)),
        ),
      ),
    );
    expect(codes).toEqual(["unavailable", "unavailable", "unavailable"]);
    thawReplica();
    // All ran on the primary: the import's retry finds it there, the Rewind's
    // answers its recorded result (each waits again).
    expect(await store.importThread(imported)).toBe(false);
    expect(await store.rewind(rewind)).toMatchObject({ removedCount: 1, replayed: true });
    expect(await contents(store, "rewound")).toEqual(["kept"]);
    expect(await store.clear(NAMESPACE, "cleared", 400)).toBe(false);
    expect(await contents(store, "imported")).toEqual(["imported"]);
    expect(await contents(store, "cleared")).toEqual([]);
  });

  it("holds an imported fork (importThread with shareFrom) to the same rule", async () => {
    const keyPrefix = prefix();
    const store = await open(primary, { keyPrefix, minReplicas: 1, replicaWaitMs: WAIT_MS });
    await store.append(add("r1", "shared", "parent"));
    const imported = {
      namespace: NAMESPACE,
      threadId: "fork",
      strategy: STRATEGY,
      lastSeq: 2,
      summarizedThroughSeq: 0,
      summary: "",
      summaryTime: 0,
      createTime: 100,
      updateTime: 100,
      messages: [{ seq: 2, role: "user" as const, content: "own", createTime: 100 }],
      parent: { threadId: "parent", atSeq: 1, forkTime: 100, parentCreateTime: 100 },
      shareFrom: { threadId: "parent", throughSeq: 1, parentLastSeq: 1 },
      now: 200,
    };
    freezeReplica();
    const err = await store.importThread(imported).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MemoryError);
    expect((err as MemoryError).code).toBe("unavailable");
    thawReplica();
    // It ran on the primary: the retry finds it there, and waits again.
    expect(await store.importThread(imported)).toBe(false);
    await failOver();
    const promoted = await open(replica, { keyPrefix });
    expect(await contents(promoted, "fork")).toEqual(["shared", "own"]);
  });

  it("without it, an Add acknowledged while the replica lags is lost in the failover", async () => {
    const keyPrefix = prefix();
    const store = await open(primary, { keyPrefix });
    await store.append(add("r1", "before"));
    await caughtUp();
    // (A frozen replica would still find the write in its socket buffer when thawed.)
    await ask(replica.port, ["REPLICAOF", "127.0.0.1", String(await freePort())]);
    // Acknowledged by the primary alone.
    await store.append(add("r2", "while cut off"));
    await failOver();
    const promoted = await open(replica, { keyPrefix });
    expect(await contents(promoted)).toEqual(["before"]);
  });

  it("confirms concurrent Adds with far fewer WAITs than Adds (and prints Adds/s with and without)", async () => {
    const writers = 64;
    const perWriter = 50;
    const rate = async (store: Store) => {
      const started = performance.now();
      await Promise.all(
        Array.from({ length: writers }, async (_, w) => {
          for (let i = 0; i < perWriter; i++) {
            const result = await store.append(add(`w${w}-${i}`, `m${i}`, `t${w}`));
            expect(result.replayed).toBe(false);
          }
        }),
      );
      return Math.round((writers * perWriter) / ((performance.now() - started) / 1000));
    };
    const without = await rate(await open(primary, { keyPrefix: prefix() }));
    const before = await waitCalls(primary);
    const confirmed = await open(primary, {
      keyPrefix: prefix(),
      minReplicas: 1,
      replicaWaitMs: 5000,
    });
    const withWait = await rate(confirmed);
    const waits = (await waitCalls(primary)) - before;
    console.log(
      `${writers} writers x ${perWriter} Adds: ${without} Adds/s with minReplicas 0, ${withWait} Adds/s with minReplicas 1 (${waits} WAITs)`,
    );
    expect(waits).toBeGreaterThan(0);
    expect(waits).toBeLessThan((writers * perWriter) / 4);
  });
});
