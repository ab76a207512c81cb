run_block "Quickstart: one training job end to end" \
"\`rlhost run examples/quickstart.hcl\` (what \`make run\` does after building): the warm-up, then 40 GRPO steps of 4 tasks × 8 completions, each scored in a fresh local sandbox. Per step, medians over the steps: the rollout's wall clock split between generation (waiting on the embedded server) and scoring (sandboxes and the env), and the update. The yardstick for scoring is the host's own completions-per-second figure above; for the reward, the first and last 20% of the steps." \
  bash scripts/quickstart-bench.sh
