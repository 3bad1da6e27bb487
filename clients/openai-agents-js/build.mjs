// `npm run build` and `prepare`: compiles src/ to dist/ (ESM and .d.ts).
//
// `npm install /path/to/clients/ts` links the directory and runs `prepare`
// there with only the runtime dependencies installed; the compiler is a
// devDependency, so when it is missing it is installed first (from this
// package's package-lock.json), which lets a fresh clone be installed by path
// in one step.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = join(here, "node_modules", ".bin", "tsc");
const npm = process.env.npm_execpath;
if (!existsSync(tsc)) {
  const [command, args] = npm === undefined ? ["npm", []] : [process.execPath, [npm]];
  execFileSync(
    command,
    [...args, "install", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund"],
    { cwd: here, stdio: "inherit" },
  );
}
execFileSync(tsc, ["-p", "tsconfig.build.json"], { cwd: here, stdio: "inherit" });
