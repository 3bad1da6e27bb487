import { once } from "node:events";
import { createReadStream, createWriteStream } from "node:fs";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { ConfigError, loadConfig } from "../config.js";
import { createStore } from "../store/create-store.js";
import type { Store } from "../store/store.js";
import { exportNamespace } from "./export.js";
import { importLines } from "./import.js";

/** The streams a command uses; the process's own by default (tests pass others). */
export interface CommandIo {
  stdin: Readable;
  stdout: Writable;
  stderr: Writable;
  env: NodeJS.ProcessEnv;
}

export const EXPORT_USAGE =
  "Usage: windlass-memory export [--namespace NS]... [--output FILE] [server flags: --store …]";
export const IMPORT_USAGE =
  "Usage: windlass-memory import [--input FILE] [server flags: --store …]";

/**
 * Splits this command's own flags (`own`, each taking a value) from the
 * server flags, which go to loadConfig: the store and its limits are read
 * exactly as `serve` reads them, environment variables included.
 */
function splitFlags(
  argv: readonly string[],
  own: readonly string[],
): { mine: Map<string, string[]>; rest: string[] } {
  const mine = new Map<string, string[]>();
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? "";
    const eq = arg.indexOf("=");
    const name = arg.startsWith("--") ? arg.slice(2, eq === -1 ? undefined : eq) : "";
    if (!own.includes(name)) {
      rest.push(arg);
      continue;
    }
    const value = eq === -1 ? argv[++i] : arg.slice(eq + 1);
    if (value === undefined) throw new ConfigError(`--${name} needs a value`);
    mine.set(name, [...(mine.get(name) ?? []), value]);
  }
  return { mine, rest };
}

async function openStore(rest: string[], env: NodeJS.ProcessEnv): Promise<Store> {
  const config = loadConfig(rest, env);
  return createStore(config.store, {
    eventRetention: config.eventRetention,
    maxThreadsPerNamespace: config.maxThreadsPerNamespace,
    maxMessagesPerNamespace: config.maxMessagesPerNamespace,
    maxBytesPerNamespace: config.maxBytesPerNamespace,
  });
}

/**
 * `windlass-memory export`: every thread of each `--namespace` (default: the
 * namespace of a server without auth, "") as JSON Lines, to `--output` or
 * stdout. Returns the exit status: 0 done, 1 failed, 2 bad usage.
 */
export async function runExport(argv: readonly string[], io: CommandIo): Promise<number> {
  return run(io, argv, EXPORT_USAGE, async () => {
    const { mine, rest } = splitFlags(argv, ["namespace", "output"]);
    const namespaces = mine.get("namespace") ?? [""];
    const outputs = mine.get("output") ?? [];
    if (outputs.length > 1) throw new ConfigError("--output may be given once");
    const store = await openStore(rest, io.env);
    const out = outputs[0] === undefined ? io.stdout : createWriteStream(outputs[0]);
    try {
      const write = async (line: string): Promise<void> => {
        // Back-pressure: wait for the destination to drain instead of buffering the namespace.
        if (!out.write(line)) await once(out, "drain");
      };
      let total = 0;
      for (const ns of namespaces) total += await exportNamespace(store, ns, write);
      if (out !== io.stdout) {
        out.end();
        await once(out, "finish");
      }
      io.stderr.write(`windlass-memory: exported ${total} threads\n`);
    } finally {
      await store.close();
    }
  });
}

/**
 * `windlass-memory import`: JSON Lines from `--input` or stdin into the
 * store (import.ts importLines). Returns 0 done, 1 failed (the line is
 * named), 2 bad usage.
 */
export async function runImport(argv: readonly string[], io: CommandIo): Promise<number> {
  return run(io, argv, IMPORT_USAGE, async () => {
    const { mine, rest } = splitFlags(argv, ["input"]);
    const inputs = mine.get("input") ?? [];
    if (inputs.length > 1) throw new ConfigError("--input may be given once");
    const store = await openStore(rest, io.env);
    try {
      const input = inputs[0] === undefined ? io.stdin : createReadStream(inputs[0]);
      const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
      const { imported, unchanged } = await importLines(store, lines);
      io.stderr.write(
        `windlass-memory: imported ${imported} threads, ${unchanged} already there unchanged\n`,
      );
    } finally {
      await store.close();
    }
  });
}

async function run(
  io: CommandIo,
  argv: readonly string[],
  usage: string,
  body: () => Promise<void>,
): Promise<number> {
  if (argv.includes("--help") || argv.includes("-h")) {
    io.stdout.write(`${usage}\n(server flags as in windlass-memory --help)\n`);
    return 0;
  }
  try {
    await body();
    return 0;
  } catch (err) {
    if (err instanceof ConfigError) {
      io.stderr.write(`windlass-memory: ${err.message}\n${usage}\n`);
      return 2;
    }
    io.stderr.write(`windlass-memory: ${(err as Error).message}\n`);
    return 1;
  }
}
