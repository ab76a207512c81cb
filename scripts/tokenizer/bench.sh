#!/usr/bin/env bash
# bench.sh: tokenizer throughput, Go vs the JavaScript reference, on the same
# corpus in the same run; prints Markdown rows for BENCHMARKS.md.
# Needs the fixture: runs scripts/tokenizer/fetch.sh first (fast when present).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
bash scripts/tokenizer/fetch.sh >/dev/null 2>&1 || bash scripts/tokenizer/fetch.sh
export RLHOST_QWEN_TOKENIZER="$root/.cache/qwen-tokenizer"

go_out=$(go test -run '^$' -bench '^BenchmarkEncode$' -benchtime 2s -count 1 ./trainer/tokenizer/)
js_out=$(NODE_PATH="$root/.cache/tokenizer-ref/node_modules" node scripts/tokenizer/bench.mjs \
  "$RLHOST_QWEN_TOKENIZER" trainer/tokenizer/testdata/corpus 3)

metric() { # metric SUBBENCH -> tokens/s
  awk -v b="BenchmarkEncode/$1-" 'index($1, b) == 1 { for (i = 2; i <= NF; i++) if ($(i+1) == "tokens/s") print $i }' <<<"$go_out"
}
js=$(sed -E 's/.*"tokens_per_sec":([0-9]+).*/\1/' <<<"$js_out")
cpu=$(awk -F': ' '/^cpu:/ {print $2}' <<<"$go_out")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1fx", a / b }'; }
fmt() { awk -v a="$1" 'BEGIN { printf "%.2fM", a / 1e6 }'; }

echo "Machine: ${cpu:-unknown}, $(nproc) cores; corpus: trainer/tokenizer/testdata/corpus in 16-line documents"
echo "Command: bash scripts/tokenizer/bench.sh"
echo
echo "| benchmark | tokens/s | baseline | ratio |"
echo "| --- | --- | --- | --- |"
for b in warm cold split-only; do
  v=$(metric "$b")
  echo "| tokenizer Encode ($b) | $(fmt "$v") | JS reference (@lenml/tokenizers, node $(node --version)) $(fmt "$js") | $(ratio "$v" "$js") |"
done
echo "| character scan only (floor) | $(fmt "$(metric baseline-runescan)") | - | - |"
