# The PyTorch yardstick: Debian's PyTorch 1.13 with OpenBLAS (pthreads) as
# its BLAS, installed here rather than in make test's path.
if ! /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get install -y python3-torch libopenblas0-pthread >&2 ||
    { $sudo apt-get update -qq >&2 && $sudo apt-get install -y python3-torch libopenblas0-pthread >&2; } ||
    { echo "bench: could not install python3-torch and libopenblas0-pthread with apt-get; the trainer section compares against them" >&2; exit 1; }
fi
run_block "Trainer: CPU backend and Qwen2 model" \
"Every figure with its yardsticks measured in the same run: a tight FMA loop (single thread and all cores), single-thread and all-core sgemm with rlhost's matmul, OpenBLAS's all-core sgemm (through PyTorch's torch.mm), and the same work in PyTorch 1.13 (Debian's python3-torch on OpenBLAS, OMP_NUM_THREADS = all cores, OMP_WAIT_POLICY=PASSIVE because spinning OpenMP threads collapse on a loaded shared machine) on a Qwen2 written out by hand in trainer/bench/torch_qwen2.py: forward+backward of the mean target log-prob, one AdamW step, and KV-cache decoding with sampling (32-token prompts prefilled, then 64 tokens sampled per sequence, the prefill counted in the time on both sides). Each PyTorch figure is taken right after rlhost's. Decoding is also set against its sgemm-bound floor: the rate at which the run's linear-layer work (prefill included) would finish at rlhost's all-core sgemm speed, the better of two measurements right before and right after rlhost's run in each round. The goals for batch 16 at the 0.5B dimensions: at least 1.5× PyTorch and 50% of the floor; batch 1 at least 1.9× PyTorch. The 0.5B rows use the real Qwen2.5-0.5B dimensions (896 hidden, 24 layers, 14/2 heads, 4864 MLP, 151936 vocab) with random weights at sequence 256; peak memory is the process's." \
  go run ./trainer/bench --heavy --torch /usr/bin/python3
for row in '10m fwd+bwd, B=4' 'qwen2.5-0.5b fwd+bwd, B=1' 'qwen2.5-0.5b AdamW update' 'qwen2.5-0.5b generate, KV cache, batch 1,' 'qwen2.5-0.5b generate, KV cache, batch 16,' 'qwen2.5-0.5b generate, KV cache, batch 16, 32+64 tokens against'; do
  summary_row "$(cell "$row" 1)" "$(cell "$row" 2)" "$(cell "$row" 3)" "$(cell "$row" 4)"
done
