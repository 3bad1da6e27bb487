/**
 * The TypeScript interpreter of the conformance cases (test/conformance/cases,
 * format in test/conformance/README.md): loading, `$ref` substitution, the
 * matching rule and the step loop, over a client and a fake model given as
 * small interfaces so that any transport can run the same cases. The Python
 * and Go runners implement the same rules; keep the three in step.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

export interface Case {
  name: string;
  description: string;
  serverFlags: string[];
  /** Environment variables of the case's server, on top of the runner's own. */
  serverEnv: Record<string, string>;
  /** The bearer token of every call and watch step without its own `token`. */
  token: string | undefined;
  steps: JsonObject[];
}

/** The outcome of a unary call or of reading a stream: a message as proto3 JSON, or a status. */
export type Outcome =
  | { ok: true; value: JsonObject }
  | { ok: false; code: string; message: string };

export type StreamRead =
  | { kind: "event"; event: JsonObject }
  | { kind: "error"; code: string; message: string }
  | { kind: "ended" }
  | { kind: "timeout" };

export interface ConformanceStream {
  next(timeoutMs: number): Promise<StreamRead>;
  cancel(): void;
}

export type UnaryMethod = "Add" | "Get" | "Clear" | "ListThreads" | "Rewind" | "Fork";

/** Per-call options: the deadline, and the bearer token sent as `authorization: Bearer <token>`. */
export interface CallOptions {
  timeoutMs?: number;
  token?: string;
}

/** A MemoryService client that takes and returns proto3 JSON. */
export interface ConformanceClient {
  unary(method: UnaryMethod, request: JsonObject, opts?: CallOptions): Promise<Outcome>;
  watch(request: JsonObject, opts?: CallOptions): ConformanceStream;
}

/** The fake model server of one windlass-memory server. */
export interface ModelControl {
  /** Empties the script and starts the request count (and "summary #N") again from 0. */
  reset(): Promise<void>;
  push(steps: JsonObject[]): void;
  /** Chat completion requests since the last reset. */
  requests(): number;
  /** Scripted steps not consumed yet. */
  pending(): number;
  /** Lets held replies go: those waiting now and those taken later in the case. */
  release(): void;
}

const HERE = dirname(fileURLToPath(import.meta.url));
export const CASES_DIR = join(HERE, "cases");
export const REPO_ROOT = join(HERE, "..", "..");

/** Every case of every file in cases/, in file-name then file order. */
export function loadCases(dir = CASES_DIR): Case[] {
  const out: Case[] = [];
  const names = new Set<string>();
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()) {
    const doc = JSON.parse(readFileSync(join(dir, file), "utf8")) as { cases?: unknown };
    if (!Array.isArray(doc.cases)) throw new Error(`${file}: no "cases" array`);
    for (const raw of doc.cases as JsonObject[]) {
      const name = raw.name;
      if (typeof name !== "string" || !/^[a-z0-9-]+$/.test(name)) {
        throw new Error(`${file}: bad case name ${JSON.stringify(name)}`);
      }
      if (names.has(name)) throw new Error(`${file}: duplicate case name ${name}`);
      names.add(name);
      const flags = raw.serverFlags ?? [];
      if (!Array.isArray(flags) || !flags.every((f) => typeof f === "string")) {
        throw new Error(`${name}: serverFlags must be a list of strings`);
      }
      const env = raw.serverEnv ?? {};
      if (!isObject(env) || !Object.values(env).every((v) => typeof v === "string")) {
        throw new Error(`${name}: serverEnv must be an object of strings`);
      }
      const token = raw.token;
      if (token !== undefined && typeof token !== "string") {
        throw new Error(`${name}: token must be a string`);
      }
      if (!Array.isArray(raw.steps)) throw new Error(`${name}: no "steps" list`);
      out.push({
        name,
        description: typeof raw.description === "string" ? raw.description : "",
        serverFlags: flags as string[],
        serverEnv: env as Record<string, string>,
        token,
        steps: raw.steps as JsonObject[],
      });
    }
  }
  return out;
}

/**
 * The key servers are grouped by: cases with equal flags and equal
 * environments share a server. JSON of [flags, env with sorted keys].
 */
export const serverKey = (c: Case): string =>
  JSON.stringify([
    c.serverFlags,
    Object.fromEntries(
      Object.entries(c.serverEnv).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
    ),
  ]);

/**
 * The tokens the reset before a case sends `Clear {all: true}` with: one
 * token per namespace of the server's WINDLASS_AUTH_TOKENS (first token of
 * each namespace), or a single call without a token when auth is off.
 */
export function resetTokens(env: Record<string, string>): (string | undefined)[] {
  const raw = env.WINDLASS_AUTH_TOKENS;
  if (raw === undefined || raw === "") return [undefined];
  const byNamespace = new Map<string, string>();
  for (const pair of raw.split(",")) {
    const eq = pair.indexOf("=");
    const token = pair.slice(0, eq).trim();
    const namespace = pair.slice(eq + 1).trim();
    if (!byNamespace.has(namespace)) byNamespace.set(namespace, token);
  }
  return [...byNamespace.values()];
}

const isObject = (v: Json | undefined): v is JsonObject =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * match(expected, actual) of the README's matching rule: undefined when it
 * matches, else what differs and where. `actual` undefined is an absent field.
 */
export function match(expected: Json, actual: Json | undefined, path = "$"): string | undefined {
  const show = (v: Json | undefined) => (v === undefined ? "absent" : JSON.stringify(v));
  if (expected === null) {
    return actual === undefined || actual === null
      ? undefined
      : `${path}: expected absent, got ${show(actual)}`;
  }
  if (isObject(expected)) {
    const keys = Object.keys(expected);
    const op = keys.length === 1 && keys[0]?.startsWith("$") ? keys[0] : undefined;
    if (op === "$contains") {
      const text = expected[op];
      return typeof actual === "string" && typeof text === "string" && actual.includes(text)
        ? undefined
        : `${path}: expected a string containing ${show(text)}, got ${show(actual)}`;
    }
    if (op === "$nonEmpty") {
      const empty =
        actual === undefined ||
        actual === null ||
        actual === "" ||
        (Array.isArray(actual) && actual.length === 0) ||
        (isObject(actual) && Object.keys(actual).length === 0);
      return empty ? `${path}: expected a non-empty value, got ${show(actual)}` : undefined;
    }
    if (op === "$not") {
      const operand = expected[op] ?? null;
      return match(operand, actual, path) === undefined
        ? `${path}: expected anything but ${show(operand)}, got ${show(actual)}`
        : undefined;
    }
    if (op !== undefined) return `${path}: unknown operator ${op}`;
    if (!isObject(actual)) return `${path}: expected an object, got ${show(actual)}`;
    for (const key of keys) {
      const sub = expected[key];
      if (sub === undefined) continue;
      const diff = match(sub, actual[key], `${path}.${key}`);
      if (diff !== undefined) return diff;
    }
    return undefined;
  }
  if (Array.isArray(expected)) {
    const list = actual === undefined ? [] : actual;
    if (!Array.isArray(list)) return `${path}: expected a list, got ${show(actual)}`;
    if (list.length !== expected.length) {
      return `${path}: expected ${expected.length} elements, got ${list.length}: ${show(list)}`;
    }
    for (const [i, e] of expected.entries()) {
      const diff = match(e, list[i], `${path}[${i}]`);
      if (diff !== undefined) return diff;
    }
    return undefined;
  }
  if (actual === undefined) {
    return expected === false || expected === 0 || expected === "0" || expected === ""
      ? undefined
      : `${path}: expected ${show(expected)}, got absent`;
  }
  if (isNumeric(expected) && isNumeric(actual)) {
    return String(expected) === String(actual)
      ? undefined
      : `${path}: expected ${show(expected)}, got ${show(actual)}`;
  }
  return expected === actual
    ? undefined
    : `${path}: expected ${show(expected)}, got ${show(actual)}`;
}

const isNumeric = (v: Json | undefined): v is number | string =>
  (typeof v === "number" && Number.isInteger(v)) || (typeof v === "string" && /^\d+$/.test(v));

/** The request with every {"$ref": "name.path"} replaced by the saved value. */
export function resolveRefs(value: Json, saved: Map<string, Json>): Json {
  if (Array.isArray(value)) return value.map((v) => resolveRefs(v, saved));
  if (!isObject(value)) return value;
  const ref = value.$ref;
  if (typeof ref === "string" && Object.keys(value).length === 1) {
    const [name = "", ...path] = ref.split(".");
    let cur: Json | undefined = saved.get(name);
    if (cur === undefined) throw new Error(`$ref ${ref}: nothing saved as ${name}`);
    for (const part of path) {
      cur = Array.isArray(cur) ? cur[Number(part)] : isObject(cur) ? cur[part] : undefined;
      if (cur === undefined) throw new Error(`$ref ${ref}: ${part} is absent`);
    }
    return cur;
  }
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolveRefs(v, saved)]));
}

/** Checks an error outcome against {"code", "field"?, "messageContains"?}. */
export function matchError(
  expected: JsonObject,
  code: string,
  message: string,
): string | undefined {
  if (code !== expected.code) {
    return `expected ${String(expected.code)}, got ${code}: ${message}`;
  }
  const field = expected.field;
  if (typeof field === "string" && !message.startsWith(`${field}:`)) {
    return `expected the message to start with "${field}:", got ${JSON.stringify(message)}`;
  }
  const contains = expected.messageContains;
  if (Array.isArray(contains)) {
    for (const text of contains) {
      if (typeof text === "string" && !message.includes(text)) {
        return `expected the message to contain ${JSON.stringify(text)}, got ${JSON.stringify(message)}`;
      }
    }
  }
  return undefined;
}

function checkOutcome(expect: Json | undefined, outcome: Outcome): string | undefined {
  if (isObject(expect) && isObject(expect.error)) {
    return outcome.ok
      ? `expected ${String(expect.error.code)}, got a response ${JSON.stringify(outcome.value)}`
      : matchError(expect.error, outcome.code, outcome.message);
  }
  if (!outcome.ok) return `expected a response, got ${outcome.code}: ${outcome.message}`;
  if (isObject(expect) && expect.response !== undefined)
    return match(expect.response, outcome.value);
  return undefined;
}

const UNARY = new Set<string>(["Add", "Get", "Clear", "ListThreads", "Rewind", "Fork"]);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const num = (v: Json | undefined, dflt: number): number => (typeof v === "number" ? v : dflt);

/**
 * Runs one case: steps in order, throwing an Error that names the step at the
 * first failure. Streams left open are cancelled either way.
 */
export async function runCase(
  c: Case,
  client: ConformanceClient,
  model: ModelControl,
): Promise<void> {
  const saved = new Map<string, Json>();
  const streams = new Map<string, ConformanceStream>();
  await model.reset();
  for (const token of resetTokens(c.serverEnv)) {
    const cleared = await client.unary(
      "Clear",
      { all: true },
      token === undefined ? {} : { token },
    );
    if (!cleared.ok)
      throw new Error(`Clear all before the case: ${cleared.code}: ${cleared.message}`);
  }
  try {
    for (const [i, step] of c.steps.entries()) {
      const fail = (why: string): never => {
        throw new Error(`${c.name} step ${i + 1} ${JSON.stringify(step).slice(0, 160)}: ${why}`);
      };
      try {
        await runStep(step, fail);
      } catch (err) {
        if (err instanceof Error && err.message.startsWith(`${c.name} step`)) throw err;
        fail(String(err));
      }
    }
    if (model.pending() > 0) {
      throw new Error(`${c.name}: ${model.pending()} scripted model steps were never consumed`);
    }
  } finally {
    for (const s of streams.values()) s.cancel();
  }

  /** The call options of a call or watch step: its deadline and token (`"token": null`: none). */
  function callOptions(step: JsonObject, fail: (why: string) => never): CallOptions {
    const opts: CallOptions = {};
    if (typeof step.timeoutMs === "number") opts.timeoutMs = step.timeoutMs;
    const token = step.token === undefined ? c.token : step.token;
    if (typeof token === "string") opts.token = token;
    else if (token !== null && token !== undefined) fail("token must be a string or null");
    return opts;
  }

  async function runStep(step: JsonObject, fail: (why: string) => never): Promise<void> {
    if (typeof step.call === "string") {
      if (!UNARY.has(step.call)) fail(`unknown call ${step.call}`);
      const method = step.call as UnaryMethod;
      const request = resolveRefs(step.request ?? {}, saved);
      if (!isObject(request)) return fail("request must be an object");
      const opts = callOptions(step, fail);
      const repeat = num(step.repeat, 1);
      for (let n = 0; n < repeat; n++) {
        const pollUntil = Date.now() + num(step.pollMs, 0);
        for (;;) {
          const started = Date.now();
          const outcome = await client.unary(method, request, opts);
          const elapsed = Date.now() - started;
          if (typeof step.maxElapsedMs === "number" && elapsed > step.maxElapsedMs) {
            fail(`took ${elapsed} ms, more than ${step.maxElapsedMs}`);
          }
          const diff = checkOutcome(step.expect, outcome);
          if (diff === undefined) {
            if (typeof step.as === "string" && outcome.ok) saved.set(step.as, outcome.value);
            break;
          }
          if (Date.now() >= pollUntil) fail(diff);
          await sleep(50);
        }
      }
      return;
    }
    if (typeof step.watch === "string") {
      const request = resolveRefs(step.request ?? {}, saved);
      if (!isObject(request)) return fail("request must be an object");
      const opts = callOptions(step, fail);
      streams.get(step.watch)?.cancel();
      streams.set(step.watch, client.watch(request, opts));
      return;
    }
    if (typeof step.next === "string") {
      const stream = streams.get(step.next) ?? fail(`no stream named ${step.next}`);
      const withinMs = num(step.withinMs, 5000);
      if (isObject(step.error)) {
        const until = Date.now() + withinMs;
        for (;;) {
          const read = await stream.next(Math.max(1, until - Date.now()));
          if (read.kind === "error") {
            const diff = matchError(step.error, read.code, read.message);
            return diff === undefined ? undefined : fail(diff);
          }
          if (read.kind === "event" && isObject(read.event.progress)) continue;
          fail(`expected ${String(step.error.code)}, got ${describeRead(read)}`);
        }
      }
      const events = Array.isArray(step.events)
        ? resolveRefs(step.events, saved)
        : fail("next needs events or error");
      if (!Array.isArray(events)) return fail("events must be a list");
      const names = Array.isArray(step.as) ? step.as : [];
      for (const [k, expected] of events.entries()) {
        const wantsProgress = isObject(expected) && expected.progress !== undefined;
        const until = Date.now() + withinMs;
        let skipped = "";
        for (;;) {
          const read = await stream.next(Math.max(1, until - Date.now()));
          if (read.kind !== "event")
            fail(`event ${k + 1}: expected an event, got ${describeRead(read)}${skipped}`);
          const event = read.kind === "event" ? read.event : {};
          const isProgress = isObject(event.progress);
          if (!wantsProgress && isProgress) continue;
          const diff = match(expected, event);
          // A Progress that does not match an expected Progress is skipped:
          // the next one comes after the interval, and it is a different one
          // only when the stream has moved on.
          if (diff !== undefined && wantsProgress && isProgress) {
            skipped = ` (after skipping a Progress: ${diff})`;
            continue;
          }
          if (diff !== undefined) fail(`event ${k + 1}: ${diff} in ${JSON.stringify(event)}`);
          const name = names[k];
          if (typeof name === "string") saved.set(name, event);
          break;
        }
      }
      return;
    }
    if (typeof step.cancel === "string") {
      const stream = streams.get(step.cancel) ?? fail(`no stream named ${step.cancel}`);
      stream.cancel();
      streams.delete(step.cancel);
      return;
    }
    if (Array.isArray(step.model)) {
      model.push(step.model.filter(isObject));
      return;
    }
    if (step.modelRelease === true) {
      model.release();
      return;
    }
    if (typeof step.modelRequests === "number") {
      const got = model.requests();
      if (got !== step.modelRequests) {
        fail(`expected ${step.modelRequests} model requests, got ${got}`);
      }
      return;
    }
    fail("unknown step");
  }
}

function describeRead(read: StreamRead): string {
  switch (read.kind) {
    case "event":
      return `the event ${JSON.stringify(read.event)}`;
    case "error":
      return `${read.code}: ${read.message}`;
    case "ended":
      return "the end of the stream";
    case "timeout":
      return "nothing in time";
  }
}

/** Every store the runners know, in the order they run: CONFORMANCE_STORES' default. */
export const CONFORMANCE_STORES = ["memory", "sqlite", "redis", "postgres", "redis-cluster"];

/** CONFORMANCE_STORES, default all five (each runner knows the same five). */
export function storesFromEnv(env: NodeJS.ProcessEnv = process.env): string[] {
  const raw = env.CONFORMANCE_STORES || CONFORMANCE_STORES.join(",");
  const stores = raw
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  for (const s of stores) {
    if (!CONFORMANCE_STORES.includes(s)) {
      throw new Error(`CONFORMANCE_STORES: unknown store ${s} (${CONFORMANCE_STORES.join(", ")})`);
    }
  }
  return stores;
}
