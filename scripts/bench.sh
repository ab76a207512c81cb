#!/usr/bin/env bash
# `make bench`: run every benchmark and rewrite BENCHMARKS.md with the
# machine, the commands, and each figure next to a baseline measured in the
# same run. Slow on purpose (minutes); never part of `make test`.
#
# BENCHMARKS.md opens with a summary table: one row per headline figure,
# what rlhost is measured against, and the ratio. Sections add their rows.
# A section is the host's own (below) or a script scripts/bench.d/NN-name.sh,
# sourced in order, that runs its benchmark with run_block (or section and
# run_md) and then files summary rows for it:
#
#   summary_row "what is measured" "rlhost's figure" "baseline, same run" "ratio"
#
# A row is filed under the section run last: its first column links there,
# and BENCH_ONLY=name (one section script, or "host") replaces the rows of
# the sections it re-runs and keeps the others. Figures come from what the
# benchmark printed, never typed in:
#
#   cell PATTERN N          the N-th cell of the first table row of the last
#                           run that contains PATTERN
#   bench_value NAME UNIT   the number before UNIT on the last run's
#                           Benchmark line NAME (ns/op, or a custom unit)
#   ratio A B               A/B as "1.23x"; ms_of NS: nanoseconds as "12.3 ms"
#
# For example, after a run_block whose table has a row "| tokenizer Encode
# (warm) | 8.50M | JS reference ... 0.29M | 29.8x |":
#
#   summary_row "tokens/s, warm" "$(cell 'Encode (warm)' 2)" "$(cell 'Encode (warm)' 3)" "$(cell 'Encode (warm)' 4)"
set -euo pipefail
cd "$(dirname "$0")/.."
export RLHOST_QWEN_TOKENIZER="${RLHOST_QWEN_TOKENIZER:-$PWD/.cache/qwen-tokenizer}"
out=BENCHMARKS.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
only="${BENCH_ONLY:-all}" # a section name to run just that one
cur_title=""              # the section summary_row files rows under
: >"$tmp/summary"
: >"$tmp/table.txt"
: >"$tmp/raw.txt"

want() { [ "$only" = all ] || [ "$only" = "$1" ]; }

# anchor is GitHub's id for a heading: lower case, punctuation dropped,
# spaces as hyphens.
anchor() { printf '%s' "$1" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'; }

summary_row() { # what, rlhost's figure, baseline (same run), ratio
  [ -n "$cur_title" ] || { echo "bench: summary_row before any section" >&2; exit 1; }
  local v
  for v in "$2" "$3" "$4"; do
    case $v in *[0-9]*) ;; *) echo "bench: summary row \"$1\" of \"$cur_title\" has no figure in \"$v\"" >&2; exit 1 ;; esac
  done
  printf '| [%s](#%s) | %s | %s | %s | %s |\n' "$cur_title" "$(anchor "$cur_title")" "$1" "$2" "$3" "$4" >>"$tmp/summary"
}

cell() { # pattern, n: the n-th cell of the first row of the last table containing pattern
  grep -F -m1 -- "$1" "$tmp/table.txt" | awk -F'|' -v n="$2" '{ v = $(n + 1); gsub(/^[ \t]+|[ \t]+$/, "", v); print v }'
}

bench_value() { # name, unit: the number before unit on the last run's Benchmark line name
  awk -v name="$1" -v unit="$2" '$1 ~ "^" name "(-[0-9]+)?$" { for (i = 2; i < NF; i++) if ($(i + 1) == unit) { print $i; exit } }' "$tmp/raw.txt"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
ms_of() { awk -v ns="$1" 'BEGIN { printf "%.1f ms", ns / 1e6 }'; }

machine() {
  local cpu mem
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
  echo "- CPU: ${cpu:-unknown}, $(nproc) cores visible; memory ${mem}"
  echo "- Kernel: $(uname -r); $(go version)"
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
}

section() { # name, title, intro
  cur_title=$2
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
  cp "$md" "$tmp/table.txt"
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
  summary_row "no-op sandbox exec through an env plugin, as \`rlhost run\` makes it" "$(cell 'isolation namespaces' 5) µs" "the backend called directly: $(cell 'isolation namespaces' 4) µs" "$(cell 'isolation namespaces' 7)"
  section host4 "Host: the transport floor under the env hop" \
"What one call between two Go processes on Unix sockets costs on this machine with nothing else in the way, each call after an idle gap as a Step follows the wait on a sandbox exec: a raw socket round trip (8 bytes each way, the floor), rlhost's framed wire (\`core/sdk/wire/frames\`, which carries the hop's Step and the env's lent-sandbox calls) and gRPC, each alone and as a *relay* (the callee calls back into the caller before it answers: the hop's shape, two round trips). Medians in µs, interleaved in a new order each round; the last column is against the raw socket in the same shape. The env hop above is at least a raw round trip (the relay hop, a raw relay); the rest of it is the framed wire's own cost over the raw one and what host, env and backend do per call."
  echo "\`\`\`" >>"$tmp/body"
  echo "\$ go run ./scripts/rpcfloor -n 1000 -gap 1ms -md" >>"$tmp/body"
  echo "\`\`\`" >>"$tmp/body"
  echo >>"$tmp/body"
  echo "| wire and shape | calls | idle gap before each | p50 (µs) | against the raw socket |
|---|---|---|---|---|" >>"$tmp/body"
  go run ./scripts/rpcfloor -n 1000 -gap 1ms -md | grep '^|' >"$tmp/table.txt"
  cat "$tmp/table.txt" >>"$tmp/body"
  echo >>"$tmp/body"
  summary_row "one call on rlhost's framed wire between two processes" "$(cell '| frames round trip' 4) µs" "a raw Unix-socket round trip: $(cell '| raw round trip' 4) µs (gRPC: $(cell 'gRPC unary round trip, rlhost settings' 4) µs)" "$(cell '| frames round trip' 5)"
  section host3 "Host: what lending a sandbox adds to an episode" \
"An episode on a no-op env plugin (NewEpisode, one no-op Step, End) without a sandbox, with one its backend lends (the host passes the backend's socket and the lease's token on; the env connected to that socket at its first episode and keeps the connection), and with one the host lends (leased on the one socket the host serves that env plugin, ended with the episode), interleaved. No sandbox call is made, so each difference is that lease's own cost on the episode. Medians in µs."
  run_md "| episode | iterations | without a sandbox (µs) | backend lends (µs) | adds (µs) | host lends (µs) | adds (µs) |
|---|---|---|---|---|---|---|" go test -run XXX -bench 'BenchmarkEpisodeLend' -benchtime 300x ./host/cmd/rlhost/
  summary_row "an episode with a sandbox its backend lends" "$(cell 'NewEpisode' 4) µs" "the same episode without a sandbox: $(cell 'NewEpisode' 3) µs" "+$(cell 'NewEpisode' 5) µs"
  section host2 "Host: end-to-end scored completions per second" \
"\`rlhost run\` on the coding env with a replay policy (the policy costs nothing), each completion in its own sandbox (a new one, or one reset after an earlier completion), against bare \`python3 -c\` processes running the same solutions at the same concurrency, in the same run (medians of 3 runs each). A scored completion runs one interpreter (the trusted runner, started from bytecode, which forks the candidate's process) plus the sandbox's create and destroy (or its reset), so the ratio to one bare interpreter start is the overhead of isolation and honest scoring together. *namespaces* is the local backend's default: sandboxes started by the dedicated \`rlhost-sandbox-init\` that \`make build\` installs, reset and reused once destroyed (\`recycle\`); *namespaces-pool* adds a pool filled before the first episode (\`pool_size = 8\`); *namespaces-fresh* creates and destroys a sandbox per completion (\`recycle = false\`); *namespaces-reexec* does too, re-executing rlhost itself as the init. The CPU columns count user and system time of \`rlhost run\` and every process it waited for (plugins, sandboxes, interpreters), start-up included, against the bare processes' own: on a shared machine they hold up where the wall-clock rates mostly measure the neighbours. The *marginal* columns take out what a run costs whatever its length (starting the host and plugins, filling the pool, shutting down): the difference between this 64-episode job and a 16-episode one, per extra completion; that is the figure for a training run of thousands of episodes."
  run_md "| job | shape | rlhost completions/s | bare python3 processes/s | ratio | rlhost CPU ms per completion | bare python3 CPU ms per process | CPU ratio | marginal rlhost CPU ms per completion | marginal CPU ratio |
|---|---|---|---|---|---|---|---|---|---|" go test -run XXX -bench 'BenchmarkCodingThroughput' -benchtime 3x ./host/cmd/rlhost/
  summary_row "scored completions per second, coding env, local sandboxes (the default)" "$(cell 'coding env, namespaces |' 3)/s" "bare \`python3 -c\` of the same solutions: $(cell 'coding env, namespaces |' 4)/s" "$(cell 'coding env, namespaces |' 5)x (CPU $(cell 'coding env, namespaces |' 8)x)"
fi

# run_block TITLE INTRO CMD...: runs a component's own bench command and
# keeps what it prints for the report: Markdown table lines (also from
# `go test -v` logs), "Machine:"/"Command:" lines, and raw Benchmark lines.
run_block() {
  local title=$1 intro=$2
  shift 2
  cur_title=$title
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

summary_head="| section | what is measured | rlhost | baseline, measured in the same run | ratio |
|---|---|---|---|---|"

{
  echo "# Benchmarks"
  echo
  echo "Written by \`make bench\` (scripts/bench.sh and scripts/bench.d/). Every figure sits next to a baseline measured in the same run on the same machine: bare processes (fork/exec, \`python3\`), bubblewrap for sandboxes, raw Unix sockets and gRPC for the plugin wire, PyTorch 1.13 on OpenBLAS for the trainer, the JavaScript reference tokenizer, the Daytona SDK called directly, and the trainer's own memory estimate. These machines are shared and noisy: read the ratios, not the absolute times."
  echo
  echo "## Summary"
  echo
  echo "$summary_head"
  cat "$tmp/summary"
  echo
  echo "Each row links to its section, which has the command, the whole table and the raw output. A full run's machine:"
  echo
  machine
  echo
  cat "$tmp/body"
} >"$out.new"
if [ "$only" != all ] && [ -f "$out" ]; then
  # A partial run keeps the other sections: each section it ran replaces
  # the section of the same title in place, stamped with its own date and
  # commit; a section the file lacks is appended.
  stamp="Re-run alone (BENCH_ONLY=$only) on $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores."
  awk -v newfile="$tmp/body" -v stamp="$stamp" '
    BEGIN {
      while ((getline line < newfile) > 0) {
        if (line ~ /^## /) { cur = line; order[++n] = cur; sec[cur] = ""; continue }
        if (cur != "") sec[cur] = sec[cur] line "\n"
      }
    }
    function rest() { for (i = 1; i <= n; i++) if (!(order[i] in used)) { print order[i]; print ""; print "_" stamp "_"; printf "%s", sec[order[i]]; used[order[i]] = 1 } }
    /^## |^# / { skip = 0 }
    /^## / && ($0 in sec) { print; print ""; print "_" stamp "_"; printf "%s", sec[$0]; used[$0] = 1; skip = 1; next }
    !skip { print }
    END { rest() }
  ' "$out" >"$tmp/merged"
  # The summary: the rows of the sections not re-run, and this run's,
  # in the order of the sections.
  awk -v newrows="$tmp/summary" -v head="$summary_head" '
    function title(row) { t = row; sub(/^\| \[/, "", t); sub(/\]\(#.*/, "", t); return t }
    BEGIN { while ((getline r < newrows) > 0) { fresh[++nf] = r; rerun[title(r)] = 1 } }
    FNR == NR {
      if (/^## / && $0 != "## Summary") idx[substr($0, 4)] = ++ns
      if (/^## Summary$/) insum = 1; else if (/^## /) insum = 0
      if (insum && /^\| \[/ && !(title($0) in rerun)) old[++no] = $0
      next
    }
    function emit(r,   k) { k = (title(r) in idx) ? idx[title(r)] : ns + 1; rows[k] = rows[k] r "\n" }
    /^## Summary$/ { insum = 1; print; next }
    /^## / { insum = 0 }
    insum && /^\| section \|/ {
      print head
      for (i = 1; i <= no; i++) emit(old[i])
      for (i = 1; i <= nf; i++) emit(fresh[i])
      for (k = 1; k <= ns + 1; k++) printf "%s", rows[k]
      next
    }
    insum && /^\|(---|[ \t]*\[)/ { next }
    { print }
  ' "$tmp/merged" "$tmp/merged" >"$out.new"
fi
mv "$out.new" "$out"
echo "wrote $out"
