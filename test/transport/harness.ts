import type { Logger } from "../../src/logger.js";
import type { MemoryServiceCore } from "../../src/service/context.js";
import {
  type RunningServers,
  type StartServersOptions,
  startServers,
} from "../../src/transport/servers.js";

/** One captured log line. */
export interface LogEntry {
  readonly level: "debug" | "info" | "warn" | "error";
  readonly message: string;
  readonly fields: Record<string, unknown>;
}

/** A Logger that keeps what it is given, for assertions on logs. */
export function capturingLogger(): { logger: Logger; entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  return {
    entries,
    logger: {
      debug: (message, fields = {}) => entries.push({ level: "debug", message, fields }),
      info: (message, fields = {}) => entries.push({ level: "info", message, fields }),
      warn: (message, fields = {}) => entries.push({ level: "warn", message, fields }),
      error: (message, fields = {}) => entries.push({ level: "error", message, fields }),
    },
  };
}

export interface TestServers extends RunningServers {
  /** "127.0.0.1:<grpcPort>" */
  readonly grpcAddress: string;
  /** "http://127.0.0.1:<httpPort>" */
  readonly httpUrl: string;
  readonly logs: LogEntry[];
}

/**
 * Starts both servers on 127.0.0.1, ports 0, with a capturing logger. The
 * caller shuts them down in its teardown (`servers.shutdown(0)`).
 */
export async function startTestServers(
  core: MemoryServiceCore,
  overrides: Partial<Omit<StartServersOptions, "core" | "logger">> = {},
): Promise<TestServers> {
  const { logger, entries } = capturingLogger();
  const running = await startServers({
    core,
    host: "127.0.0.1",
    grpcPort: 0,
    httpPort: 0,
    logger,
    ...overrides,
  });
  const scheme = overrides.tls === undefined ? "http" : "https";
  return {
    ...running,
    grpcAddress: `127.0.0.1:${running.grpcPort}`,
    httpUrl: `${scheme}://127.0.0.1:${running.httpPort}`,
    logs: entries,
  };
}
