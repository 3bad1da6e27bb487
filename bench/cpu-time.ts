import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";

/**
 * CPU time from /proc (Linux), in microseconds. Elsewhere these return
 * undefined and the report prints n/a.
 */

let clockTicks: number | undefined;

/** Clock ticks per second of /proc's CPU times (getconf CLK_TCK). */
export function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());
    } catch {
      clockTicks = Number.NaN;
    }
    // 100 is what Linux uses on every common architecture.
    if (!Number.isFinite(clockTicks) || clockTicks <= 0) clockTicks = 100;
  }
  return clockTicks;
}

function readProc(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
}

/** utime + stime of a process, all its threads, from /proc/PID/stat. */
export function processCpuMicros(pid: number): number | undefined {
  const stat = readProc(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // The command name (field 2) may hold spaces; the fields after it do not.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // fields[0] is field 3 (state), so utime (14) and stime (15) are 11 and 12.
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) return undefined;
  return ((utime + stime) * 1_000_000) / ticksPerSecond();
}

/**
 * CPU time the whole machine has spent busy (every state but idle and
 * iowait), summed over all CPUs: with the bench's own processes subtracted,
 * it shows how much else was running during a measurement.
 */
export function machineBusyMicros(): number | undefined {
  const line = readProc("/proc/stat")?.split("\n", 1)[0];
  if (line === undefined || !line.startsWith("cpu ")) return undefined;
  // user nice system idle iowait irq softirq steal (guest time is inside user).
  const [user, nice, system, , , irq, softirq, steal] = line
    .slice(4)
    .trim()
    .split(/\s+/)
    .map(Number);
  const busy = [user, nice, system, irq, softirq, steal].reduce<number>(
    (total, v) => total + (v ?? 0),
    0,
  );
  return Number.isFinite(busy) ? (busy * 1_000_000) / ticksPerSecond() : undefined;
}

/** Of one thread, from its schedstat: time on a CPU, and time runnable but waiting for one. */
export interface ThreadSchedMicros {
  readonly onCpu: number;
  readonly waiting: number;
}

/**
 * /proc/PID/task/TID/schedstat's first two fields (nanoseconds): time spent
 * on a CPU and time spent runnable on a run queue, waiting for one.
 */
export function parseSchedstat(text: string): ThreadSchedMicros | undefined {
  const [onCpu, waiting] = text.trim().split(/\s+/).map(Number);
  if (onCpu === undefined || waiting === undefined) return undefined;
  if (!Number.isFinite(onCpu) || !Number.isFinite(waiting)) return undefined;
  return { onCpu: onCpu / 1000, waiting: waiting / 1000 };
}

/**
 * The main thread's (TID = PID) scheduling of a process. A node server's
 * event loop runs there: the time it neither ran nor waited for a CPU, it
 * slept with nothing to do (an idle loop waiting on its sockets).
 */
export function mainThreadSchedMicros(pid: number): ThreadSchedMicros | undefined {
  const text = readProc(`/proc/${pid}/task/${pid}/schedstat`);
  return text === undefined ? undefined : parseSchedstat(text);
}
