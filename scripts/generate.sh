#!/usr/bin/env bash
# Regenerates gen/ts, gen/go and gen/python from proto/ with buf (buf.gen.yaml)
# and pinned plugins. Idempotent: the plugins are installed into .tools/ only
# when missing or at another version, and the output is deterministic, so a
# second run leaves `git status` clean.
#
#   gen/ts      protoc-gen-es              node_modules (package.json)
#   gen/go      protoc-gen-go, -go-grpc    go install into .tools/bin (pins below)
#   gen/python  protoc + gRPC generator    grpcio-tools in .tools/venv
#                                          (scripts/requirements-generate.txt)
#
# Needs node_modules (npm ci), Go and python3. Without Go or python3 the
# language is skipped with a warning and its committed files are left alone;
# under CI=true that is an error instead, since the generated-code check would
# then prove nothing about that language.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly PROTOC_GEN_GO_VERSION=v1.36.12
readonly PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
# What grpcio-tools (pinned in requirements-generate.txt) reports and bundles.
readonly GRPCIO_TOOLS_VERSION=1.85.1
readonly PROTOC_VERSION="libprotoc 35.1"

readonly TOOLS_BIN=.tools/bin
readonly TOOLS_VENV=.tools/venv
readonly REQUIREMENTS=scripts/requirements-generate.txt

say() { echo "generate: $*" >&2; }
fail() {
  say "ERROR: $*"
  exit 1
}

# skip LANGUAGE REASON: outside CI, warn and leave that language's files as
# they are; under CI, fail.
skipped=()
skip() {
  if [[ "${CI:-}" == true ]]; then
    fail "$2 (CI=true: no language may be skipped)"
  fi
  say "WARNING: not regenerating gen/$1: $2"
  skipped+=("$1")
}

# Strips a leading "v" so "protoc-gen-go v1.36.12" and "protoc-gen-go-grpc
# 1.6.2" compare alike.
tool_version() {
  local out
  out=$("$@" 2>/dev/null) || return 0
  out=${out##* }
  echo "${out#v}"
}

install_go_plugin() {
  local name=$1 package=$2 version=$3
  if [[ "$(tool_version "$TOOLS_BIN/$name" --version)" == "${version#v}" ]]; then
    return
  fi
  say "installing $name $version into $TOOLS_BIN"
  GOBIN="$PWD/$TOOLS_BIN" go install "$package@$version"
  [[ "$(tool_version "$TOOLS_BIN/$name" --version)" == "${version#v}" ]] ||
    fail "$TOOLS_BIN/$name does not report version $version after go install"
}

python_tools_ready() {
  local stamp=$TOOLS_VENV/.requirements.sha256
  [[ -x $TOOLS_VENV/bin/python ]] && [[ -f $stamp ]] &&
    [[ "$(cat "$stamp")" == "$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)" ]]
}

install_python_tools() {
  if ! python_tools_ready; then
    say "installing grpcio-tools $GRPCIO_TOOLS_VERSION into $TOOLS_VENV"
    rm -rf "$TOOLS_VENV"
    python3 -m venv "$TOOLS_VENV"
    "$TOOLS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      -r "$REQUIREMENTS"
    sha256sum "$REQUIREMENTS" | cut -d' ' -f1 >"$TOOLS_VENV/.requirements.sha256"
  fi
  local got
  got=$("$TOOLS_VENV/bin/python" -c \
    'import importlib.metadata as m; print(m.version("grpcio-tools"))')
  [[ "$got" == "$GRPCIO_TOOLS_VERSION" ]] ||
    fail "grpcio-tools in $TOOLS_VENV is $got, expected $GRPCIO_TOOLS_VERSION"
  got=$("$TOOLS_VENV/bin/python" -m grpc_tools.protoc --version)
  [[ "$got" == "$PROTOC_VERSION" ]] ||
    fail "protoc from grpcio-tools reports '$got', expected '$PROTOC_VERSION'"
}

# The template of buf.gen.yaml without the plugins writing under gen/LANG for
# each skipped LANG (buf.gen.yaml stays the one place plugins are listed).
template_without() {
  local pattern
  pattern="^gen/($(
    IFS='|'
    echo "$*"
  ))(/|\$)"
  awk -v skip="$pattern" '
    function flush() { if (initem && !drop) printf "%s", item; initem = 0; drop = 0; item = "" }
    /^  - / { flush(); item = $0 "\n"; initem = 1; next }
    initem && /^    / { item = item $0 "\n"; if ($1 == "out:" && $2 ~ skip) drop = 1; next }
    { flush(); print }
    END { flush() }' buf.gen.yaml
}

# Deletes the files a plugin writes (not the hand-written ones beside them),
# so a proto that was removed or renamed leaves no stale output behind.
remove_generated() {
  local dir=$1
  shift
  [[ -d $dir ]] || return 0
  find "$dir" -type f \( "$@" \) -delete
  find "$dir" -mindepth 1 -type d -empty -delete
}

[[ -x node_modules/.bin/buf && -x node_modules/.bin/protoc-gen-es ]] ||
  fail "node_modules/.bin/buf or protoc-gen-es is missing: run npm ci first"

if command -v go >/dev/null; then
  mkdir -p "$TOOLS_BIN"
  install_go_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go \
    "$PROTOC_GEN_GO_VERSION"
  install_go_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc \
    "$PROTOC_GEN_GO_GRPC_VERSION"
else
  skip go "the go command is not installed (Go is needed to build protoc-gen-go)"
fi

if command -v python3 >/dev/null; then
  install_python_tools
else
  skip python "python3 is not installed (grpcio-tools generates the Python code)"
fi

remove_generated gen/ts -name '*_pb.ts'
remove_generated clients/ts/src/gen -name '*_pb.ts'
[[ " ${skipped[*]} " == *" go "* ]] || remove_generated gen/go -name '*.pb.go'
[[ " ${skipped[*]} " == *" python "* ]] ||
  remove_generated gen/python/src -name '*_pb2.py' -o -name '*_pb2.pyi' -o -name '*_pb2_grpc.py'

if ((${#skipped[@]} == 0)); then
  node_modules/.bin/buf generate
else
  node_modules/.bin/buf generate --template "$(template_without "${skipped[@]}")"
fi
say "done: gen/ is up to date with proto/${skipped[*]:+ (skipped: ${skipped[*]})}"
