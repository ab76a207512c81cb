run_block "Trainer: CPU backend and Qwen2 model" \
"Every figure with its yardsticks measured in the same run: a tight FMA loop (single thread and all cores) and single-thread and all-core sgemm with the best matmul. The 0.5B row uses the real Qwen2.5-0.5B dimensions (896 hidden, 24 layers, 14/2 heads, 4864 MLP, 151936 vocab) with random weights at sequence 256; peak memory is the process's." \
  go run ./trainer/bench --heavy
