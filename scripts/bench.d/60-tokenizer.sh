run_block "Tokenizer throughput" \
"Encoding the test corpus with the real Qwen tokenizer, against the JavaScript reference implementation (@lenml/tokenizers on node) on the same corpus in the same run." \
  bash scripts/tokenizer/bench.sh
row='Encode (warm)'
summary_row "tokenizer Encode, tokens/s" "$(cell "$row" 2)" "$(cell "$row" 3)" "$(cell "$row" 4)"
