#!/usr/bin/env bash
# Installs the TypeScript client this adapter depends on (file:../ts) and this
# package's pinned dependencies (package-lock.json: @openai/agents
# and zod among them), builds both, and runs the tests against the real server
# built from this checkout (the root `npm ci` and `npm run build` make dist/).
set -euo pipefail
cd "$(dirname "$0")"

[[ -f ../../dist/src/main.js ]] || {
  echo "clients/openai-agents-js: ../../dist/src/main.js is missing: run npm ci and npm run build at the repository root" >&2
  exit 1
}

# The client resolves its own dependencies from clients/ts/node_modules.
(cd ../ts && npm ci --no-audit --no-fund --ignore-scripts && npm run build)
npm ci --no-audit --no-fund --ignore-scripts
npm run typecheck
npm run build
# The built package loads in plain Node.
node --input-type=module -e 'const m = await import("@windlass-memory/openai-agents"); if (typeof m.WindlassSession !== "function") process.exit(1);'
npx vitest run
