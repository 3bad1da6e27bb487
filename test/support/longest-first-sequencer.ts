import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The test files that take longest, longest first, as measured by
 * `CI=true bash .ci/run` on a 2-core machine (seconds, in three runs of
 * stop 34).
 * Vitest starts the largest files first when it has no timings (a fresh
 * clone never has), but the two longest files are the shortest: they run
 * shared suites over every backend and every conformance case. Started
 * last, they left one worker running alone for minutes at the end of the
 * run, and CI has a 30-minute budget. A file missing from this list is only
 * scheduled by size; one no longer here is ignored.
 */
export const LONGEST_FILES: readonly string[] = [
  "test/store/contract.test.ts", // 206-233 s
  "test/conformance/conformance.test.ts", // 138-152 s
  "test/store/sqlite-store.test.ts", // 51-58 s
  "test/integration/replicas.test.ts", // 44-51 s
  "test/store/redis-cluster-store.test.ts", // 45-49 s
  "test/faults/postgres-fork-crash.test.ts", // 34-40 s
  "test/integration/command.test.ts", // 35-36 s
  "test/faults/redis-sentinel-contract.test.ts", // 35-37 s
];

/** The rank of a file in LONGEST_FILES, or the list's length when it is not there. */
export function longestRank(path: string): number {
  const normalized = path.replaceAll("\\", "/");
  const rank = LONGEST_FILES.findIndex((f) => normalized.endsWith(`/${f}`) || normalized === f);
  return rank === -1 ? LONGEST_FILES.length : rank;
}

/**
 * Vitest's own order (BaseSequencer), with the files of LONGEST_FILES moved
 * to the front of their group and project (which still run in vitest's order).
 */
export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const byVitest = await super.sort(files);
    const group = (f: TestSpecification): number =>
      f.project === undefined ? 0 : f.project.config.sequence.groupOrder;
    const project = (f: TestSpecification): string => f.project?.name ?? "";
    // Array.prototype.sort is stable: files that compare equal keep vitest's order.
    return byVitest.sort(
      (a, b) =>
        group(a) - group(b) ||
        // As vitest compares project names.
        (project(a) === project(b) ? 0 : project(a) < project(b) ? -1 : 1) ||
        longestRank(a.moduleId) - longestRank(b.moduleId),
    );
  }
}
