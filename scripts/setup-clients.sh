#!/usr/bin/env bash
# Prepares what the Python and Go client tests and examples need:
#   .venv/   a virtual environment with the pinned grpcio, protobuf and pytest
#            (clients/python/requirements-test.txt), the pinned frameworks of
#            the adapters with all their dependencies
#            (clients/python-*/requirements-test.txt) and, editable,
#            gen/python, clients/python and the adapters clients/python-*;
#   the Go module caches of gen/go and examples/go.
# Idempotent and quick when nothing changed: the venv is rebuilt only when a
# requirements file or a pyproject.toml changes (a sha256 stamp in .venv).
#
# Without python3 or go the part that needs it is skipped with a warning;
# under CI=true that is an error, since the tests it serves would not run.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly VENV=.venv
readonly REQUIREMENTS=clients/python/requirements-test.txt
# The framework adapters: each has its own package and pinned test requirements.
readonly ADAPTERS=(clients/python-langchain clients/python-llamaindex clients/python-openai-agents)
readonly STAMP=$VENV/.windlass-setup.sha256

say() { echo "setup-clients: $*" >&2; }
missing() {
  if [[ "${CI:-}" == true ]]; then
    say "ERROR: $1 (CI=true: the client tests must run)"
    exit 1
  fi
  say "WARNING: $1; skipping"
}

python_inputs_hash() {
  local adapter
  {
    cat "$REQUIREMENTS" gen/python/pyproject.toml clients/python/pyproject.toml
    for adapter in "${ADAPTERS[@]}"; do
      cat "$adapter/requirements-test.txt" "$adapter/pyproject.toml"
    done
  } | sha256sum | cut -d' ' -f1
}

setup_python() {
  local want
  want=$(python_inputs_hash)
  if [[ -x $VENV/bin/python && -f $STAMP && "$(cat "$STAMP")" == "$want" ]]; then
    return
  fi
  local adapter requirements=(-r "$REQUIREMENTS") editables=(-e ./gen/python -e ./clients/python)
  for adapter in "${ADAPTERS[@]}"; do
    requirements+=(-r "$adapter/requirements-test.txt")
    editables+=(-e "./$adapter")
  done
  say "creating $VENV (grpcio, protobuf, pytest, langchain-core, llama-index-core, openai-agents; the local packages editable)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # Every requirement is pinned (==), the transitive ones too, and pip check
  # below proves nothing is missing: an install that resolves differently
  # would fail here, not in a test.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
  # --no-build-isolation: build the local packages with the pinned setuptools
  # just installed, instead of fetching a build backend for each. --no-deps:
  # their dependencies are the pinned ones above.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-build-isolation --no-deps "${editables[@]}"
  "$VENV/bin/python" -m pip check >/dev/null
  echo "$want" >"$STAMP"
}

setup_go() {
  local module
  for module in gen/go clients/go examples/go test/conformance/go; do
    # go mod download is a no-op when the module cache already has them.
    (cd "$module" && go mod download)
  done
}

if command -v python3 >/dev/null; then
  setup_python
else
  missing "python3 is not installed"
fi

if command -v go >/dev/null; then
  setup_go
else
  missing "the go command is not installed"
fi
say "ready"
