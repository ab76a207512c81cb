run_block "Daytona backend: exec round trip against the wire-level fake" \
"\`echo hi\` through the backend (argv framing, output caps, timeout detection) against the SDK's bare ExecuteCommand on the same fake, on loopback. Real network round trips dominate in the cloud; this isolates rlhost's own cost." \
  go test -run '^$' -bench BenchmarkExec -benchtime 50x ./plugins/daytona/
exec=$(bench_value BenchmarkExec/backend-exec ns/op) sdk=$(bench_value BenchmarkExec/baseline-sdk-execute ns/op)
summary_row "exec of \`echo hi\` against the wire-level fake" "$(ms_of "$exec")" "the SDK's bare ExecuteCommand: $(ms_of "$sdk")" "$(ratio "$exec" "$sdk")"
