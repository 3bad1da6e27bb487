/**
 * The Redis Cluster harness itself (test/support/redis-cluster.ts), on real
 * redis-server processes: it starts six nodes joined into three primaries
 * with a replica each, and its failover, slot migration and kill/restart
 * do what the fault tests rely on.
 */
import { once } from "node:events";
import { createServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  clusterCli,
  nodeCli,
  type RedisCluster,
  slotOfKey,
  startRedisCluster,
} from "../support/redis-cluster.js";
import { freePort, startRedisServer } from "../support/redis-server.js";

let cluster: RedisCluster;

beforeAll(async () => {
  cluster = await startRedisCluster();
  console.log(`redis cluster of 6 nodes started in ${cluster.startMs} ms`);
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
});

describe("the Redis Cluster harness", () => {
  it("starts three primaries covering every slot, each with one replica in sync", async () => {
    const primaries = await cluster.primaries();
    expect(primaries).toHaveLength(3);
    const covered = (await cluster.topology())
      .flatMap((s) => s.slots)
      .reduce((sum, [a, b]) => sum + (b - a + 1), 0);
    expect(covered).toBe(16384);
    for (const p of primaries) expect(await cluster.replicasOf(p)).toHaveLength(1);
    expect(cluster.url).toMatch(/^redis-cluster:\/\/127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){5}$/);
    expect(cluster.nodes.every((n) => typeof n.pid === "number")).toBe(true);
  });

  it("starts a node on another bus port when another process holds the first one", async () => {
    // What a parallel test file's process can do between the probe and redis's bind.
    const holder = createServer();
    holder.listen(await freePort(), "127.0.0.1");
    await once(holder, "listening");
    const held = (holder.address() as { port: number }).port;
    const chosen: number[] = [];
    try {
      const node = await startRedisServer({
        args: ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"],
        portArgs: async () => {
          const port = chosen.length === 0 ? held : await freePort();
          chosen.push(port);
          return ["--cluster-port", String(port)];
        },
      });
      await node.stop();
    } finally {
      holder.close();
    }
    expect(chosen).toHaveLength(2);
    expect(chosen[0]).toBe(held);
    expect(chosen[1]).not.toBe(held);
  });

  it("names a key's slot and its primary", async () => {
    // The hash tag alone decides the slot.
    expect(await cluster.keySlot("a{thread-1}b")).toBe(await cluster.keySlot("{thread-1}"));
    // The local CRC16 the key listing uses agrees with CLUSTER KEYSLOT.
    for (const key of ["", "a", "wm:{ns-ZGVmYXVsdA}:threads", "{}x", "x{y}z{w}", "ü{}"]) {
      expect(slotOfKey(key), key).toBe(await cluster.keySlot(key));
    }
    const slot = await cluster.keySlot("{thread-1}");
    const primary = await cluster.primaryOfSlot(slot);
    const state = (await cluster.topology()).find((s) => s.node === primary);
    expect(state?.slots.some(([a, b]) => slot >= a && slot <= b)).toBe(true);
  });

  it("migrates a slot with keys in it, and the keys read back through the new primary", async () => {
    const key = "{moved}k";
    const port = cluster.nodes[0]?.port ?? 0;
    const slot = await cluster.keySlot(key);
    const from = await cluster.primaryOfSlot(slot);
    // One hash tag, one slot: the keys all go to its primary on one connection.
    const sets = Array.from({ length: 250 }, (_, i) => `SET {moved}k${i} v${i}`);
    nodeCli(from.port, [...sets, `SET ${key} kept`]);
    const to = (await cluster.primaries()).find((p) => p !== from);
    if (to === undefined) throw new Error("no second primary");
    let halfMovedReads = 0;
    const moved = await cluster.migrateSlot(slot, from, to, {
      batch: 100,
      afterBatch: async () => {
        // Mid-migration a read still finds the key, through ASK.
        expect(await clusterCli(port, ["GET", key])).toBe("kept");
        halfMovedReads++;
      },
    });
    expect(moved).toBe(251);
    expect(halfMovedReads).toBe(4);
    expect(await cluster.primaryOfSlot(slot)).toBe(to);
    expect(await clusterCli(to.port, ["GET", key])).toBe("kept");
    expect(await clusterCli(from.port, ["GET", key])).toBe("kept");
    expect(await clusterCli(port, ["GET", "{moved}k249"])).toBe("v249");
    await cluster.waitUntilSettled();
  });

  it("fails a primary over to its replica with CLUSTER FAILOVER", async () => {
    const slot = await cluster.keySlot("{failover}");
    const primary = await cluster.primaryOfSlot(slot);
    const [replica] = await cluster.replicasOf(primary);
    if (replica === undefined) throw new Error("the primary has no replica");
    await clusterCli(primary.port, ["SET", "{failover}", "before"]);
    await cluster.failover(replica);
    expect(await cluster.primaryOfSlot(slot)).toBe(replica);
    expect((await cluster.replicasOf(replica)).map((n) => n.port)).toEqual([primary.port]);
    expect(await clusterCli(primary.port, ["GET", "{failover}"])).toBe("before");
  });

  it("promotes the replica of a SIGKILLed primary, and takes the primary back as a replica", async () => {
    const slot = await cluster.keySlot("{killed}");
    const primary = await cluster.primaryOfSlot(slot);
    const [replica] = await cluster.replicasOf(primary);
    if (replica === undefined) throw new Error("the primary has no replica");
    // WAIT on the connection that wrote: the replica has it before the kill.
    expect(nodeCli(primary.port, ["SET {killed} before", "WAIT 1 5000"]).split("\n")).toEqual([
      "OK",
      "1",
    ]);
    const started = Date.now();
    await cluster.kill(primary);
    console.log(`replica of a killed primary promoted in ${Date.now() - started} ms`);
    expect(primary.pid).toBeUndefined();
    expect(await cluster.primaryOfSlot(slot)).toBe(replica);
    expect(await clusterCli(replica.port, ["GET", "{killed}"])).toBe("before");
    await cluster.restart(primary);
    expect((await cluster.replicasOf(replica)).map((n) => n.port)).toEqual([primary.port]);
    expect(await cluster.primaries()).toHaveLength(3);
  });
});
