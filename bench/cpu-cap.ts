import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Caps processes at a share of one core, each in a cgroup of its own (the
 * cgroup v1 `cpu` controller at /sys/fs/cgroup/cpu, or cgroup v2 with `cpu`
 * enabled at /sys/fs/cgroup; root only). The cluster-add scenario uses it
 * (--cluster-redis-cpu-percent) so each redis-server, not the machine, is
 * what limits the Adds: on a machine with few cores the service processes
 * would otherwise use them all before one primary is busy, and the run
 * would say nothing about how the primaries scale.
 */

const PERIOD_US = 100_000;

export interface CpuCap {
  /** Moves process `pid` (all its threads) into a cgroup of its own, capped. */
  add(pid: number): void;
  /** Removes the cgroups; call once their processes have exited. */
  release(): void;
}

export function cpuCap(percent: number, label: string): CpuCap {
  const quota = Math.max(1000, Math.round((percent / 100) * PERIOD_US));
  const v1 = "/sys/fs/cgroup/cpu";
  const v2 = "/sys/fs/cgroup";
  const useV1 = existsSync(join(v1, "cpu.cfs_quota_us"));
  const v2Ready =
    !useV1 &&
    existsSync(join(v2, "cgroup.controllers")) &&
    readFileSync(join(v2, "cgroup.controllers"), "utf8").split(/\s+/).includes("cpu");
  if (!useV1 && !v2Ready) {
    throw new Error(
      "--cluster-redis-cpu-percent: no writable cgroup cpu controller (/sys/fs/cgroup/cpu or cgroup v2 with cpu); run as root on Linux, or leave it at 0",
    );
  }
  const made: string[] = [];
  return {
    add(pid) {
      const dir = join(useV1 ? v1 : v2, `windlass-bench-${label}-${pid}`);
      mkdirSync(dir, { recursive: true });
      made.push(dir);
      if (useV1) {
        writeFileSync(join(dir, "cpu.cfs_period_us"), String(PERIOD_US));
        writeFileSync(join(dir, "cpu.cfs_quota_us"), String(quota));
      } else {
        writeFileSync(join(dir, "cpu.max"), `${quota} ${PERIOD_US}`);
      }
      writeFileSync(join(dir, "cgroup.procs"), String(pid));
    },
    release() {
      for (const dir of made.splice(0)) {
        try {
          rmdirSync(dir);
        } catch {
          // Still holding a process (it did not exit): left for the machine to clean.
        }
      }
    },
  };
}
