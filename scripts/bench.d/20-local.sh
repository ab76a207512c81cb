run_block "Local sandbox backend: latency and throughput" \
"Create → first exec of \`true\` → destroy (cold, and from a warm pool), exec round trips in a warm sandbox (each taking turns with a bare fork/exec of the same command), and 64 sandboxes alive at once running Python; baselines in the same run: \`bwrap --unshare-all\` (Debian bubblewrap) and bare fork/exec of the same command." \
  sh plugins/local/bench/run.sh -n 300 -concurrent 64
run_block "Local sandbox backend: the floor, interleaved" \
"The two latency figures the local backend aims at, each iteration taking turns between the backend and its baseline so load on a shared machine hits both alike: cold create → first exec of \`true\` against \`bwrap --unshare-all\` (goal ≤ 1.0x), and a warm exec round trip against a bare fork/exec (goal ≤ 1.2x). A third row starts inits without the launcher." \
  sh plugins/local/bench/run.sh -only floor -n 300
row='cold create → first exec | true'
summary_row "cold sandbox create → first exec of \`true\`" "$(cell "$row" 5)" "$(cell "$row" 4)" "$(cell "$row" 6)"
run_block "Local sandbox backend: warm exec alone" \
"The warm exec round trip against a bare fork/exec with no sandbox creation in the loop (goal ≤ 1.2x): in the floor rows above, each warm exec follows a create started without the launcher, which forks the benchmark's process and leaves copy-on-write faults on whatever runs next." \
  sh plugins/local/bench/run.sh -only warm -n 400
row='exec round trip, warm sandbox, no creates'
summary_row "exec round trip of \`true\` in a warm sandbox" "$(cell "$row" 5)" "$(cell "$row" 4)" "$(cell "$row" 6)"
run_block "Local sandbox backend: CPU per sandbox" \
"CPU time rather than latency: one create → exec of \`true\` → destroy, against one \`bwrap --unshare-all true\` and one \`python3 -c pass\`, counted in a cgroup v2 that holds the benchmark and all its descendants (sandbox inits and the launcher included). A scored completion in the coding env starts one interpreter, so the second row bounds what a fresh sandbox per completion leaves of the scoring throughput goal (see the coding rows above)." \
  sh plugins/local/bench/run.sh -only cpu -n 100
row='python3 -c pass'
summary_row "CPU of one sandbox: create → exec of \`true\` → destroy" "$(cell "$row" 4)" "$(cell "$row" 3)" "$(cell "$row" 5)"
