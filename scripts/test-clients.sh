#!/usr/bin/env bash
# Runs the test script of every client library and framework adapter under
# clients/: each clients/<name>/run-tests.sh installs what its package needs
# (its own npm lockfile, Go modules, the shared .venv from setup-clients.sh)
# and runs the package's own tests against a real server built from this
# checkout (dist/, built by `npm test` before this runs). Stops at the first
# package that fails.
set -euo pipefail
cd "$(dirname "$0")/.."

shopt -s nullglob
ran=0
for script in clients/*/run-tests.sh; do
  echo "test-clients: ${script%/run-tests.sh}" >&2
  bash "$script"
  ran=$((ran + 1))
done
echo "test-clients: ${ran} package(s) passed" >&2
