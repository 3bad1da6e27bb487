import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { expect, it } from "vitest";

/**
 * `pip install ./clients/python-langchain` (and the other Python packages)
 * builds in the source tree: build/, *.egg-info. None of it may show up as
 * untracked in git. `npm test` makes .venv first (scripts/setup-clients.sh).
 */
const ROOT = new URL("../../", import.meta.url).pathname;
const PACKAGES = [
  "gen/python",
  "clients/python",
  "clients/python-langchain",
  "clients/python-llamaindex",
];
const run = promisify(execFile);

it("leaves no untracked build artefacts after pip installs each Python package", async () => {
  const python = join(ROOT, ".venv/bin/python");
  expect(existsSync(python), "run scripts/setup-clients.sh (npm test does)").toBe(true);
  const target = mkdtempSync(join(tmpdir(), "windlass-pip-"));
  try {
    // Offline and without dependencies: only the packages' own build runs, as in a user's install.
    await run(
      python,
      ["-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation"]
        .concat(["--target", target])
        .concat(PACKAGES.map((p) => `./${p}`)),
      { cwd: ROOT, timeout: 120_000 },
    );
    for (const p of PACKAGES) expect(existsSync(join(ROOT, p, "build")), p).toBe(true);
    const { stdout } = await run(
      "git",
      ["status", "--porcelain", "--untracked-files=all", "--", ...PACKAGES],
      { cwd: ROOT },
    );
    const artefacts = stdout
      .split("\n")
      .filter((l) => l.startsWith("??") && /(^|\/)(build|dist)\/|\.egg-info\//.test(l));
    expect(artefacts).toEqual([]);
  } finally {
    rmSync(target, { recursive: true, force: true });
  }
}, 150_000);
