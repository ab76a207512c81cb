# MBPP episodes per second with an instant scripted policy, against the raw
# cost of the same sandbox calls made directly: the per-turn overhead.
BENCH_HEADER="| benchmark | per episode | baseline (same run) | overhead ratio | CPUs |
|---|---|---|---|---|" \
run_block "MBPP env: episodes per second and per-turn overhead" \
"Whole episodes on the sample set through real gRPC and the local backend: one write_file of the reference solution, then the end of the turn and grading. In the same loop the episode's sandbox calls are replayed straight on the backend, and a bare \`/bin/true\` exec is timed; the ratio is host + plugin overhead per episode." \
  go test ./envs/mbpp/ -run '^$' -bench BenchmarkEpisode -benchtime 48x -v
row='isolation=namespaces'
summary_row "an mbpp episode (write_file + grading), local sandboxes" "$(cell "$row" 2)" "$(cell "$row" 3)" "$(cell "$row" 4)"
