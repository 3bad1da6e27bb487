/**
 * Structured JSON logs, one object per line on stderr. Callers pass fields,
 * never message contents, tokens or API keys.
 */
export type LogLevel = "debug" | "info" | "warn" | "error";

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export function createJsonLogger(
  level: LogLevel = "info",
  write: (line: string) => void = (line) => process.stderr.write(line),
): Logger {
  const min = ORDER[level];
  const emit = (lvl: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < min) return;
    write(
      `${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields, ...errorFields(fields) })}\n`,
    );
  };
  return {
    debug: (msg, f) => emit("debug", msg, f),
    info: (msg, f) => emit("info", msg, f),
    warn: (msg, f) => emit("warn", msg, f),
    error: (msg, f) => emit("error", msg, f),
  };
}

/** Errors do not survive JSON.stringify; keep their name, message and stack. */
function errorFields(fields?: Record<string, unknown>): Record<string, unknown> {
  const err = fields?.err;
  if (!(err instanceof Error)) return {};
  return { err: { name: err.name, message: err.message, stack: err.stack } };
}

/** A logger that drops everything, for tests. */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
};
