/**
 * A Watch client for the fault tests: it follows a namespace's
 * MessagesAdded events as an agent platform would, opening the stream again
 * from its last resume token after UNAVAILABLE (or a stall), and records
 * every seq it is told of, per thread, so a test can check each seq came
 * once and in order across the resumes.
 */
import { EventType } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { CallFailed, type Driver } from "../integration/drivers.js";

/** A stream silent for this long (25 progress intervals of 200 ms) has stalled. */
const STALL_MS = 5000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const code = (err: unknown) => (err instanceof CallFailed ? err.code : `CLIENT ${String(err)}`);

/**
 * One client following the namespace's MessagesAdded events as an agent
 * platform would: on UNAVAILABLE it opens the stream again from its last
 * resume token. It records every seq it is told of, per thread.
 */
export class Follower {
  readonly seen = new Map<string, number[]>();
  token = "";
  resumes = 0;
  stalls = 0;
  /** Set when the stream ended with anything but UNAVAILABLE. */
  ended: string | undefined;
  #stop = false;
  #running: Promise<void> | undefined;
  #cancel: (() => void) | undefined;

  constructor(readonly driver: Driver) {}

  /** Opens the stream and resolves once it has said it is live (first Progress). */
  async start(): Promise<void> {
    let live!: () => void;
    const isLive = new Promise<void>((r) => {
      live = r;
    });
    this.#running = this.#run(live);
    await isLive;
  }

  async #run(live: () => void): Promise<void> {
    while (!this.#stop) {
      const stream = this.driver.watch({
        resumeToken: this.token,
        eventTypes: [EventType.MESSAGES_ADDED],
      });
      this.#cancel = () => stream.cancel();
      try {
        while (!this.#stop) {
          const e = await stream.next(STALL_MS);
          if (e.resumeToken !== "") this.token = e.resumeToken;
          if (e.event.case === "progress") live();
          if (e.event.case === "messagesAdded") {
            const list = this.seen.get(e.threadId) ?? [];
            for (let s = Number(e.event.value.firstSeq); s <= Number(e.event.value.lastSeq); s++) {
              list.push(s);
            }
            this.seen.set(e.threadId, list);
          }
        }
      } catch (err) {
        stream.cancel();
        if (this.#stop) return;
        const c = code(err);
        if (c === "TIMEOUT") this.stalls += 1;
        if (c !== "UNAVAILABLE" && c !== "TIMEOUT") {
          this.ended = c;
          live();
          return;
        }
        this.resumes += 1;
        await sleep(50);
      }
    }
  }

  async stop(): Promise<void> {
    this.#stop = true;
    this.#cancel?.();
    await this.#running;
  }
}
