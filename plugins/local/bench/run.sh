#!/bin/sh
# Runs the local sandbox benchmark. Needs root (or working user namespaces
# and delegated cgroups) and bubblewrap for the baseline.
set -e
cd "$(dirname "$0")/../../.."
if ! command -v bwrap >/dev/null 2>&1; then
	apt-get update && apt-get install -y bubblewrap
fi
go build -o /tmp/rlhost-local-bench ./plugins/local/bench
exec /tmp/rlhost-local-bench "$@"
