import type { Reporter, TestModule } from "vitest/node";

/**
 * Prints the plain closing line "N passed, N failed, N skipped" after a run,
 * which CI reads to know how many tests ran (vitest's own summary is styled
 * for people). Under CI=true a skipped test also fails the run: nothing may be
 * skipped silently there.
 */
export default class ClosingLineReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const m of testModules) {
      for (const t of m.children.allTests()) {
        const state = t.result().state;
        if (state === "passed") passed++;
        else if (state === "failed") failed++;
        else skipped++;
      }
    }
    process.stdout.write(`\n${passed} passed, ${failed} failed, ${skipped} skipped\n`);
    if (process.env.CI === "true" && skipped > 0) {
      process.stdout.write("CI=true: skipped tests are not allowed\n");
      process.exitCode = 1;
    }
  }
}
