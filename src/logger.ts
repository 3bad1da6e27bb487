/**
 * Structured logs: one JSON object per line on stderr (`time`, `level`,
 * `msg`, then the fields).
 *
 * Callers never put tokens, API keys or message contents into `fields`.
 */
export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

export type LogFields = Readonly<Record<string, unknown>>;
export type LogLevel = "debug" | "info" | "warn" | "error";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/**
 * A Logger writing lines at `level` and above. Errors in fields are written
 * as name, message, stack and cause: logs are for operators, so the stack
 * belongs here (and never in a response).
 */
export function createJsonLogger(
  level: LogLevel = "info",
  write: (line: string) => void = (line) => {
    process.stderr.write(line);
  },
): Logger {
  const min = ORDER[level];
  const log = (lvl: LogLevel, fields: LogFields, message: string): void => {
    if (ORDER[lvl] < min) return;
    const entry: Record<string, unknown> = {
      time: new Date().toISOString(),
      level: lvl,
      msg: message,
    };
    for (const [key, value] of Object.entries(fields)) {
      entry[key] = value instanceof Error ? describeError(value) : value;
    }
    write(`${safeStringify(entry)}\n`);
  };
  return {
    debug: (message, fields = {}) => log("debug", fields, message),
    info: (message, fields = {}) => log("info", fields, message),
    warn: (message, fields = {}) => log("warn", fields, message),
    error: (message, fields = {}) => log("error", fields, message),
  };
}

/** A Logger that drops everything: for tests and callers that opt out of logs. */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
};

function describeError(err: Error): Record<string, unknown> {
  const described: Record<string, unknown> = { name: err.name, message: err.message };
  if (err.stack !== undefined) described.stack = err.stack;
  if (err.cause !== undefined) {
    described.cause = err.cause instanceof Error ? describeError(err.cause) : String(err.cause);
  }
  return described;
}

// BigInt (uint64 fields) and cycles would make JSON.stringify throw; a log
// line must never take the server down.
function safeStringify(value: unknown): string {
  const seen = new WeakSet<object>();
  return JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v === "bigint") return v.toString();
    if (typeof v === "object" && v !== null) {
      if (seen.has(v)) return "[circular]";
      seen.add(v);
    }
    return v;
  });
}
