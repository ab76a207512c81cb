#!/usr/bin/env bash
# gpu-check.sh: every check of the CUDA backend that needs a GPU, in one go.
#
#   scripts/cuda/gpu-check.sh                 on a machine with Go, a CUDA toolkit
#                                             (CUDA_HOME, default /usr/local/cuda), a GPU,
#                                             and python3 with torch + transformers:
#                                             build, then run everything
#   scripts/cuda/gpu-check.sh sdk OUT.tgz     on the GPU machine: pack the CUDA headers and
#                                             link libraries the build needs
#   scripts/cuda/gpu-check.sh build SDK.tgz   on a machine with Go: build the bundle against
#                                             that SDK into bin/cuda-gpu-check/
#   bin/cuda-gpu-check/gpu-check.sh run       on the GPU machine (no Go needed): run the bundle
#
# "run" does, and stops at the first failure:
#   1. the parity suite on the GPU: every op, then the tiny model's forward, backward,
#      a GRPO-like update and KV-cache generation, CUDA against the CPU backend, in FP32
#      and in BF16 mixed precision (against a CPU that rounds the same operands), and
#      on-device sampling (greedy, distribution, top-k/top-p sets, reproducibility);
#   2. logits of a small random Qwen2 made by transformers, loaded by rlhost on the GPU
#      (and on the CPU), against transformers' on the GPU; then rlhost in BF16 against
#      transformers in float32, beside transformers' own autocast-BF16 error;
#   3. fwd+bwd tokens/s at Qwen2.5-0.5B dimensions, rlhost vs PyTorch eager in the same
#      run, in float32 and in BF16 mixed precision (PyTorch: autocast), with MFU against
#      PEAK_TFLOPS / PEAK_TFLOPS_BF16 (guessed from the GPU name if unset); then rlhost fp32
#      with flash-style attention, for its speed and peak memory.
# Results go to $OUT (default ./gpu-check-results).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

pack_sdk() {
  local out=${1:?usage: gpu-check.sh sdk OUT.tgz} cuda=${CUDA_HOME:-/usr/local/cuda}
  [ -f "$cuda/include/cuda.h" ] || { echo "no CUDA toolkit at $cuda (set CUDA_HOME)" >&2; exit 1; }
  local lib=$cuda/lib64
  [ -d "$lib" ] || lib=$cuda/targets/x86_64-linux/lib
  tmp=$(mktemp -d)
  mkdir -p "$tmp/sdk/include" "$tmp/sdk/lib64"
  cp -rL "$cuda/include/." "$tmp/sdk/include/"
  cp -L "$lib"/libcublas.so "$lib"/libcublasLt.so "$lib"/libnvrtc.so "$tmp/sdk/lib64/"
  cp -L "$lib"/stubs/libcuda.so "$tmp/sdk/lib64/"
  tar -C "$tmp" -czf "$out" sdk
  rm -rf "$tmp"
  echo "packed $cuda into $out"
}

build() {
  local sdk=${1:-}
  cd "$here/../.."
  if [ -n "$sdk" ] && [ -f "$sdk" ]; then
    rm -rf .cache/cuda-sdk && mkdir -p .cache/cuda-sdk
    tar -C .cache/cuda-sdk --strip-components=1 -xzf "$sdk"
    sdk=$PWD/.cache/cuda-sdk
  fi
  local home=${sdk:-${CUDA_HOME:-/usr/local/cuda}}
  local out=bin/cuda-gpu-check
  rm -rf "$out" && mkdir -p "$out"
  make build-cuda CUDA_HOME="$home"
  cp bin/cuda-parity.test bin/cuda-bench "$out/"
  cp "$here/gpu-check.sh" "$here/torch_ref.py" "$out/"
  echo "bundle in $out: copy it to the GPU machine and run $out/gpu-check.sh run"
}

peak_guess() {
  # Dense FP32 (non-tensor-core) peaks, TFLOPS: both sides run float32 without TF32.
  case "$1" in
    *H100*PCIe*) echo 51 ;;
    *H100* | *H200* | *GH200*) echo 67 ;;
    *A100*) echo 19.5 ;;
    *L40S*) echo 91.6 ;;
    *A10*) echo 31.2 ;;
    *) echo 0 ;;
  esac
}

peak_guess_bf16() {
  # Dense BF16 tensor-core peaks (no sparsity), TFLOPS.
  case "$1" in
    *H100*PCIe*) echo 756 ;;
    *H100* | *H200* | *GH200*) echo 989 ;;
    *A100*) echo 312 ;;
    *L40S*) echo 362 ;;
    *A10*) echo 125 ;;
    *) echo 0 ;;
  esac
}

run_bundle() {
  local dir=${1:-$here}
  local out=${OUT:-$PWD/gpu-check-results}
  mkdir -p "$out"
  local py=${PYTHON:-python3}
  # cuBLAS and NVRTC from the toolkit, when it is not on the loader's path.
  export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
  echo "GPU: $gpu" | tee "$out/summary.txt"
  local peak=${PEAK_TFLOPS:-$(peak_guess "$gpu")} peak16=${PEAK_TFLOPS_BF16:-$(peak_guess_bf16 "$gpu")}

  echo "== 1. parity suite (CUDA vs CPU, every op, tiny model step in fp32 and bf16, sampling, generation)"
  # The source-tree checks (kernel names, compat header) ran where it was built.
  "$dir/cuda-parity.test" -test.v -test.count=1 -test.skip 'TestLaunchedKernelsExist|TestCompatHeader' 2>&1 |
    tee "$out/parity.txt"

  echo "== 2. logits vs transformers on a small random Qwen2"
  "$py" "$dir/torch_ref.py" make-model "$out/qwen2-small"
  ids=1,17,256,3,999,42,7,512,128,64,5,900
  "$py" "$dir/torch_ref.py" logits "$out/qwen2-small" "$ids" "$out/logits-transformers.json"
  "$dir/cuda-bench" -mode logits -device cuda -dir "$out/qwen2-small" -ids "$ids" >"$out/logits-rlhost-cuda.json"
  "$dir/cuda-bench" -mode logits -device cpu -dir "$out/qwen2-small" -ids "$ids" >"$out/logits-rlhost-cpu.json"
  "$py" "$dir/torch_ref.py" compare "$out/logits-transformers.json" "$out/logits-rlhost-cuda.json" | tee -a "$out/summary.txt"
  "$py" "$dir/torch_ref.py" compare "$out/logits-transformers.json" "$out/logits-rlhost-cpu.json" | tee -a "$out/summary.txt"
  # BF16: rlhost's bf16 logits against transformers' float32 ones, at a bf16 tolerance
  # (operands rounded to 8 significant bits through two layers: about 1e-2 of the
  # largest logit; 3e-2 leaves room). transformers' own autocast error is printed
  # beside it for scale.
  "$py" "$dir/torch_ref.py" logits "$out/qwen2-small" "$ids" "$out/logits-transformers-bf16.json" --bf16
  "$dir/cuda-bench" -mode logits -device cuda -precision bf16 -dir "$out/qwen2-small" -ids "$ids" >"$out/logits-rlhost-cuda-bf16.json"
  "$py" "$dir/torch_ref.py" compare "$out/logits-transformers.json" "$out/logits-rlhost-cuda-bf16.json" --tol 3e-2 | tee -a "$out/summary.txt"
  "$py" "$dir/torch_ref.py" compare "$out/logits-transformers.json" "$out/logits-transformers-bf16.json" --tol 3e-2 | tee -a "$out/summary.txt"

  local prec pk flag
  for prec in fp32 bf16; do
    pk=$peak flag=
    [ "$prec" = bf16 ] && pk=$peak16 flag=--bf16
    echo "== 3. fwd+bwd tokens/s at Qwen2.5-0.5B dimensions ($prec, B=${BATCH:-4}, T=${SEQ:-512}, peak ${pk} TFLOPS)"
    "$dir/cuda-bench" -mode train -device cuda -precision "$prec" -batch "${BATCH:-4}" -seq "${SEQ:-512}" \
      -steps "${STEPS:-10}" -peak-tflops "$pk" | tee "$out/bench-rlhost-$prec.json"
    "$py" "$dir/torch_ref.py" bench --batch "${BATCH:-4}" --seq "${SEQ:-512}" --steps "${STEPS:-10}" \
      --peak-tflops "$pk" $flag | tee "$out/bench-pytorch-$prec.json"
    "$py" - "$out/bench-rlhost-$prec.json" "$out/bench-pytorch-$prec.json" "$prec" <<'PY' | tee -a "$out/summary.txt"
import json, sys
r, p = (json.load(open(f)) for f in sys.argv[1:3])
print(f"{sys.argv[3]} fwd+bwd tokens/s: rlhost {r['tokens_per_s']:.0f} ({r.get('mfu', 0):.1%} MFU, peak {r.get('peak_bytes', 0)/2**30:.2f} GiB), "
      f"{p['device']} {p['tokens_per_s']:.0f} ({p.get('mfu', 0):.1%} MFU, peak {p['peak_bytes']/2**30:.2f} GiB); "
      f"ratio rlhost/pytorch {r['tokens_per_s'] / p['tokens_per_s']:.2f}")
PY
  done
  echo "== 3b. the same fp32 run with flash-style attention (rlhost only: speed and peak memory)"
  "$dir/cuda-bench" -mode train -device cuda -flash -batch "${BATCH:-4}" -seq "${SEQ:-512}" \
    -steps "${STEPS:-10}" -peak-tflops "$peak" | tee "$out/bench-rlhost-fp32-flash.json"
  "$py" - "$out/bench-rlhost-fp32-flash.json" "$out/bench-rlhost-fp32.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
f, r = (json.load(open(x)) for x in sys.argv[1:3])
print(f"fp32 flash attention: {f['tokens_per_s']:.0f} tokens/s, peak {f.get('peak_bytes', 0)/2**30:.2f} GiB; "
      f"default attention {r['tokens_per_s']:.0f} tokens/s, peak {r.get('peak_bytes', 0)/2**30:.2f} GiB")
PY
  echo "results in $out (summary.txt)"
}

case "${1:-all}" in
  sdk) pack_sdk "${2:-}" ;;
  build) build "${2:-}" ;;
  run) run_bundle "${2:-}" ;;
  all)
    build ""
    run_bundle "$here/../../bin/cuda-gpu-check"
    ;;
  *) sed -n '2,26p' "$0"; exit 2 ;;
esac
