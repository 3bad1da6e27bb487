import { createHash } from "node:crypto";
import type { StoredMessage } from "../core/types.js";

const DIGEST_BYTES = 32;

/**
 * Running digests of a thread's stored messages, oldest first: the digest at
 * message i is sha256(digest at i - 1, the message's export JSON), starting
 * from 32 zero bytes. Two threads whose digests agree at a seq hold the same
 * messages up to it (same seqs, times and content), so an export line can name
 * a shared prefix by its digest and the importer can check it against the
 * parent in the store. Costs 32 bytes a message, in one buffer.
 */
export class PrefixChain {
  readonly #firstSeq: number;
  readonly #digests: Buffer;
  readonly #length: number;

  private constructor(firstSeq: number, digests: Buffer, length: number) {
    this.#firstSeq = firstSeq;
    this.#digests = digests;
    this.#length = length;
  }

  /** The chain of `messages` (seqs consecutive), `encode` giving each message's export JSON. */
  static of(messages: readonly StoredMessage[], encode: (m: StoredMessage) => string): PrefixChain {
    const digests = Buffer.alloc(messages.length * DIGEST_BYTES);
    let prev = Buffer.alloc(DIGEST_BYTES);
    for (const [i, m] of messages.entries()) {
      prev = createHash("sha256").update(prev).update(encode(m)).digest();
      prev.copy(digests, i * DIGEST_BYTES);
    }
    return new PrefixChain(messages[0]?.seq ?? 0, digests, messages.length);
  }

  /** The messages this chain covers, from the oldest through `seq`: undefined when it holds no such seq. */
  countThrough(seq: number): number | undefined {
    const count = seq - this.#firstSeq + 1;
    return this.#length === 0 || count < 1 || count > this.#length ? undefined : count;
  }

  /** The digest (hex) of the oldest `count` messages (1 ≤ count ≤ length). */
  digestOf(count: number): string {
    return this.#digests.toString("hex", (count - 1) * DIGEST_BYTES, count * DIGEST_BYTES);
  }
}
