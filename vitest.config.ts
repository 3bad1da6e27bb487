import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 20_000,
    hookTimeout: 30_000,
    // Integration tests start servers on free ports; two workers fit 2 cores.
    maxWorkers: 2,
    reporters: ["default", "./test/support/closing-line-reporter.ts"],
  },
});
