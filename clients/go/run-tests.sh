#!/usr/bin/env bash
# Tests of the Go client library (clients/go) against the real server built
# from this checkout: go vet, then go test. Needs Go (1.23 or newer) and Node
# (scripts/use-node.sh); the Go modules come from the Go proxy.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)

if ! command -v go >/dev/null; then
  echo "clients/go: the go command is not installed" >&2
  exit 1
fi
# shellcheck source=../../scripts/use-node.sh
source "$root/scripts/use-node.sh" >/dev/null
if [[ ! -f $root/dist/src/main.js ]]; then
  (cd "$root" && npm run build)
fi

go mod download
go vet ./...
go test -count=1 ./...
