import { startApp } from "./app.js";
import { ConfigError, helpText, loadConfig } from "./config.js";
import { createJsonLogger } from "./logger.js";

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
  if (command !== "serve") {
    process.stderr.write(`windlass-memory: unknown command "${command}" (try --help)\n`);
    return 2;
  }
  if (rest.includes("--help") || rest.includes("-h")) {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig(rest, process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`windlass-memory: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const logger = createJsonLogger(config.logLevel);
  let app: Awaited<ReturnType<typeof startApp>>;
  try {
    app = await startApp(config, logger);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`windlass-memory: ${err.message}\n`);
      return 2;
    }
    process.stderr.write(`windlass-memory: could not start: ${(err as Error).message}\n`);
    return 1;
  }
  // Handlers go in before the listening line: a supervisor may signal as soon as it sees it.
  const stopRequested = new Promise<void>((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      logger.info("signal received; shutting down", { signal });
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
      resolve();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  });
  process.stdout.write(
    `windlass-memory listening: gRPC ${config.host}:${app.grpcPort}, ` +
      `Connect/gRPC-Web/JSON http://${config.host}:${app.httpPort} ` +
      `(store ${config.store.kind}, summariser ${config.summarizer})\n`,
  );
  await stopRequested;
  await app.stop();
  logger.info("stopped", {});
  return 0;
}
