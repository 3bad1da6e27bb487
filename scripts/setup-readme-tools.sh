#!/usr/bin/env bash
# Installs what the README's examples use beyond the project's own tools:
# grpcurl, pinned, built with `go install` from the Go module proxy into
# .tools/bin (where scripts/generate.sh keeps its plugins too). Quick when it
# is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly GRPCURL_VERSION=v1.9.3
readonly BIN=.tools/bin
readonly STAMP=$BIN/.grpcurl-version

if [[ -x $BIN/grpcurl && -f $STAMP && "$(cat "$STAMP")" == "$GRPCURL_VERSION" ]]; then
  exit 0
fi
mkdir -p "$BIN"
echo "setup-readme-tools: installing grpcurl $GRPCURL_VERSION into $BIN" >&2
GOBIN="$PWD/$BIN" go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION"
echo "$GRPCURL_VERSION" >"$STAMP"
