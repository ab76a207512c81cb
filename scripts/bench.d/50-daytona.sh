run_block "Daytona backend: exec round trip against the wire-level fake" \
"\`echo hi\` through the backend (argv framing, output caps, timeout detection) against the SDK's bare ExecuteCommand on the same fake, on loopback. Real network round trips dominate in the cloud; this isolates rlhost's own cost." \
  go test -run '^$' -bench BenchmarkExec -benchtime 50x ./plugins/daytona/
