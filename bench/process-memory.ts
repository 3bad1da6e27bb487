import { readFileSync } from "node:fs";

/**
 * What a server process holds in memory, read from outside: its resident set
 * from /proc, and, for a node server started with `--inspect=127.0.0.1:0`,
 * a forced full garbage collection and `process.memoryUsage()` through the
 * inspector protocol, so that figures are not garbage waiting for the next
 * collection. Nothing in the server is changed for it.
 */

/** A "NAME:  N kB" line of a /proc file, in bytes; undefined when the file or the line is missing. */
function procKilobytes(file: string, name: "VmRSS" | "Pss"): number | undefined {
  try {
    const kb = new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, "m").exec(readFileSync(file, "utf8"))?.[1];
    return kb === undefined ? undefined : Number(kb) * 1024;
  } catch {
    return undefined;
  }
}

/** VmRSS of a process in bytes, from /proc/PID/status; undefined without /proc. */
export function residentBytes(pid: number): number | undefined {
  return procKilobytes(`/proc/${pid}/status`, "VmRSS");
}

/**
 * Pss of a process in bytes, from /proc/PID/smaps_rollup: its resident
 * pages with each shared page divided among the processes mapping it, so
 * the Pss of PostgreSQL's processes add up to what they hold together.
 */
export function proportionalBytes(pid: number): number | undefined {
  return procKilobytes(`/proc/${pid}/smaps_rollup`, "Pss");
}

/** A resident set by kind (RssAnon, RssFile, RssShmem of /proc/PID/status), in bytes. */
export interface ResidentParts {
  readonly anon: number;
  readonly file: number;
  readonly shmem: number;
}

/** The parts of a process's resident set; undefined without /proc. */
export function residentParts(pid: number): ResidentParts | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (name: string): number =>
      Number(new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, "m").exec(status)?.[1] ?? 0) * 1024;
    return { anon: kb("RssAnon"), file: kb("RssFile"), shmem: kb("RssShmem") };
  } catch {
    return undefined;
  }
}

/** The node inspector's WebSocket URL in a process's stderr, as node prints it at start. */
export function inspectorUrl(stderr: string): string | undefined {
  return /Debugger listening on (ws:\/\/127\.0\.0\.1:\d+\/[\w-]+)/.exec(stderr)?.[1];
}

export interface NodeMemory {
  readonly rss: number;
  readonly heapTotal: number;
  readonly heapUsed: number;
  readonly external: number;
  readonly arrayBuffers: number;
}

const INSPECTOR_TIMEOUT_MS = 30_000;

/** A connection to a node process's inspector. */
export interface Inspector {
  /** Runs two full collections (the second frees what finalizers of the first released). */
  collectGarbage(): Promise<void>;
  memoryUsage(): Promise<NodeMemory>;
  close(): void;
}

/** Connects to `url` (needs the WebSocket global: node 22 or later). */
export async function openInspector(url: string): Promise<Inspector> {
  const WebSocketClass = (globalThis as { WebSocket?: typeof WebSocket }).WebSocket;
  if (WebSocketClass === undefined) {
    throw new Error("this node has no WebSocket global: run the bench on node 22 or later");
  }
  const socket = new WebSocketClass(url);
  let nextId = 1;
  const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  socket.addEventListener("message", (event: MessageEvent) => {
    const reply = JSON.parse(String(event.data)) as {
      id?: number;
      result?: unknown;
      error?: { message: string };
    };
    if (reply.id === undefined) return;
    const w = waiting.get(reply.id);
    waiting.delete(reply.id);
    if (reply.error !== undefined) w?.reject(new Error(`inspector: ${reply.error.message}`));
    else w?.resolve(reply.result);
  });
  await new Promise<void>((resolve, reject) => {
    socket.addEventListener("open", () => resolve(), { once: true });
    socket.addEventListener(
      "error",
      () => reject(new Error(`inspector: cannot connect to ${url}`)),
      {
        once: true,
      },
    );
  });
  const send = (method: string, params: Record<string, unknown> = {}): Promise<unknown> => {
    const id = nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error(`inspector: ${method} took over ${INSPECTOR_TIMEOUT_MS} ms`));
      }, INSPECTOR_TIMEOUT_MS);
      waiting.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      socket.send(JSON.stringify({ id, method, params }));
    });
  };
  return {
    async collectGarbage() {
      await send("HeapProfiler.collectGarbage");
      await send("HeapProfiler.collectGarbage");
    },
    async memoryUsage() {
      const result = (await send("Runtime.evaluate", {
        expression: "JSON.stringify(process.memoryUsage())",
        returnByValue: true,
      })) as { result?: { value?: string } };
      const text = result.result?.value;
      if (text === undefined) throw new Error("inspector: process.memoryUsage() gave nothing");
      return JSON.parse(text) as NodeMemory;
    },
    close() {
      socket.close();
    },
  };
}

/** Memory of a server after a forced collection, with its resident set from /proc. */
export interface MemorySample {
  readonly rss: number;
  readonly heapUsed: number;
  /** What V8 holds for its heap, used or not. */
  readonly heapTotal: number;
  readonly external: number;
  readonly parts: ResidentParts | undefined;
}

export async function sampleAfterGc(inspector: Inspector, pid: number): Promise<MemorySample> {
  await inspector.collectGarbage();
  const usage = await inspector.memoryUsage();
  return {
    rss: residentBytes(pid) ?? usage.rss,
    heapUsed: usage.heapUsed,
    heapTotal: usage.heapTotal,
    external: usage.external,
    parts: residentParts(pid),
  };
}

export const mib = (bytes: number): string => (bytes / (1024 * 1024)).toFixed(1);
