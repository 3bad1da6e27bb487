import { describe } from "vitest";
import { backends } from "./contract/backends.js";
import { runContractSuites } from "./contract/suites.js";

/**
 * The Store contract: every suite of test/store/contract/ against every
 * backend, so they all behave alike. What only one backend has to show is
 * in its own *-store.test.ts.
 */
describe.each(backends)("Store contract: $name", (backend) => runContractSuites(backend));
