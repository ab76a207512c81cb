run_block "Local sandbox backend: latency and throughput" \
"Create → first exec of \`true\` → destroy (cold, and from a warm pool), exec round trips in a warm sandbox, and 64 sandboxes alive at once running Python; baselines in the same run: \`bwrap --unshare-all\` (Debian bubblewrap) and bare fork/exec of the same command." \
  sh plugins/local/bench/run.sh -n 300 -concurrent 64
