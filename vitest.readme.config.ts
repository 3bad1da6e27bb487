import { defineConfig } from "vitest/config";

/**
 * The README's examples (test/readme/readme-examples.test.ts): `npm test` runs
 * them last, once scripts/test-clients.sh has installed and built the client
 * libraries they import. One file, in README order, one worker.
 */
export default defineConfig({
  test: {
    include: ["test/readme/readme-examples.test.ts"],
    testTimeout: 130_000,
    hookTimeout: 60_000,
    maxWorkers: 1,
    reporters: ["default", "./test/support/closing-line-reporter.ts"],
  },
});
