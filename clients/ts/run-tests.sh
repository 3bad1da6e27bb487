#!/usr/bin/env bash
# Installs this package's pinned dependencies (package-lock.json), checks that
# src/gen matches proto/, builds, and runs the tests against the real server
# built from this checkout (the root `npm ci` and `npm run build` make dist/).
set -euo pipefail
cd "$(dirname "$0")"

[[ -f ../../dist/src/main.js ]] || {
  echo "clients/ts: ../../dist/src/main.js is missing: run npm ci and npm run build at the repository root" >&2
  exit 1
}

npm ci --no-audit --no-fund --ignore-scripts
npm run generate
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git diff --exit-code -- src/gen || {
    echo "clients/ts: src/gen differs from proto/: run npm run generate and commit it" >&2
    exit 1
  }
  [[ -z "$(git status --porcelain -- src/gen)" ]] || {
    echo "clients/ts: npm run generate left untracked files in src/gen" >&2
    exit 1
  }
fi
npm run typecheck
npm run build
npx vitest run
