import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { startApp } from "./app.js";
import { ConfigError, helpText, loadConfig } from "./config.js";
import { createJsonLogger } from "./logger.js";
import { runExport, runImport } from "./portability/command.js";
import { startTracing } from "./tracing.js";

/**
 * The `windlass-memory` command. Returns the process exit status: 0 after a
 * clean shutdown, 2 for bad usage or configuration (one line on stderr).
 */
export async function main(argv: readonly string[]): Promise<number> {
  const [command = "serve", ...rest] = argv;
  if (command === "--help" || command === "-h" || command === "help") {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  if (command === "--version" || (command === "serve" && rest.includes("--version"))) {
    process.stdout.write(`windlass-memory ${packageVersion()}\n`);
    return 0;
  }
  if (command === "export" || command === "import") {
    const io = {
      stdin: process.stdin,
      stdout: process.stdout,
      stderr: process.stderr,
      env: process.env,
    };
    return command === "export" ? runExport(rest, io) : runImport(rest, io);
  }
  if (command !== "serve") {
    process.stderr.write(`windlass-memory: unknown command "${command}" (try --help)\n`);
    return 2;
  }
  if (rest.includes("--help") || rest.includes("-h")) {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  return serve(rest);
}

/** `serve`: runs the server until SIGTERM or SIGINT, then stops it gracefully. */
async function serve(args: readonly string[]): Promise<number> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig(args, process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`windlass-memory: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const logger = createJsonLogger(config.logLevel);
  const tracing = await startTracing(process.env, { threadIds: config.traceThreadIds });
  if (tracing.enabled) {
    logger.info("tracing on", {
      exporter: process.env.OTEL_TRACES_EXPORTER ?? "otlp",
      threadIds: config.traceThreadIds,
    });
  }
  let app: Awaited<ReturnType<typeof startApp>>;
  try {
    app = await startApp(config, logger);
  } catch (err) {
    await tracing.shutdown();
    if (err instanceof ConfigError) {
      process.stderr.write(`windlass-memory: ${err.message}\n`);
      return 2;
    }
    process.stderr.write(`windlass-memory: could not start: ${(err as Error).message}\n`);
    return 1;
  }
  // Handlers go in before the listening line: a supervisor may signal as soon as it sees it.
  const stopRequested = stopSignal(logger);
  process.stdout.write(
    `windlass-memory listening: gRPC ${config.host}:${app.grpcPort}, ` +
      `Connect/gRPC-Web/JSON ${config.tls === undefined ? "http" : "https"}://${config.host}:${app.httpPort} ` +
      `(store ${config.store.kind}, summariser ${config.summarizer})\n`,
  );
  await stopRequested;
  await app.stop();
  // Last: the spans of calls that finished during the stop get exported too.
  await tracing.shutdown().catch((err: unknown) => {
    logger.warn("flushing traces failed", { err });
  });
  logger.info("stopped", {});
  return 0;
}

/**
 * Resolves at the first SIGTERM or SIGINT. The handlers stay until the
 * process exits (they do not keep it alive): a signal sent to the process
 * group reaches this process twice when `npm start` forwards its copy, and
 * the second one must not kill a shutdown in progress (Node's default
 * action), or npm would re-raise it on itself instead of exiting 0.
 */
function stopSignal(logger: ReturnType<typeof createJsonLogger>): Promise<void> {
  let stopping = false;
  return new Promise<void>((resolve) => {
    const onSignal = (signal: NodeJS.Signals): void => {
      logger.info(
        stopping ? "signal received; already shutting down" : "signal received; shutting down",
        { signal },
      );
      stopping = true;
      resolve();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  });
}

/**
 * The version in the project's package.json, found by walking up from this
 * module: it runs from src/ under the tests and from dist/src/ when built.
 */
function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
        name?: unknown;
        version?: unknown;
      };
      if (pkg.name === "windlass-memory" && typeof pkg.version === "string") return pkg.version;
    } catch {
      // No package.json here (or not ours): look one level up.
    }
    const parent = dirname(dir);
    if (parent === dir) return "unknown";
    dir = parent;
  }
}
