run_block "Trainer: one GRPO step" \
"One trainer/grpo Step (advantages, forward, loss, backward, clipping, AdamW) on a random model: one group of two 256-token samples (32 prompt tokens, 224 trained), micro-batch 1, after a warm-up step. Each preset runs in its own process so that peak RSS is the step's; the memory baseline is grpo.EstimateMemory, the time baseline the bare model's forward+backward of the same sequences measured right after in the same process." \
  bash -c 'go run ./trainer/bench --grpo 10m && go run ./trainer/bench --grpo qwen2.5-0.5b'
row='qwen2.5-0.5b GRPO peak RSS'
summary_row "peak memory of one GRPO step, Qwen2.5-0.5B shape" "$(cell "$row" 2)" "$(cell "$row" 3)" "$(cell "$row" 4)"
