import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { AbortableIterator } from "../../src/transport/abortable-next.js";

/** An iterator whose next() settles only when the test says so. */
function manual<T>() {
  const pending: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void }[] = [];
  const iterator: AsyncIterator<T> = {
    next: () => new Promise((resolve, reject) => pending.push({ resolve, reject })),
  };
  return { iterator, pending };
}

describe("AbortableIterator", () => {
  it("passes values through, with one abort listener for the iterator's life", async () => {
    const controller = new AbortController();
    const { iterator, pending } = manual<number>();
    const pulls = new AbortableIterator(iterator, controller.signal);
    for (let i = 0; i < 3; i++) {
      const next = pulls.next();
      pending[i]?.resolve({ value: i, done: false });
      expect(await next).toEqual({ value: i, done: false });
      expect(getEventListeners(controller.signal, "abort")).toHaveLength(1);
    }
    pulls.close();
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
  });

  it("resolves a pending pull with undefined as soon as the signal aborts, and drops its late failure", async () => {
    const controller = new AbortController();
    const { iterator, pending } = manual<number>();
    const pulls = new AbortableIterator(iterator, controller.signal);
    const next = pulls.next();
    controller.abort(new Error("gone"));
    expect(await next).toBeUndefined();
    // The iterator's own answer comes later and changes nothing.
    pending[0]?.reject(new Error("late"));
    await new Promise((resolve) => setImmediate(resolve));
    expect(await pulls.next()).toBeUndefined();
    expect(pending).toHaveLength(1);
    pulls.close();
  });

  it("answers undefined at once when the signal was aborted before the pull", async () => {
    const controller = new AbortController();
    controller.abort();
    const { iterator, pending } = manual<number>();
    const pulls = new AbortableIterator(iterator, controller.signal);
    expect(await pulls.next()).toBeUndefined();
    expect(pending).toHaveLength(0);
  });

  it("passes the iterator's failure to the pull that asked", async () => {
    const controller = new AbortController();
    const { iterator, pending } = manual<number>();
    const pulls = new AbortableIterator(iterator, controller.signal);
    const next = pulls.next();
    pending[0]?.reject(new Error("store failed"));
    await expect(next).rejects.toThrow("store failed");
  });
});
