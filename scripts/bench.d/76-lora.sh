run_block "Trainer: LoRA against full fine-tuning, one GRPO step" \
"Peak RSS and CPU time of one trainer/grpo Step at the Qwen2.5-0.5B shape (one group of two 256-token samples, micro-batch 1, after a warm-up step), training a LoRA adapter (alpha = 2r) on the frozen model against full fine-tuning. Each configuration runs in a fresh process of the same run, full fine-tuning first; the peak is the step's (the high-water mark is reset after the model is built). The baseline of every ratio is full fine-tuning in the same run." \
  go run ./trainer/bench --grpo qwen2.5-0.5b --seq 256 --lora-compare 16:q,v+16:all
row='LoRA r=16 q,v vs full fine-tuning, peak RSS'
summary_row "peak memory of a LoRA GRPO step (r=16 on q, v), Qwen2.5-0.5B shape" "$(cell "$row" 2)" "$(cell "$row" 3)" "$(cell "$row" 4)"
