import { copyFileSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import { tokenParts } from "../../src/store/resume-token.js";
import { createSqliteStore } from "../../src/store/sqlite/index.js";
import type { Store } from "../../src/store/store.js";
import { appendCommands, user, window20 } from "../store/fixtures.js";

/**
 * The SQLite store's incarnation is its file: a backup put back (or any
 * copy) is not the file the server last opened, so it takes a new
 * incarnation and every resume token of the longer history is OUT_OF_RANGE,
 * never resumed at positions the restored history goes on to reuse. The
 * same file reopened keeps its tokens. A file replaced under a running
 * server makes health say NOT_SERVING.
 */
const dir = mkdtempSync(join(tmpdir(), "windlass-sqlite-incarnation-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cmd = appendCommands(window20);
const add = (store: Store, content: string) =>
  store.append(cmd({ messages: [user(content)], now: Date.now() }));

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "ok";
  } catch (err) {
    return err instanceof MemoryError ? err.code : String(err);
  }
}

describe("SQLite incarnation", () => {
  it("keeps tokens across a restart on the same file", async () => {
    const path = join(dir, "same.db");
    const a = createSqliteStore(path);
    await add(a, "one");
    const token = await a.headCursor("ns");
    await a.close();
    const b = createSqliteStore(path);
    await add(b, "two");
    const events = await b.readEvents("ns", token, 10);
    expect(events.map((e) => e.type)).toEqual(["messages_added"]);
    await b.close();
  });

  it("gives a restored backup a new incarnation: tokens of the longer history are OUT_OF_RANGE", async () => {
    const path = join(dir, "live.db");
    const backup = join(dir, "backup.db");
    const live = createSqliteStore(path);
    await add(live, "one");
    await live.close();
    copyFileSync(path, backup);

    const again = createSqliteStore(path);
    const beforeMore = await again.headCursor("ns"); // position 1, held by a client
    await add(again, "two");
    await add(again, "three");
    const newest = await again.headCursor("ns"); // position 3
    await again.close();

    // The backup is put back: its history ends at position 1.
    renameSync(backup, path);
    const restored = createSqliteStore(path);
    try {
      // The restored history writes positions 2 and 3 again, with other events.
      await add(restored, "two'");
      await add(restored, "three'");
      // Neither token may resume into it: not the one past its head, and not
      // the one it still reaches (resuming it would skip "two'" and "three'"
      // as if they were "two" and "three").
      expect(await code(restored.readEvents("ns", newest, 10))).toBe("out_of_range");
      expect(await code(restored.readEvents("ns", beforeMore, 10))).toBe("out_of_range");
      const fresh = await restored.headCursor("ns");
      expect(tokenParts(fresh)?.storeId).not.toBe(tokenParts(newest)?.storeId);
      expect(await restored.readEvents("ns", fresh, 10)).toEqual([]);
      const read = await restored.read("ns", "t");
      expect(read?.messages.map((m) => m.content)).toEqual(["one", "two'", "three'"]);
    } finally {
      await restored.close();
    }
  });

  it("reports not serving when its file is replaced or removed under it", async () => {
    const path = join(dir, "replaced.db");
    const store = createSqliteStore(path);
    try {
      await add(store, "one");
      expect(await store.health(1000)).toEqual({ serving: true });
      copyFileSync(path, `${path}.copy`);
      renameSync(`${path}.copy`, path);
      const health = await store.health(1000);
      expect(health.serving).toBe(false);
      expect(health.reason).toMatch(/replaced or removed/);
      rmSync(path);
      expect((await store.health(1000)).serving).toBe(false);
    } finally {
      await store.close();
    }
  });
});
