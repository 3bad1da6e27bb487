import { defineConfig } from "vitest/config";
import LongestFirstSequencer from "./test/support/longest-first-sequencer.js";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Runs last, after the client libraries are built: vitest.readme.config.ts.
    exclude: ["test/readme/readme-examples.test.ts", "**/node_modules/**"],
    testTimeout: 20_000,
    hookTimeout: 30_000,
    // Integration tests start servers on free ports; two workers fit 2 cores.
    maxWorkers: 2,
    // The longest files first, so no worker is left running one alone at the end.
    sequence: { sequencer: LongestFirstSequencer },
    reporters: ["default", "./test/support/closing-line-reporter.ts"],
  },
});
