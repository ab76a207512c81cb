run_block "Coding env: scoring one completion" \
"One sort_list completion scored over gRPC (8 tests, reference cached), against one bare \`python3 -I -c pass\` exec in the same run." \
  go test ./envs/coding -run '^$' -bench . -benchtime 30x
score=$(bench_value BenchmarkScoreEpisode ns/op) bare=$(bench_value BenchmarkExecPythonBaseline ns/op)
summary_row "scoring one completion over gRPC (8 tests)" "$(ms_of "$score")" "one bare \`python3 -I -c pass\`: $(ms_of "$bare")" "$(ratio "$score" "$bare")"
