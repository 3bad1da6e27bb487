import { afterAll, beforeAll } from "vitest";
import { adminContract } from "./admin.js";
import { eventsContract } from "./events.js";
import { expiryContract } from "./expiry.js";
import { foldsContract } from "./folds.js";
import { forksContract } from "./forks.js";
import { importShareContract } from "./import-share.js";
import { labelsContract } from "./labels.js";
import { quotasContract } from "./quotas.js";
import { requestsContract } from "./requests.js";
import { rewindContract } from "./rewind.js";
import type { ContractBackend } from "./support.js";
import { threadsContract } from "./threads.js";

/** A Sentinel deployment (a primary, a replica, three sentinels finding each other) starts slowest. */
const START_TIMEOUT_MS = 60_000;
/**
 * PostgreSQL removes one database per store at its stop (some 60 of them,
 * about 7 s measured on an idle machine, past the default 30 s under load).
 */
const STOP_TIMEOUT_MS = 120_000;

/** Every contract suite, by concern; each is written against the Store interfaces only. */
export const contractSuites: readonly ((backend: ContractBackend) => void)[] = [
  threadsContract,
  requestsContract,
  foldsContract,
  eventsContract,
  quotasContract,
  labelsContract,
  expiryContract,
  adminContract,
  rewindContract,
  forksContract,
  importShareContract,
];

/**
 * Runs every contract suite against one backend, starting it before them and
 * stopping it after; call it inside a describe (test/store/contract.test.ts
 * for the backends of backends.ts, the Sentinel fault test for its own).
 */
export function runContractSuites(backend: ContractBackend): void {
  beforeAll(() => backend.start(), START_TIMEOUT_MS);
  afterAll(() => backend.stop(), STOP_TIMEOUT_MS);
  for (const suite of contractSuites) suite(backend);
}
