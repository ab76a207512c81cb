section python "Python environment plugins against Go ones" \
"The same work through an env plugin written in Go and one written in Python with rlhost_env (under Debian's /usr/bin/python3), interleaved in one loop on one local backend. *exec*: a Step that runs \`true\` in the lent sandbox (each SDK's own client of the lent-sandbox socket, each env's Step on its episode socket), with the same exec sent straight to the backend as the floor. *episode*: NewEpisode + Step + End of the echo env (write the reply into the sandbox, \`cat\` it back), Go's examples/echo-env against examples/python-env/echo_env.py, each in a fresh sandbox whose creation is not timed. Medians in µs."
run_md "| what | iterations | backend direct (µs) | Go env (µs) | Python env (µs) | Python / Go |
|---|---|---|---|---|---|" go test -run XXX -bench 'BenchmarkPythonEnv' -benchtime 200x ./host/cmd/rlhost/
row='echo episode'
summary_row "an echo episode through a Python env plugin" "$(cell "$row" 5) µs" "the same through the Go plugin: $(cell "$row" 4) µs" "$(cell "$row" 6)"
