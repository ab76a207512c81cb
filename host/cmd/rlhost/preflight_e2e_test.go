package main

// Pre-flight: services that are down, refuse the key, or lack the model stop
// `rlhost run` before the first episode, with one line naming the block.

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/host/policy/fakeopenai"
	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
)

// closedURL returns a base URL on which nothing listens.
func closedURL(t *testing.T, path string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + path
	ln.Close()
	return url
}

// lineOf is the 1-based line of the first line of src starting with prefix.
func lineOf(t *testing.T, src, prefix string) int {
	t.Helper()
	for i, l := range strings.Split(src, "\n") {
		if strings.HasPrefix(l, prefix) {
			return i + 1
		}
	}
	t.Fatalf("no line starts with %q", prefix)
	return 0
}

const openaiJob = `run {
  batch_size = 2
  group_size = 2
}
sandbox "local" { backend = "local" }
env "coding" { tasks = "builtin" }
policy "vllm" {
  provider = "openai"
  base_url = %q
  model = %q
  max_retries = 1
  backoff_base = "1ms"
  backoff_max = "2ms"
}
output { dir = "out" }
`

func TestPreflightPolicy(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("def sort_list(xs):\n    return sorted(xs)\n")))
	defer srv.Close()
	srv.SetModels("Qwen/Qwen2.5-0.5B-Instruct")
	down := closedURL(t, "/v1")
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"message":"loading","type":"server_error","code":null}}`))
	}))
	defer busy.Close()
	for _, tc := range []struct {
		name, url, model string
		want             []string
		not              string
	}{
		// Nothing listening: no answer says "try again", so no retries.
		{"server down", down, "Qwen/Qwen2.5-0.5B-Instruct", []string{"GET " + down + "/models: connection refused: nothing listens at " + strings.TrimSuffix(strings.TrimPrefix(down, "http://"), "/v1")}, "retry"},
		{"server busy", busy.URL + "/v1", "Qwen/Qwen2.5-0.5B-Instruct", []string{"GET " + busy.URL + "/v1/models: giving up after 2 attempts", "HTTP 503",
			// The retry is announced while it waits, not only at the end.
			"HTTP 503: loading; retry 1 of 1 in "}, ""},
		{"unknown model", srv.URL, "Qwen/Qwen3-8B", []string{"GET " + srv.URL + "/models", `model "Qwen/Qwen3-8B" is not served (the server has Qwen/Qwen2.5-0.5B-Instruct)`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := fmt.Sprintf(openaiJob, tc.url, tc.model)
			write(t, dir, "job.hcl", src)
			head := fmt.Sprintf(`rlhost: policy "vllm" (job.hcl:%d): `, lineOf(t, src, "policy"))
			for _, args := range [][]string{{"run", "job.hcl"}, {"validate", "--check-services", "job.hcl"}} {
				r := rlhost(t, dir, args...)
				if r.code != 1 {
					t.Errorf("%v: exit %d, want 1: %+v", args, r.code, r)
				}
				if !strings.Contains(r.stderr, head) {
					t.Errorf("%v: stderr lacks %q:\n%s", args, head, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%v: stderr lacks %q:\n%s", args, w, r.stderr)
					}
				}
				if tc.not != "" && strings.Contains(r.stderr, tc.not) {
					t.Errorf("%v: stderr has %q:\n%s", args, tc.not, r.stderr)
				}
				if strings.Contains(r.stderr, "every episode failed") {
					t.Errorf("%v: episodes ran:\n%s", args, r.stderr)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "out", "trajectories.jsonl")); err == nil {
				t.Errorf("a run that failed its pre-flight wrote trajectories")
			}
			if r := rlhost(t, dir, "validate", "job.hcl"); r.code != 0 {
				t.Errorf("plain validate contacts no service, yet failed: %+v", r)
			}
		})
	}
	if srv.Requests() != 0 {
		t.Errorf("%d chat completions reached the server; pre-flight should have stopped the run", srv.Requests())
	}
	// Services that answer pass.
	dir := t.TempDir()
	write(t, dir, "job.hcl", fmt.Sprintf(openaiJob, srv.URL, "Qwen/Qwen2.5-0.5B-Instruct"))
	r := rlhost(t, dir, "validate", "--check-services", "job.hcl")
	if r.code != 0 || !strings.Contains(r.stdout, "services the policy server and the sandbox backend answered") {
		t.Errorf("validate --check-services with services up: %+v", r)
	}
}

func TestPreflightDaytona(t *testing.T) {
	srv := startFakeDaytona(t)
	down := closedURL(t, "/api")
	for _, tc := range []struct {
		name, url, key string
		head           string // "" for the pre-flight's line
		want           []string
	}{
		// The backend already checks the key when it is configured.
		// The key is not in the block: the error is placed on the line
		// that chose the backend.
		{"wrong key", srv.URL, "sk-wrong", "job.hcl:3:13: Error: Daytona rejected the API key", []string{srv.URL + " answered HTTP 401"}},
		{"no route", down, fakedaytona.DefaultAPIKey, "", []string{strings.TrimPrefix(down, "http://"), "connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "replay.jsonl", `{"task_id":"sort_list","completions":["def sort_list(xs): return sorted(xs)\n"]}
{"task_id":"max_subarray","completions":["def max_subarray(xs): return 0\n"]}
`)
			src := fmt.Sprintf(`run { batch_size = 2 }
sandbox "box" {
  backend = "daytona"
  api_url = %q
  max_retries = 1
}
env "coding" { tasks = "builtin" }
policy "replay" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`, tc.url)
			write(t, dir, "job.hcl", src)
			env := []string{"DAYTONA_API_KEY=" + tc.key, "XDG_STATE_HOME=" + t.TempDir()}
			r := rlhostEnv(t, dir, env, "run", "job.hcl")
			head := tc.head
			if head == "" {
				head = fmt.Sprintf(`rlhost: sandbox "box" (job.hcl:%d): backend daytona: `, lineOf(t, src, "sandbox"))
			}
			t.Logf("stderr:\n%s", r.stderr)
			if r.code != 1 || !strings.Contains(r.stderr, head) {
				t.Fatalf("exit %d; want 1 and %q in stderr:\n%s", r.code, head, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
	if srv.Creates() != 0 {
		t.Errorf("%d sandboxes were created; pre-flight should have stopped the run", srv.Creates())
	}
}
