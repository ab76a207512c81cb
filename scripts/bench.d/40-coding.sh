run_block "Coding env: scoring one completion" \
"One sort_list completion scored over gRPC (8 tests, reference cached), against one bare \`python3 -I -c pass\` exec in the same run." \
  go test ./envs/coding -run '^$' -bench . -benchtime 30x
