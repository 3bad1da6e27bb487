#!/usr/bin/env node
// The `windlass-memory` command: the compiled entry point (npm ci builds dist/).
import { main } from "../dist/src/main.js";

const code = await main(process.argv.slice(2));
// Exit now, not when the event loop has drained: while Node tears the loop
// down it closes its signal handles, and a signal arriving then (the copy of
// a process-group SIGTERM that `npm start` forwards late on a busy machine)
// would kill the process by the signal instead of letting it exit 0. Every
// log line is written synchronously and the stop has finished by now.
process.exit(code);
