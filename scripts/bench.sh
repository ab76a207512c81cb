#!/usr/bin/env bash
# `make bench`: run every benchmark and rewrite BENCHMARKS.md with the
# machine, the commands, and each figure next to a baseline measured in the
# same run. Slow on purpose (minutes); never part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
export RLHOST_QWEN_TOKENIZER="${RLHOST_QWEN_TOKENIZER:-$PWD/.cache/qwen-tokenizer}"
out=BENCHMARKS.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
only="${BENCH_ONLY:-all}" # a section name to run just that one
hand="# Before and after, measured by hand"

want() { [ "$only" = all ] || [ "$only" = "$1" ]; }

machine() {
  local cpu mem
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
  echo "- CPU: ${cpu:-unknown}, $(nproc) cores visible; memory ${mem}"
  echo "- Kernel: $(uname -r); $(go version)"
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
}

section() { # name, title, intro
  echo "## $2" >>"$tmp/body"
  echo >>"$tmp/body"
  echo "$3" >>"$tmp/body"
  echo >>"$tmp/body"
}

run_md() { # header, command...; appends the Markdown rows the benchmark writes to $RLHOST_BENCH_MD
  local md="$tmp/rows.md" header=$1
  shift
  : >"$md"
  echo "\`\`\`" >>"$tmp/body"
  echo "\$ $*" >>"$tmp/body"
  echo "\`\`\`" >>"$tmp/body"
  echo >>"$tmp/body"
  RLHOST_BENCH_MD="$md" "$@" >"$tmp/raw.txt" 2>&1 || { cat "$tmp/raw.txt"; echo "bench command failed: $*" >&2; exit 1; }
  echo "$header" >>"$tmp/body"
  cat "$md" >>"$tmp/body"
  echo >>"$tmp/body"
  echo "<details><summary>raw output</summary>" >>"$tmp/body"
  echo >>"$tmp/body"
  echo "\`\`\`" >>"$tmp/body"
  grep -E '^(Benchmark|ok|PASS|[A-Za-z].*:)' "$tmp/raw.txt" | grep -v '^\s*$' | head -60 >>"$tmp/body" || true
  echo "\`\`\`" >>"$tmp/body"
  echo "</details>" >>"$tmp/body"
  echo >>"$tmp/body"
}

: >"$tmp/body"
make -s build

if want host; then
  section host "Host: plugin round trip of a no-op sandbox exec" \
"A no-op sandbox exec (\`true\`) four ways, interleaved in one loop (in a new order each round, since what a path follows shifts its figure): bare fork/exec in the host process (baseline); host → backend plugin → sandbox; host → env plugin (protobuf frames on the env's episode socket) → the backend plugin's lent-sandbox socket (the same frames) → sandbox, the path of \`rlhost run\`; and the path before backends lent their sandboxes themselves, still used for a backend or env plugin built on an older SDK: host → env plugin → the host's lent-sandbox socket → backend plugin (gRPC) → sandbox. Medians in µs; *env hop* is what the env path adds over a direct backend call: the Step's round trip to the env, whose exec reaches the backend in place of the host's. *no-op Step* is that round trip alone, in the same loop: the floor of a turn's call into an env plugin. *relay hop* is the older path's cost over the direct call, which adds a second round trip."
  run_md "| path | iterations | bare fork/exec (µs) | backend exec (µs) | via env (µs) | env hop (µs) | env / backend | no-op Step (µs) | via env, host relays (µs) | relay hop (µs) |
|---|---|---|---|---|---|---|---|---|---|" go test -run XXX -bench 'BenchmarkPluginRoundTrip' -benchtime 300x ./host/cmd/rlhost/
  section host4 "Host: the transport floor under the env hop" \
"What one call between two Go processes on Unix sockets costs on this machine with nothing else in the way, each call after an idle gap as a Step follows the wait on a sandbox exec: a raw socket round trip (8 bytes each way, the floor), rlhost's framed wire (\`core/sdk/wire/frames\`, which carries the hop's Step and the env's lent-sandbox calls) and gRPC, each alone and as a *relay* (the callee calls back into the caller before it answers: the hop's shape, two round trips). Medians in µs, interleaved in a new order each round; the last column is against the raw socket in the same shape. The env hop above is at least a raw round trip (the relay hop, a raw relay); the rest of it is the framed wire's own cost over the raw one and what host, env and backend do per call."
  echo "\`\`\`" >>"$tmp/body"
  echo "\$ go run ./scripts/rpcfloor -n 1000 -gap 1ms -md" >>"$tmp/body"
  echo "\`\`\`" >>"$tmp/body"
  echo >>"$tmp/body"
  echo "| wire and shape | calls | idle gap before each | p50 (µs) | against the raw socket |
|---|---|---|---|---|" >>"$tmp/body"
  go run ./scripts/rpcfloor -n 1000 -gap 1ms -md | grep '^|' >>"$tmp/body"
  echo >>"$tmp/body"
  section host3 "Host: what lending a sandbox adds to an episode" \
"An episode on a no-op env plugin (NewEpisode, one no-op Step, End) without a sandbox, with one its backend lends (the host passes the backend's socket and the lease's token on; the env connected to that socket at its first episode and keeps the connection), and with one the host lends (leased on the one socket the host serves that env plugin, ended with the episode), interleaved. No sandbox call is made, so each difference is that lease's own cost on the episode. Medians in µs."
  run_md "| episode | iterations | without a sandbox (µs) | backend lends (µs) | adds (µs) | host lends (µs) | adds (µs) |
|---|---|---|---|---|---|---|" go test -run XXX -bench 'BenchmarkEpisodeLend' -benchtime 300x ./host/cmd/rlhost/
  section host2 "Host: end-to-end scored completions per second" \
"\`rlhost run\` on the coding env with a replay policy (the policy costs nothing), each completion in its own sandbox (a new one, or one reset after an earlier completion), against bare \`python3 -c\` processes running the same solutions at the same concurrency, in the same run (medians of 3 runs each). A scored completion runs one interpreter (the trusted runner, started from bytecode, which forks the candidate's process) plus the sandbox's create and destroy (or its reset), so the ratio to one bare interpreter start is the overhead of isolation and honest scoring together. *namespaces* is the local backend's default: sandboxes started by the dedicated \`rlhost-sandbox-init\` that \`make build\` installs, reset and reused once destroyed (\`recycle\`); *namespaces-pool* adds a pool filled before the first episode (\`pool_size = 8\`); *namespaces-fresh* creates and destroys a sandbox per completion (\`recycle = false\`); *namespaces-reexec* does too, re-executing rlhost itself as the init. The CPU columns count user and system time of \`rlhost run\` and every process it waited for (plugins, sandboxes, interpreters), start-up included, against the bare processes' own: on a shared machine they hold up where the wall-clock rates mostly measure the neighbours. The *marginal* columns take out what a run costs whatever its length (starting the host and plugins, filling the pool, shutting down): the difference between this 64-episode job and a 16-episode one, per extra completion; that is the figure for a training run of thousands of episodes."
  run_md "| job | shape | rlhost completions/s | bare python3 processes/s | ratio | rlhost CPU ms per completion | bare python3 CPU ms per process | CPU ratio | marginal rlhost CPU ms per completion | marginal CPU ratio |
|---|---|---|---|---|---|---|---|---|---|" go test -run XXX -bench 'BenchmarkCodingThroughput' -benchtime 3x ./host/cmd/rlhost/
fi

# run_block TITLE INTRO CMD...: runs a component's own bench command and
# keeps what it prints for the report: Markdown table lines (also from
# `go test -v` logs), "Machine:"/"Command:" lines, and raw Benchmark lines.
run_block() {
  local title=$1 intro=$2
  shift 2
  echo "## $title" >>"$tmp/body"
  echo >>"$tmp/body"
  echo "$intro" >>"$tmp/body"
  echo >>"$tmp/body"
  echo "\`\`\`" >>"$tmp/body"
  echo "\$ $*" >>"$tmp/body"
  echo "\`\`\`" >>"$tmp/body"
  echo >>"$tmp/body"
  "$@" >"$tmp/raw.txt" 2>&1 || { cat "$tmp/raw.txt"; echo "bench command failed: $*" >&2; exit 1; }
  grep -E '^(Machine|Command|Yardstick|Note):' "$tmp/raw.txt" | sed 's/$/  /' >>"$tmp/body" || true
  echo >>"$tmp/body"
  sed -nE 's/^[[:space:]]*([A-Za-z_]+\.go:[0-9]+: )?(\|.*\|)[[:space:]]*$/\2/p' "$tmp/raw.txt" >"$tmp/table.txt"
  if [ -s "$tmp/table.txt" ]; then
    if [ -n "${BENCH_HEADER:-}" ]; then
      echo "$BENCH_HEADER" >>"$tmp/body"
    elif ! head -1 "$tmp/table.txt" | grep -q -- '---' && ! sed -n 2p "$tmp/table.txt" | grep -q -- '---'; then
      cols=$(head -1 "$tmp/table.txt" | awk -F'|' '{print NF-2}')
      # Rows printed without a header get a generic one.
      { printf '|'; for _ in $(seq 1 "$cols"); do printf ' |'; done; echo; printf '|'; for _ in $(seq 1 "$cols"); do printf -- '---|'; done; echo; } >>"$tmp/body"
    fi
    cat "$tmp/table.txt" >>"$tmp/body"
    echo >>"$tmp/body"
  fi
  if grep -qE '^Benchmark' "$tmp/raw.txt"; then
    echo "\`\`\`" >>"$tmp/body"
    grep -E '^(Benchmark|cpu:)' "$tmp/raw.txt" >>"$tmp/body"
    echo "\`\`\`" >>"$tmp/body"
    echo >>"$tmp/body"
  fi
}

# Further sections come from the components' own bench commands.
for extra in scripts/bench.d/*.sh; do
  [ -e "$extra" ] || continue
  name=$(basename "$extra" .sh)
  want "${name#*-}" || continue
  # shellcheck source=/dev/null
  source "$extra"
done

{
  echo "# Benchmarks"
  echo
  echo "Written by \`make bench\` (scripts/bench.sh), except the part headed \"$hand\" at the end, which it carries over unchanged. These machines are shared and noisy: read the ratios against the baselines measured in the same run, not the absolute times."
  echo
  machine
  echo
  cat "$tmp/body"
  # One-off before/after comparisons (an old build against a new one)
  # cannot be re-run by this script; they are kept, not regenerated.
  if [ -f "$out" ]; then sed -n "/^$hand\$/,\$p" "$out"; fi
} >"$out.new"
if [ "$only" != all ] && [ -f "$out" ]; then
  # A partial run keeps the other sections: each section it ran replaces
  # the section of the same title in place, stamped with its own date and
  # commit; a section the file lacks is appended.
  stamp="Re-run alone (BENCH_ONLY=$only) on $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores."
  awk -v newfile="$tmp/body" -v stamp="$stamp" -v hand="$hand" '
    BEGIN {
      while ((getline line < newfile) > 0) {
        if (line ~ /^## /) { cur = line; order[++n] = cur; sec[cur] = ""; continue }
        if (cur != "") sec[cur] = sec[cur] line "\n"
      }
    }
    function rest() { for (i = 1; i <= n; i++) if (!(order[i] in used)) { print order[i]; print ""; print "_" stamp "_"; printf "%s", sec[order[i]]; used[order[i]] = 1 } }
    $0 == hand { rest() }
    /^## |^# |^---$/ { skip = 0 }
    /^## / && ($0 in sec) { print; print ""; print "_" stamp "_"; printf "%s", sec[$0]; used[$0] = 1; skip = 1; next }
    !skip { print }
    END { rest() }
  ' "$out" >"$out.new"
fi
mv "$out.new" "$out"
echo "wrote $out"
