/**
 * The TypeScript runner of the conformance suite: every case of
 * test/conformance/cases against the compiled command, per store
 * (CONFORMANCE_STORES, default memory, sqlite, redis, postgres, redis-cluster), over gRPC (grpc-js) and
 * over the Connect protocol (connect-node, JSON over HTTP/1.1).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromJson, type JsonValue, toJson } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, it } from "vitest";
import {
  AddRequestSchema,
  AddResponseSchema,
  ClearRequestSchema,
  ClearResponseSchema,
  ForkRequestSchema,
  ForkResponseSchema,
  GetRequestSchema,
  GetResponseSchema,
  ListThreadsRequestSchema,
  ListThreadsResponseSchema,
  RewindRequestSchema,
  RewindResponseSchema,
  WatchRequestSchema,
  WatchResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { CallFailed, connectDriver, type Driver, grpcDriver } from "../integration/drivers.js";
import { type PostgresServer, startPostgresServer } from "../support/postgres-server.js";
import { type RedisCluster, startRedisCluster } from "../support/redis-cluster.js";
import { type RedisServer, startRedisServer } from "../support/redis-server.js";
import { type ServerProcess, startServerProcess } from "./server-process.js";
import {
  type ConformanceClient,
  type Json,
  loadCases,
  type Outcome,
  runCase,
  serverKey,
  storesFromEnv,
} from "./suite.js";

type JsonObject = { [key: string]: Json };

const CASES = loadCases();
const STORES = storesFromEnv();
const TRANSPORTS: [string, (s: ServerProcess) => Driver][] = [
  ["grpc", (s) => grpcDriver(s.grpcPort)],
  ["connect-json-http1", (s) => connectDriver(s.httpPort, "connect", "1.1")],
];
const SERVER_KEYS = [...new Set(CASES.map(serverKey))];
const tally = { passed: 0, failed: 0 };

function failure(err: unknown): { code: string; message: string } {
  if (err instanceof CallFailed) {
    // CallFailed's message is "CODE: message".
    const prefix = `${err.code}: `;
    const message = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
    return { code: err.code, message };
  }
  return { code: "CLIENT", message: String(err) };
}

const asObject = (v: JsonValue): JsonObject => v as JsonObject;
const asJson = (v: JsonObject): JsonValue => v as JsonValue;

/** A ConformanceClient over one of the integration tests' drivers. */
function clientOf(driver: Driver): ConformanceClient {
  return {
    async unary(method, request, opts = {}): Promise<Outcome> {
      const r = asJson(request);
      try {
        switch (method) {
          case "Add":
            return {
              ok: true,
              value: asObject(
                toJson(AddResponseSchema, await driver.add(fromJson(AddRequestSchema, r), opts)),
              ),
            };
          case "Get":
            return {
              ok: true,
              value: asObject(
                toJson(GetResponseSchema, await driver.get(fromJson(GetRequestSchema, r), opts)),
              ),
            };
          case "Clear":
            return {
              ok: true,
              value: asObject(
                toJson(
                  ClearResponseSchema,
                  await driver.clear(fromJson(ClearRequestSchema, r), opts),
                ),
              ),
            };
          case "ListThreads":
            return {
              ok: true,
              value: asObject(
                toJson(
                  ListThreadsResponseSchema,
                  await driver.listThreads(fromJson(ListThreadsRequestSchema, r), opts),
                ),
              ),
            };
          case "Rewind":
            return {
              ok: true,
              value: asObject(
                toJson(
                  RewindResponseSchema,
                  await driver.rewind(fromJson(RewindRequestSchema, r), opts),
                ),
              ),
            };
          case "Fork":
            return {
              ok: true,
              value: asObject(
                toJson(ForkResponseSchema, await driver.fork(fromJson(ForkRequestSchema, r), opts)),
              ),
            };
        }
      } catch (err) {
        return { ok: false, ...failure(err) };
      }
    },
    watch(request, opts = {}) {
      const handle = driver.watch(fromJson(WatchRequestSchema, asJson(request)), opts);
      return {
        async next(ms) {
          try {
            return {
              kind: "event",
              event: asObject(toJson(WatchResponseSchema, await handle.next(ms))),
            };
          } catch (err) {
            const f = failure(err);
            if (f.code === "TIMEOUT") return { kind: "timeout" };
            if (f.code === "ENDED") return { kind: "ended" };
            return { kind: "error", ...f };
          }
        },
        cancel: () => handle.cancel(),
      };
    },
  };
}

describe.each(STORES)("conformance on the %s store", (store) => {
  const servers = new Map<string, ServerProcess>();
  let redis: RedisServer | undefined;
  let postgres: PostgresServer | undefined;
  let cluster: RedisCluster | undefined;
  let dir: string | undefined;

  beforeAll(async () => {
    if (store === "redis") redis = await startRedisServer();
    if (store === "postgres") postgres = await startPostgresServer();
    if (store === "redis-cluster") cluster = await startRedisCluster();
    if (store === "sqlite") dir = mkdtempSync(join(tmpdir(), "windlass-conformance-"));
    for (const [i, key] of SERVER_KEYS.entries()) {
      // One database (or file) per server, so servers of one store never share state.
      // A cluster has one database: its servers share it, and the cases, which run
      // one at a time and each start with Clear {all: true}, never meet.
      const spec =
        store === "memory"
          ? "memory"
          : store === "sqlite"
            ? `sqlite:${join(dir ?? "", `server-${i}.db`)}`
            : store === "postgres"
              ? await postgresDatabase(postgres)
              : store === "redis-cluster"
                ? (cluster?.url ?? "")
                : `redis://127.0.0.1:${redis?.port}/${i}`;
      const [caseFlags, env] = JSON.parse(key) as [string[], Record<string, string>];
      // On the cluster, each namespace split over its three primaries (README "Namespace shards").
      const flags =
        store === "redis-cluster" ? [...caseFlags, "--redis-namespace-shards", "3"] : caseFlags;
      servers.set(key, await startServerProcess(spec, flags, env));
    }
  }, 90_000);

  afterAll(async () => {
    for (const s of servers.values()) await s.stop();
    await redis?.stop();
    await postgres?.stop();
    await cluster?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  describe.each(TRANSPORTS)("over %s", (_transport, makeDriver) => {
    const drivers = new Map<string, Driver>();
    afterAll(() => {
      for (const d of drivers.values()) d.close();
    });

    for (const c of CASES) {
      it(c.name, async () => {
        try {
          const key = serverKey(c);
          const server = servers.get(key);
          if (server === undefined) throw new Error(`no server for ${key} (see beforeAll)`);
          let driver = drivers.get(key);
          if (driver === undefined) {
            driver = makeDriver(server);
            drivers.set(key, driver);
          }
          await runCase(c, clientOf(driver), server.model);
          tally.passed++;
        } catch (err) {
          tally.failed++;
          throw err;
        }
      });
    }
  });
});

/** A fresh database per server: servers of one store never share state. */
function postgresDatabase(server: PostgresServer | undefined): Promise<string> {
  if (server === undefined) throw new Error("the PostgreSQL server did not start");
  return server.createDatabase();
}

afterAll(() => {
  process.stdout.write(
    `conformance ts: ${CASES.length} cases × ${STORES.length} stores × ${TRANSPORTS.length} transports: ` +
      `${tally.passed} passed, ${tally.failed} failed\n`,
  );
});
