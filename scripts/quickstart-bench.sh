#!/usr/bin/env bash
# Runs the quickstart once and prints its step-time breakdown and reward
# curve as Markdown table rows (for scripts/bench.d/90-quickstart.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s.%N)
bin/rlhost run examples/quickstart.hcl --out "$out" --overwrite >"$out/log.txt" 2>&1
end=$(date +%s.%N)
/usr/bin/python3 - "$out/metrics.jsonl" "$out/log.txt" "$start" "$end" <<'PY'
import json, statistics, sys, re
ms = [json.loads(l) for l in open(sys.argv[1])]
log = open(sys.argv[2]).read()
wall = float(sys.argv[4]) - float(sys.argv[3])
med = lambda k: statistics.median(m["extra"][k] for m in ms if k in m["extra"])
n = max(1, len(ms) // 5)
first = sum(m["reward_mean"] for m in ms[:n]) / n
last = sum(m["reward_mean"] for m in ms[-n:]) / n
pf = sum(m["pass_rate"] for m in ms[:n]) / n
pl = sum(m["pass_rate"] for m in ms[-n:]) / n
print("Command: bin/rlhost run examples/quickstart.hcl")
print("| figure | value |")
print("|---|---|")
print(f"| whole run, warm-up included (wall) | {wall:.1f} s |")
print(f"| steps | {len(ms)} |")
print(f"| rollout per step (median) | {med('time/rollout_s'):.2f} s |")
print(f"| of which generation | {med('time/generation_s'):.2f} s |")
print(f"| of which scoring in sandboxes | {med('time/scoring_s'):.2f} s |")
print(f"| GRPO update per step (median) | {med('time/train_s'):.2f} s |")
print(f"| trained tokens per step (median) | {med('train/tokens'):.0f} |")
print(f"| mean reward, first {n} steps → last {n} | {first:.3f} → {last:.3f} |")
print(f"| pass rate, first {n} steps → last {n} | {100*pf:.1f}% → {100*pl:.1f}% |")
PY
