package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A broken config is reported as such even when the output directory
// already holds a run: --overwrite is not the first thing to fix.
func TestConfigErrorsComeBeforeTheOutputDirCheck(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "out/trajectories.jsonl", "")
	write(t, dir, "replay.jsonl", `{"task_id":"sort_list","completions":["x"]}`+"\n")
	write(t, dir, "job.hcl", `
sandbox "s" { backend = "local" }
env "coding" {
  tasks    = "builtin"
  tiemout  = "2s"
}
policy "p" {
  provider = "replay"
  file     = "replay.jsonl"
}
output { dir = "out" }
`)
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 1 || !strings.Contains(r.stderr, "job.hcl:5:3") || strings.Contains(r.stderr, "--overwrite") {
		t.Fatalf("want the config error at job.hcl:5:3 and no word of --overwrite; got %+v", r)
	}
	// Once the config is right, the earlier run is in the way.
	write(t, dir, "job.hcl", strings.Replace(readFile(t, filepath.Join(dir, "job.hcl")), "tiemout", "timeout", 1))
	r = rlhost(t, dir, "run", "job.hcl")
	if r.code != 1 || !strings.Contains(r.stderr, "--overwrite") {
		t.Fatalf("want the output directory refused; got %+v", r)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The README's first command, on a machine with no model, says in its own
// output what to run instead, and that command runs.
func TestReadmeFirstCommandSaysWhatToDoNext(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	readme := readFile(t, filepath.Join(root, "README.md"))
	_, block, _ := strings.Cut(readme, "```")
	_, block, _ = strings.Cut(block, "\n")
	block, _, _ = strings.Cut(block, "```")
	first := strings.Fields(strings.TrimSpace(strings.Split(block, "\n")[0]))
	if len(first) < 3 || first[0] != "rlhost" {
		t.Fatalf("the README's first code block does not start with an rlhost command: %q", block)
	}
	out := t.TempDir()
	r := rlhost(t, root, append(first[1:], "--out", out)...)
	if r.code == 0 {
		return // it ran
	}
	const cue = "To try this job without a model: "
	_, next, ok := strings.Cut(r.stderr, cue)
	if !ok {
		t.Fatalf("%v failed without saying what to run instead:\n%s", first, r.stderr)
	}
	next, _, _ = strings.Cut(next, "\n")
	args := strings.Fields(next)
	if len(args) < 2 || args[0] != "rlhost" {
		t.Fatalf("the suggestion %q is not an rlhost command", next)
	}
	r = rlhost(t, root, append(args[1:], "--out", out)...)
	if r.code != 0 {
		t.Fatalf("the suggested %q failed: %+v", next, r)
	}
}

// A policy endpoint with nothing listening stops the run in the
// pre-flight, naming the URL, without a round of retries; validate
// --check-services says the same, and takes --dry-run like run does for a
// job with a trainer block.
func TestDeadPolicyEndpointFailsAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"OPENAI_BASE_URL=" + url}
	job := filepath.Join(root, "examples", "mbpp.hcl")
	for _, args := range [][]string{
		{"run", job, "--var", "policy=openai", "--dry-run", "--out", t.TempDir()},
		{"validate", job, "--var", "policy=openai", "--dry-run", "--check-services"},
	} {
		r := rlhostEnv(t, t.TempDir(), env, args...)
		want := "GET " + url + "/models: connection refused: nothing listens at " + ln.Addr().String()
		if r.code != 1 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "retry") {
			t.Errorf("%s: want exit 1 and %q without retries; got %+v", args[0], want, r)
		}
	}
}

// A setting the chosen backend requires and the block leaves out (the
// Daytona key) is reported at the line that chose the backend, with no
// word of a hidden value, since there is none.
func TestMissingBackendSettingPointsAtBackend(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"sort_list","completions":["x"]}`+"\n")
	write(t, dir, "job.hcl", `
sandbox "cloud" {
  timeout = "5s"
  backend = "daytona"
}
env "coding" { tasks = "builtin" }
policy "p" {
  provider = "replay"
  file     = "replay.jsonl"
}
`)
	r := rlhostEnv(t, dir, []string{"DAYTONA_API_KEY="}, "validate", "job.hcl")
	if r.code != 1 || !strings.Contains(r.stderr, "job.hcl:4:13: Error: no Daytona API key") || strings.Contains(r.stderr, "sensitive") {
		t.Fatalf("want the missing key at job.hcl:4:13 (backend =), without a hidden value; got %+v", r)
	}
}

// A plugin that dies before its handshake ends in one message that leads
// with what it last wrote to stderr and names the interpreter or command
// that ran it; go-plugin's boilerplate and a log line per stderr line are
// gone.
func TestPluginDyingBeforeHandshakeSaysWhy(t *testing.T) {
	if _, err := os.Stat(systemPython); err != nil {
		t.Skipf("needs %s", systemPython)
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The echo env away from the checkout: its fallback to
	// core/sdk/envplugin/python finds nothing, so rlhost_env cannot be imported.
	write(t, dir, "echo_env.py", readFile(t, filepath.Join(root, "examples", "python-env", "echo_env.py")))
	// An interpreter without site-packages has no grpcio, as many users'
	// python3 has not.
	nogrpc := write(t, dir, "python-without-grpcio", "#!/bin/sh\nexec "+systemPython+" -S \"$@\"\n")
	dies := write(t, dir, "dies", "#!/bin/sh\necho 'loading settings' >&2\necho 'cannot open /etc/my-env.conf: permission denied' >&2\nexit 3\n")
	for _, p := range []string{nogrpc, dies} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, plugin, python string
		want                 []string
	}{
		{"python without rlhost_env", "./echo_env.py", systemPython, []string{
			"ModuleNotFoundError: No module named 'rlhost_env'",
			"pip install ./core/sdk/envplugin/python",
			`(env plugin "./echo_env.py" exited with status 1 before its handshake; interpreter ` + systemPython,
		}},
		{"python without grpcio", filepath.Join(root, "examples", "python-env", "echo_env.py"), nogrpc, []string{
			"rlhost_env needs the grpcio and protobuf packages in ",
			"exited with status 1 before its handshake; interpreter " + nogrpc,
		}},
		{"executable", "./dies", "", []string{
			"job.hcl:3:12: Error: Env plugin failed to start",
			"loading settings\ncannot open /etc/my-env.conf: permission denied\n" +
				`(env plugin "./dies" exited with status 3 before its handshake; it ran as ` + dies + ")",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			python := ""
			if tc.python != "" {
				python = fmt.Sprintf("python = %q", tc.python)
			}
			write(t, dir, "job.hcl", fmt.Sprintf("sandbox \"s\" { backend = \"local\" }\nenv \"echo\" {\n  plugin = %q\n  %s\n}\npolicy \"p\" {\n  provider = \"rules\"\n  file     = \"rules.jsonl\"\n}\n", tc.plugin, python))
			write(t, dir, "rules.jsonl", `{"when": "(\\w+)$", "reply": "{{1}}"}`+"\n")
			r := rlhost(t, dir, "validate", "job.hcl")
			if r.code != 1 {
				t.Fatalf("exit %d, want 1: %+v", r.code, r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, bad := range []string{"Failed to read any lines", "compiled for this architecture", "[ERROR]", "Traceback"} {
				if strings.Contains(r.stderr, bad) {
					t.Errorf("stderr has %q:\n%s", bad, r.stderr)
				}
			}
		})
	}
}

// rlhost train checks every step of the file before it writes anything:
// a file without token ids leaves --out untouched, so running it again
// gives the same answer rather than a refusal of the empty files.
func TestTrainChecksInputsBeforeWriting(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if r := rlhost(t, dir, "run", filepath.Join(root, "examples", "coding.hcl"), "--dry-run", "--steps", "1", "--out", "replayed"); r.code != 0 {
		t.Fatalf("replay run: %+v", r)
	}
	for range 2 {
		r := rlhost(t, dir, "train", filepath.Join(root, "examples", "quickstart.hcl"), "--trajectories", "replayed/trajectories.jsonl", "--out", "offline")
		want := "replayed/trajectories.jsonl: step 0: group 0 episode 0 (task "
		if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "no token ids") {
			t.Fatalf("want exit 1 and %q ... no token ids; got %+v", want, r)
		}
		if _, err := os.Stat(filepath.Join(dir, "offline")); !os.IsNotExist(err) {
			t.Fatalf("train wrote to --out before failing: %v", err)
		}
	}
}

// rlhost train --help's example: offline training on what a quickstart run
// recorded starts from the same warmed-up model, so the trainer's log-probs
// agree with the server's; a second run into the same --out is refused
// with the choices train has.
func TestTrainHelpExample(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(root, "examples", "quickstart.hcl")
	dir := t.TempDir()
	if r := rlhost(t, dir, "run", job, "--steps", "2", "--var", "warmup_steps=20", "--out", "recorded"); r.code != 0 {
		t.Fatalf("quickstart run: %+v", r)
	}
	args := []string{"train", job, "--trajectories", "recorded/trajectories.jsonl", "--var", "warmup_steps=20", "--out", "offline"}
	r := rlhost(t, dir, args...)
	if r.code != 0 || strings.Contains(r.stderr, "drift") {
		t.Fatalf("want a quiet offline run; got %+v", r)
	}
	if got := readStepLines(t, filepath.Join(dir, "offline", "metrics.jsonl")); len(got) != 2 || got[0].Step != 0 || got[1].Step != 1 {
		t.Errorf("offline metrics %+v, want steps 0 and 1", got)
	}
	r = rlhost(t, dir, args...)
	if r.code != 1 || !strings.Contains(r.stderr, "pass --out DIR or --overwrite") || strings.Contains(r.stderr, "--append") {
		t.Fatalf("want the earlier run refused with train's own choices; got %+v", r)
	}
}

// Every doc is reachable from the README, not only from an HCL comment or
// another doc.
func TestReadmeLinksEveryDoc(t *testing.T) {
	readme := readFile(t, "../../../README.md")
	docs, err := filepath.Glob("../../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	for _, d := range append(docs, "../../../BENCHMARKS.md") {
		rel, _ := filepath.Rel("../../..", d)
		if !strings.Contains(readme, "]("+rel+")") {
			t.Errorf("README.md has no link to %s", rel)
		}
	}
}

// A misspelt backend on the command line is named with its near miss, and
// the error is not dressed as a place in a file that does not exist.
func TestSandboxExecMisspeltBackend(t *testing.T) {
	r := rlhost(t, t.TempDir(), "sandbox", "exec", "--backend", "lcoal", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, `unknown sandbox plugin "lcoal": did you mean "local"?`) ||
		strings.Contains(r.stderr, ":0:0") || strings.Contains(r.stderr, "source code not available") {
		t.Fatalf("want a plain error with a suggestion; got %+v", r)
	}
}

// A trainer setting the model cannot take (max_seq_len past its positions)
// is reported at that setting, once, by validate as by run, before any
// model is loaded.
func TestTrainerSettingBeyondTheModel(t *testing.T) {
	tok, err := filepath.Abs("../../../examples/quickstart/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, dir, "job.hcl", fmt.Sprintf(`sandbox "s" { backend = "local" }
env "coding" { tasks = "builtin" }
policy "student" {
  provider  = "embedded"
  init      = "tiny"
  tokenizer = %q
}
trainer {
  max_seq_len = 2048
}
`, tok))
	for _, cmd := range []string{"validate", "run"} {
		r := rlhost(t, dir, cmd, "job.hcl")
		want := "job.hcl:9:17: Error: Invalid trainer setting"
		if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "2048 is more than the model's max_position_embeddings (128)") ||
			strings.Count(r.stderr, `policy "student"`) > 1 {
			t.Errorf("%s: want %q and the model's limit, once; got %+v", cmd, want, r)
		}
	}
}
