import {
  type Server,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
  status,
} from "@grpc/grpc-js";
import { service as healthServiceDefinition } from "grpc-health-check";
import type { Logger } from "../logger.js";
import type { CallRegistry } from "./call-registry.js";
import { toClientError, toGrpcStatus } from "./error-table.js";

/**
 * grpc.health.v1.Health (Check, Watch, List) over a fixed set of service
 * names that are all SERVING or all NOT_SERVING.
 *
 * grpc-health-check's own implementation never ends a Watch stream, so one
 * open Watch (grpc clients' health checking, Envoy) held every shutdown for
 * the whole grace period, and an unread Watch buffered every change. Here a
 * Watch is a stream in the call registry, ended with UNAVAILABLE when
 * shutdown ends streams, and a watcher that reads nothing holds at most one
 * undelivered status: the newest replaces it. grpc-health-check still
 * supplies the wire definition.
 */
export interface GrpcHealth {
  addToServer(server: Server): void;
  /** Sets every service name to SERVING or NOT_SERVING and tells their watchers. */
  setServing(serving: boolean): void;
}

type ServingStatus = "SERVING" | "NOT_SERVING";
type WatchedStatus = ServingStatus | "SERVICE_UNKNOWN";
interface HealthRequest {
  readonly service?: string;
}
interface HealthResponse {
  readonly status: WatchedStatus;
}

const METHOD = "grpc.health.v1.Health/Watch";

export function createGrpcHealth(
  serviceNames: readonly string[],
  calls: CallRegistry,
  logger: Logger,
): GrpcHealth {
  const known = new Set(serviceNames);
  let current: ServingStatus = "SERVING";
  const watchers = new Set<(status: ServingStatus) => void>();

  const check = (
    call: ServerUnaryCall<HealthRequest, HealthResponse>,
    callback: sendUnaryData<HealthResponse>,
  ): void => {
    const name = call.request.service ?? "";
    if (known.has(name)) callback(null, { status: current });
    else callback({ code: status.NOT_FOUND, details: `health status unknown for service ${name}` });
  };

  const list = (
    _call: ServerUnaryCall<unknown, unknown>,
    callback: sendUnaryData<{ statuses: Record<string, { status: ServingStatus }> }>,
  ): void => {
    callback(null, {
      statuses: Object.fromEntries(serviceNames.map((name) => [name, { status: current }])),
    });
  };

  const watch = (call: ServerWritableStream<HealthRequest, HealthResponse>): void =>
    watchHealth(call, { known, current: () => current, watchers, calls, logger });

  return {
    addToServer(server) {
      server.addService(healthServiceDefinition, { check, list, watch });
    },
    setServing(serving) {
      const next: ServingStatus = serving ? "SERVING" : "NOT_SERVING";
      if (next === current) return;
      current = next;
      for (const watcher of watchers) watcher(next);
    },
  };
}

/** What one health Watch stream needs of the health service. */
interface HealthState {
  readonly known: ReadonlySet<string>;
  current(): ServingStatus;
  readonly watchers: Set<(status: ServingStatus) => void>;
  readonly calls: CallRegistry;
  readonly logger: Logger;
}

/**
 * One Watch stream: the status now, then each change, never more than one
 * message queued beyond a full socket (a later status replaces an
 * undelivered one); ends with the call's end reason at shutdown.
 */
function watchHealth(
  call: ServerWritableStream<HealthRequest, HealthResponse>,
  health: HealthState,
): void {
  const name = call.request.service ?? "";
  const { known } = health;
  // No deadline of its own: grpc-js ends a call at its deadline and reports it as cancelled.
  const active = health.calls.begin("stream", undefined, call);
  const { signal } = active;
  let blocked = false;
  let undelivered: WatchedStatus | undefined;
  const send = (next: WatchedStatus): void => {
    if (blocked) {
      undelivered = next;
      return;
    }
    blocked = !call.write({ status: next });
  };
  const onDrain = (): void => {
    blocked = false;
    const next = undelivered;
    undelivered = undefined;
    if (next !== undefined) send(next);
  };
  const watcher = (next: ServingStatus): void => send(next);
  const finish = (): void => {
    health.watchers.delete(watcher);
    call.off("drain", onDrain);
    active.end();
    // A client that cancelled (or whose deadline passed) has nobody to tell.
    if (call.cancelled) return;
    // The newest status goes before the end, over the limit by one message.
    if (undelivered !== undefined) call.write({ status: undelivered });
    const scope = { method: METHOD, signal, logger: health.logger };
    call.emit("error", toGrpcStatus(toClientError(signal.reason, scope)));
  };
  call.on("drain", onDrain);
  // The spec: an unknown service gets SERVICE_UNKNOWN and the stream stays open.
  send(known.has(name) ? health.current() : "SERVICE_UNKNOWN");
  if (signal.aborted) {
    finish();
    return;
  }
  if (known.has(name)) health.watchers.add(watcher);
  signal.addEventListener("abort", finish, { once: true });
}
