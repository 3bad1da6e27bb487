#!/usr/bin/env bash
# buf breaking (FILE rules) of the working proto against the proto as it was
# first landed: windlass.memory.v1 is a published contract, so nothing in it
# may ever be renamed, renumbered or removed — not only since the last commit.
set -euo pipefail
cd "$(dirname "$0")/.."
proto=proto/windlass/memory/v1/memory.proto
base=$(git log --diff-filter=A --format=%H -- "$proto" | tail -n 1)
if [ -z "$base" ]; then
  echo "check-breaking: no commit adds $proto (a shallow clone?); cannot compare" >&2
  exit 1
fi
node_modules/.bin/buf breaking --against ".git#ref=$base"
echo "buf breaking: $proto compatible with $base"
