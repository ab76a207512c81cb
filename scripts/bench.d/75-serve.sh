run_block "Embedded policy server: batched generation" \
"Aggregate generated tokens per second of \`trainer/serve\` at 1, 4 and 16 concurrent chat requests (go-openai over loopback HTTP, chat template and tokenizer included, MaxBatch 16), and the same-run yardstick: \`trainer/generate\` decoding the same model at batch 1 and 16 with no server. Random models of the preset shapes, widened to the Qwen tokenizer's vocabulary as \`rlhost model init --tokenizer\` makes them (which makes the 10m preset's output layer its largest matrix). 16 concurrent requests should reach at least 4× the single-request rate." \
  go run ./trainer/serve/bench --presets 10m:64:3,qwen2.5-0.5b:16:1
row='10m (45M params, vocab 151669) | server, 16 concurrent'
summary_row "embedded server, 16 concurrent requests, 10m model" "$(cell "$row" 7) tok/s" "1 request at a time, same run" "$(cell "$row" 8)"
