#!/usr/bin/env bash
# fetch.sh: install the official `openai` npm package into .cache/openai-node
# for trainer/serve's tests, which drive the embedded policy server with it
# (scripts/serve/client.mjs). Idempotent; nothing here is committed.
#
# Needs node >= 20 and npm with access to the npm registry.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir="$root/.cache/openai-node"
pkg="openai@6.9.1"

if [[ -d "$dir/node_modules/openai" && "$(cat "$dir/.package" 2>/dev/null)" == "$pkg" ]]; then
  echo "serve/fetch.sh: $pkg present" >&2
  exit 0
fi
echo "serve/fetch.sh: installing $pkg" >&2
rm -rf "$dir"
mkdir -p "$dir"
echo '{"name":"rlhost-serve-client","private":true,"type":"module"}' >"$dir/package.json"
(cd "$dir" && npm install --silent --no-audit --no-fund --ignore-scripts "$pkg" >/dev/null)
echo "$pkg" >"$dir/.package"
echo "serve/fetch.sh: ok: $dir" >&2
