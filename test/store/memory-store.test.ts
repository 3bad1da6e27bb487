import { createMemoryStore } from "../../src/store/memory-store.js";
import { runStoreContract } from "./store-contract.js";

runStoreContract("memory", async (limits) => createMemoryStore(limits));
