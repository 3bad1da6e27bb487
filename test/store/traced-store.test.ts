/**
 * The tracing decorator must be invisible: the Store contract holds through
 * it (run here over the memory store; it forwards every call unchanged).
 */
import { createMemoryStore } from "../../src/store/memory/index.js";
import { tracedStore } from "../../src/store/traced-store.js";
import { runStoreContract } from "./store-contract.js";

runStoreContract("traced memory", async (limits) =>
  tracedStore(createMemoryStore(limits), "memory"),
);
