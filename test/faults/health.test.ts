import { credentials, Client as GrpcJsClient, Metadata, type ServiceError } from "@grpc/grpc-js";
import { service as healthService } from "grpc-health-check";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryService } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { startHarness } from "../support/service-harness.js";
import { startTestServers } from "../transport/harness.js";

/** gRPC health with real servers and clients: Watch streams, and ends at shutdown. */

const MEMORY_SERVICE = MemoryService.typeName;
// Far above what a status takes to arrive here: fails only a stuck run.
const DOWN_BOUND_MS = 5_000;
const SHUTDOWN_GRACE_MS = 10_000;

/** grpc.health.v1.Health/Watch, recording each status as it arrives. */
class HealthWatch {
  readonly statuses: string[] = [];
  /** How the stream ended; undefined while it is open. */
  end: ServiceError | undefined;
  readonly #client: GrpcJsClient;
  readonly #listeners = new Set<() => void>();

  constructor(address: string, service: string) {
    this.#client = new GrpcJsClient(address, credentials.createInsecure());
    const watch = healthService.Watch;
    if (watch === undefined) throw new Error("grpc-health-check has no Watch method");
    const call = this.#client.makeServerStreamRequest(
      watch.path,
      watch.requestSerialize,
      watch.responseDeserialize,
      { service },
      new Metadata(),
      {},
    );
    call.on("data", (value: { status?: unknown }) => {
      this.statuses.push(String(value.status));
      this.#notify();
    });
    call.on("error", (err: ServiceError) => {
      this.end = err;
      this.#notify();
    });
  }

  /** Resolves with the ms it took until the newest status is `status`; rejects after `boundMs`. */
  until(status: string, boundMs: number): Promise<number> {
    return this.#waitFor(() => this.statuses.at(-1) === status, boundMs, `status ${status}`);
  }

  /** Resolves once the stream has ended; rejects after `boundMs`. */
  ended(boundMs: number): Promise<ServiceError> {
    return this.#waitFor(() => this.end !== undefined, boundMs, "the end of the stream").then(
      () => this.end as ServiceError,
    );
  }

  close(): void {
    this.#client.close();
  }

  #notify(): void {
    for (const listener of [...this.#listeners]) listener();
  }

  #waitFor(cond: () => boolean, boundMs: number, what: string): Promise<number> {
    const begun = performance.now();
    if (cond()) return Promise.resolve(0);
    return new Promise<number>((resolve, reject) => {
      const listener = (): void => {
        if (!cond()) return;
        done();
        resolve(performance.now() - begun);
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`health Watch saw no ${what} within ${boundMs} ms: ${this.statuses}`));
      }, boundMs);
      const done = (): void => {
        clearTimeout(timer);
        this.#listeners.delete(listener);
      };
      this.#listeners.add(listener);
    });
  }
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("grpc.health.v1.Health/Watch", () => {
  it("ends every Watch with UNAVAILABLE at shutdown, after NOT_SERVING, instead of holding the grace period", async () => {
    const harness = await startHarness();
    cleanups.push(() => harness.close());
    const servers = await startTestServers(harness.service);
    cleanups.push(() => servers.shutdown(0));
    const watches = ["", MEMORY_SERVICE, "other.Service"].map(
      (service) => new HealthWatch(servers.grpcAddress, service),
    );
    for (const watch of watches) cleanups.push(() => watch.close());
    const [whole, memory, unknown] = watches as [HealthWatch, HealthWatch, HealthWatch];
    await whole.until("SERVING", DOWN_BOUND_MS);
    await memory.until("SERVING", DOWN_BOUND_MS);
    // The spec: an unknown service is SERVICE_UNKNOWN, and its stream stays open.
    await unknown.until("SERVICE_UNKNOWN", DOWN_BOUND_MS);

    const begun = performance.now();
    await servers.shutdown(SHUTDOWN_GRACE_MS);
    expect(performance.now() - begun).toBeLessThan(SHUTDOWN_GRACE_MS / 2);
    for (const watch of watches) {
      expect((await watch.ended(DOWN_BOUND_MS)).code).toBe(14); // UNAVAILABLE
    }
    expect(whole.statuses).toEqual(["SERVING", "NOT_SERVING"]);
    expect(memory.statuses).toEqual(["SERVING", "NOT_SERVING"]);
    expect(unknown.statuses).toEqual(["SERVICE_UNKNOWN"]);
  });
});
