import { type DestinationStream, pino } from "pino";

/**
 * Structured logs: one JSON object per line on stderr (`level`, `time`,
 * `msg`, then the fields), written by pino.
 *
 * Callers never put tokens, API keys or message contents into `fields`; as a
 * second line of defence, authorization headers, API keys, tokens and
 * passwords are redacted wherever pino's redaction paths reach them (a field
 * of that name, or one level down, e.g. `headers.authorization`).
 */
export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

export type LogFields = Readonly<Record<string, unknown>>;
export type LogLevel = "debug" | "info" | "warn" | "error";

/** What replaces a redacted value. */
export const REDACTED = "[redacted]";

const SECRET_KEYS = [
  "authorization",
  "Authorization",
  "proxy-authorization",
  "apiKey",
  "api_key",
  "api-key",
  "x-api-key",
  "openaiApiKey",
  "token",
  "tokens",
  "authTokens",
  "password",
  "secret",
];
// fast-redact paths: top level, and one level down (`headers.authorization`).
const REDACT_PATHS = SECRET_KEYS.flatMap((k) => {
  const key = /^[A-Za-z_$][\w$]*$/.test(k) ? k : `["${k}"]`;
  return [key, key.startsWith("[") ? `*${key}` : `*.${key}`];
});

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
  const destination: DestinationStream = { write };
  const log = pino(
    {
      level,
      base: null,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: REDACT_PATHS, censor: REDACTED },
      // Errors are described by fieldsOf under any key; pino's own `err`
      // serializer would fold the cause into the message.
      serializers: { err: (value: unknown) => value },
    },
    destination,
  );
  const fieldsOf = (fields: LogFields): Record<string, unknown> => {
    const entry: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(fields)) {
      entry[key] =
        value instanceof Error
          ? describeError(value)
          : typeof value === "bigint"
            ? value.toString()
            : value;
    }
    return entry;
  };
  const emit = (lvl: LogLevel, message: string, fields: LogFields): void => {
    if (log.isLevelEnabled(lvl)) log[lvl](fieldsOf(fields), message);
  };
  return {
    debug: (message, fields = {}) => emit("debug", message, fields),
    info: (message, fields = {}) => emit("info", message, fields),
    warn: (message, fields = {}) => emit("warn", message, fields),
    error: (message, fields = {}) => emit("error", message, fields),
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
