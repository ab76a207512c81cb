#!/bin/sh
# Runs the local sandbox benchmark. Needs root (or working user namespaces
# and delegated cgroups) and bubblewrap for the baseline.
set -e
cd "$(dirname "$0")/../../.."
if ! command -v bwrap >/dev/null 2>&1; then
	apt-get update && apt-get install -y bubblewrap
fi
mkdir -p "${TMPDIR:-/tmp}/rlhost-local-bench-bin"
go build -o "${TMPDIR:-/tmp}/rlhost-local-bench-bin"/bench ./plugins/local/bench
# The dedicated init beside the bench binary is picked up automatically;
# pass -helper-self to measure re-executing the (larger) bench binary instead.
go build -o "${TMPDIR:-/tmp}/rlhost-local-bench-bin"/rlhost-sandbox-init ./plugins/local/cmd/rlhost-sandbox-init
exec "${TMPDIR:-/tmp}/rlhost-local-bench-bin"/bench "$@"
