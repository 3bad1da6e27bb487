import { type HeldLease, mayTakeLease, nextLeaseToken } from "../../core/fold-commit.js";

/**
 * The fold leases of the memory store's threads (core/fold-commit.ts
 * decides). Tokens come from one counter for the whole store, so each is
 * above every token any thread had, across releases, Clear and Rewind,
 * without keeping a token per thread that ever folded: a lease is kept
 * only while taken.
 */
export class FoldLeases {
  readonly #held = new Map<string, HeldLease>();
  #lastToken: number | undefined;

  /** A new lease's token, or undefined while another holds one. */
  take(namespace: string, threadId: string, ttlMs: number, now: number): number | undefined {
    const key = leaseKey(namespace, threadId);
    if (!mayTakeLease(this.#held.get(key), now)) return undefined;
    const token = nextLeaseToken(this.#lastToken);
    this.#lastToken = token;
    this.#held.set(key, { token, expiresAt: now + ttlMs });
    return token;
  }

  /** Releases the lease if `token` still holds it. */
  release(namespace: string, threadId: string, token: number): void {
    const key = leaseKey(namespace, threadId);
    if (this.#held.get(key)?.token === token) this.#held.delete(key);
  }

  /** The thread's lease, held or run out, until released, ended or taken again. */
  current(namespace: string, threadId: string): HeldLease | undefined {
    return this.#held.get(leaseKey(namespace, threadId));
  }

  /**
   * Ends the thread's lease, whoever holds it: its holder can no longer
   * commit, and the next lease gets a later token.
   */
  end(namespace: string, threadId: string): void {
    this.#held.delete(leaseKey(namespace, threadId));
  }
}

function leaseKey(namespace: string, threadId: string): string {
  return `${namespace}\u0000${threadId}`;
}
