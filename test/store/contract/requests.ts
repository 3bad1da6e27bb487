/**
 * ThreadStore.append's idempotency records: a repeated request_id is
 * replayed, refused for another payload, and forgotten with its thread.
 * (Rewind's request ids are in rewind.ts.)
 */
import { describe, expect, it } from "vitest";
import { user } from "../fixtures.js";
import { type ContractBackend, cmd, rejects, storeOfEachCase } from "./support.js";

export function requestsContract(backend: ContractBackend): void {
  describe("request ids", () => {
    const store = storeOfEachCase(backend);

    it("replays a repeated request_id and refuses it for another payload", async () => {
      const first = await store.append(
        cmd({ requestId: "r1", requestHash: "h1", messages: [user("a"), user("b")] }),
      );
      await store.append(cmd({ messages: [user("c")] }));
      const again = await store.append(
        cmd({ requestId: "r1", requestHash: "h1", messages: [user("a"), user("b")] }),
      );
      expect(again.replayed).toBe(true);
      expect([again.firstSeq, again.lastSeq]).toEqual([first.firstSeq, first.lastSeq]);
      expect((await store.read("ns", "t"))?.messages).toHaveLength(3);
      const err = await rejects(
        store.append(cmd({ requestId: "r1", requestHash: "h2" })),
        "invalid_argument",
      );
      expect(err.field).toBe("request_id");
      expect((await store.read("ns", "t"))?.messages).toHaveLength(3);
    });

    it("forgets request ids when the thread is cleared", async () => {
      await store.append(cmd({ requestId: "r1", requestHash: "h1" }));
      await store.clear("ns", "t", 2000);
      const r = await store.append(cmd({ requestId: "r1", requestHash: "h1" }));
      expect(r.replayed).toBe(false);
      expect(r.firstSeq).toBe(1);
    });
  });
}
