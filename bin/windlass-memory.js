#!/usr/bin/env node
// The `windlass-memory` command: the compiled entry point (npm ci builds dist/).
import { main } from "../dist/src/main.js";

process.exitCode = await main(process.argv.slice(2));
