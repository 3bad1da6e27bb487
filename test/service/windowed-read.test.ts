import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ClearRequestSchema, Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { createRedisStore } from "../../src/store/redis/index.js";
import { createSqliteStore } from "../../src/store/sqlite/index.js";
import { READ_SLACK, type Store } from "../../src/store/store.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import {
  addReq,
  contents,
  getReq,
  type Harness,
  msg,
  startHarness,
  users,
  windowStrategy,
} from "../support/service-harness.js";

let redis: RedisServer;
const dir = mkdtempSync(join(tmpdir(), "windlass-windowed-"));
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const stores: [string, () => Promise<Store>][] = [
  ["memory", async () => createMemoryStore()],
  ["sqlite", async () => createSqliteStore(join(dir, `${randomUUID()}.db`))],
  [
    "sqlite, no cache",
    async () => createSqliteStore(join(dir, `${randomUUID()}.db`), {}, { cacheSize: 0 }),
  ],
  ["redis", async () => createRedisStore(redis.url, {}, { keyPrefix: `wr-${randomUUID()}` })],
];

/**
 * Get over a store that reads only the newest messages (every store does):
 * the result must be what a read of the whole thread gives, also when the
 * window widens past the messages read or system messages are left out.
 */
describe.each(stores)("Get over a windowed read (%s store)", (_name, makeStore) => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness({ store: await makeStore() });
  });
  afterEach(async () => h.close());

  it("widens a window over more tool results than one windowed read holds", async () => {
    const calls = READ_SLACK + 8;
    const ids = Array.from({ length: calls }, (_, i) => `c${i}`);
    await h.service.add(
      addReq({
        strategy: windowStrategy(2),
        messages: [
          ...users("a", "b", "c"),
          msg("assistant", "", {
            toolCalls: ids.map((id) => ({ id, name: "f", arguments: "{}" })),
          }),
          ...ids.map((id) => msg("tool", id, { toolCallId: id })),
        ],
      }),
      h.ctx(),
    );
    const r = await h.service.get(getReq(), h.ctx());
    expect(r.messages[0]?.role).toBe(Role.ASSISTANT);
    expect(r.messages).toHaveLength(calls + 1);
  });

  it("reaches past system messages left out of the window", async () => {
    const strategy = windowStrategy(3, { excludeSystem: true });
    const system = Array.from({ length: READ_SLACK + 10 }, (_, i) => msg("system", `s${i}`));
    await h.service.add(
      addReq({ strategy, messages: [...users("u1", "u2", "u3"), ...system] }),
      h.ctx(),
    );
    expect(contents(await h.service.get(getReq(), h.ctx()))).toEqual(["u1", "u2", "u3"]);
  });

  it("returns the newest window without reading the whole thread", async () => {
    const many = Array.from({ length: 200 }, (_, i) => `m${i}`);
    await h.service.add(
      addReq({ strategy: windowStrategy(20), messages: users(...many) }),
      h.ctx(),
    );
    const snap = await h.store.read("", "default", { limit: undefined });
    expect(snap?.complete).toBe(false);
    expect(snap?.messages.length).toBe(20 + READ_SLACK);
    expect(contents(await h.service.get(getReq(), h.ctx()))).toEqual(many.slice(-20));
  });

  it("answers a Get after Clear and a new Add with the new thread only", async () => {
    const old = Array.from({ length: 80 }, (_, i) => `old${i}`);
    await h.service.add(addReq({ strategy: windowStrategy(20), messages: users(...old) }), h.ctx());
    expect(contents(await h.service.get(getReq(), h.ctx()))).toEqual(old.slice(-20));
    await h.service.clear(create(ClearRequestSchema, { threadId: "default" }), h.ctx());
    await h.service.add(addReq({ messages: users("new1", "new2") }), h.ctx());
    expect(contents(await h.service.get(getReq(), h.ctx()))).toEqual(["new1", "new2"]);
  });
});
