import { rmSync, statfsSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ServiceError, status } from "@grpc/grpc-js";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import {
  killHard,
  mountSmallDisk,
  type ServerProcess,
  type SmallDisk,
  startServerProcess,
  stopGracefully,
} from "../support/sqlite-server.js";
import { createGrpcClient, type MemoryGrpcClient } from "../transport/clients.js";

/**
 * The real server on a SQLite file on a real small filesystem (a tmpfs) that
 * fills up: Adds over gRPC fail with RESOURCE_EXHAUSTED naming the store's
 * full disk, Gets keep answering, Adds succeed again once space is freed,
 * and a fresh open of the file afterwards holds exactly the acknowledged
 * messages, counted.
 */

const DISK_BYTES = 8 * 1024 * 1024;
/** What the filler leaves free once the server has created its file. */
const LEFT_FREE = 768 * 1024;
const WRITERS = 4;
const REFUSALS_PER_WRITER = 3;
const strategy = { kind: { case: "buffer" as const, value: {} }, maxStored: 100_000 };

describe("SQLite server on a disk that fills up", () => {
  const disk: SmallDisk = mountSmallDisk(tmpdir(), DISK_BYTES);
  afterAll(() => disk.remove());
  const servers: ServerProcess[] = [];
  const clients: MemoryGrpcClient[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    for (const s of servers.splice(0)) await killHard(s.child);
  });

  it("refuses Adds with RESOURCE_EXHAUSTED, serves Gets, resumes once space is freed, and stores exactly what it acknowledged", {
    timeout: 120_000,
  }, async () => {
    const path = join(disk.dir, "memory.db");
    const server = await startServerProcess(["--store", `sqlite:${path}`]);
    servers.push(server);
    const client = createGrpcClient(server.address);
    clients.push(client);
    const filler = join(disk.dir, "filler");
    const free = (): number => {
      const s = statfsSync(disk.dir);
      return s.bavail * s.bsize;
    };
    writeFileSync(filler, Buffer.alloc(Math.max(0, free() - LEFT_FREE)));

    /** Acknowledged messages per thread: seq -> content. */
    const acked = new Map<string, Map<number, string>>();
    const refusals: string[] = [];
    const otherErrors: string[] = [];
    const add = async (threadId: string, content: string) => {
      const r = await client.add({
        threadId,
        strategy,
        requestId: content.slice(0, content.indexOf(":")),
        messages: [{ role: Role.USER, content }],
      });
      const mine = acked.get(threadId) ?? new Map<number, string>();
      mine.set(Number(r.firstSeq), content);
      acked.set(threadId, mine);
    };
    await Promise.all(
      Array.from({ length: WRITERS }, async (_, w) => {
        let refused = 0;
        for (let i = 0; refused < REFUSALS_PER_WRITER && i < 3000; i++) {
          try {
            await add(`w${w}`, `w${w}.${i}:${"z".repeat(6000)}`);
          } catch (err) {
            const e = err as ServiceError;
            if (e.code === status.RESOURCE_EXHAUSTED) {
              refused++;
              refusals.push(e.details);
            } else otherErrors.push(`${e.code} ${e.details}`);
          }
        }
      }),
    );
    expect(otherErrors).toEqual([]);
    expect(refusals).toHaveLength(WRITERS * REFUSALS_PER_WRITER);
    for (const d of refusals) expect(d).toMatch(/^the SQLite store's disk is full \(SQLITE_FULL/);
    // Gets keep answering with everything acknowledged.
    for (const [threadId, mine] of acked) {
      const got = await client.get({ threadId, limit: 0 });
      expect(got.messages.map((m) => m.content)).toEqual([...mine.values()]);
    }
    // Space comes back: the next Add is stored, with no restart.
    rmSync(filler);
    await add("after", "after: the disk had room again");

    expect(await stopGracefully(server.child)).toBe(0);
    const db = new Database(path, { readonly: true });
    let stored: { thread_id: string; seq: number; content: string }[];
    try {
      stored = db
        .prepare<[], { thread_id: string; seq: number; content: string }>(
          `SELECT t.thread_id, m.seq, m.content FROM messages m JOIN threads t ON t.id = m.thread
           ORDER BY t.thread_id, m.seq`,
        )
        .all();
      expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
    } finally {
      db.close();
    }
    const expected = [...acked.entries()]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .flatMap(([threadId, mine]) =>
        [...mine.entries()].map(([seq, content]) => ({ thread_id: threadId, seq, content })),
      );
    const acknowledged = expected.length;
    expect({ acknowledged, stored: stored.length }).toEqual({
      acknowledged,
      stored: acknowledged,
    });
    expect(stored).toEqual(expected);
  });
});
