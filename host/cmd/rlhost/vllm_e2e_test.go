package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Training a policy that another server samples (provider "vllm",
// weights_sync = "lora"), against rlhost's own server run as
// `rlhost model serve` (a real process) and against the fake vLLM in
// front of it.

// modelServer runs `rlhost model serve` on model dir under name and
// returns its base URL; the process is stopped when the test ends.
func modelServer(t *testing.T, modelDir, name string, lora bool) string {
	t.Helper()
	args := []string{"model", "serve", "--model", modelDir, "--name", name, "--port", "0", "--threads", "1"}
	if lora {
		args = append(args, "--enable-lora")
	}
	cmd := exec.Command(rlhostBin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-lines:
		i := strings.Index(l, "http://")
		if i < 0 {
			t.Fatalf("model serve said %q", l)
		}
		return strings.Fields(l[i:])[0]
	case <-time.After(2 * time.Minute):
		t.Fatalf("model serve did not start: %s", stderr.String())
	}
	return ""
}

// tinyModel writes a fresh 1m-preset model with the quickstart's
// tokenizer into dir/name.
func tinyModel(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	tok, _ := filepath.Abs("../../../examples/quickstart/tokenizer.json")
	if r := rlhost(t, dir, "model", "init", "--preset", "1m", "--tokenizer", tok, "--out", out, "--seed", "3"); r.code != 0 {
		t.Fatalf("model init: %+v", r)
	}
	return out
}

// vllmJob writes dir/vllm.hcl: the coding task of trainingJob (whose
// files it expects in dir), sampled by the server at baseURL under model
// name, trained from modelDir with weights_sync = "lora".
func vllmJob(t *testing.T, dir, baseURL, name, modelDir string, steps int, policyExtra, trainerExtra string) {
	t.Helper()
	write(t, dir, "vllm.hcl", fmt.Sprintf(`
run {
  name        = "vl"
  steps       = %d
  batch_size  = 4
  group_size  = 8
  seed        = 7
  concurrency = 8
}
sandbox "local" {
  backend = "local"
  timeout = "5s"
}
env "coding" {
  sandbox       = sandbox.local
  tasks         = "tasks.jsonl"
  system_prompt = "Answer with Python code only."
  timeout       = "2s"
}
policy "student" {
  provider    = "vllm"
  base_url    = %q
  model       = %q
  temperature = 1.0
  max_tokens  = 16
  %s
}
trainer {
  weights_sync  = "lora"
  model         = %q
  learning_rate = 0.003
  micro_batch   = 16
  max_seq_len   = 64
  %s
}
output { dir = "vout" }
`, steps, baseURL, name, policyExtra, modelDir, trainerExtra))
}

// The preflight stops a run whose server cannot take adapters, or is not
// there, before any episode, and names the URL and the fix.
func TestVLLMPreflight(t *testing.T) {
	dir := t.TempDir()
	trainingJob(t, dir, 1, 1, 1, 1)
	model := tinyModel(t, dir, "base")
	base := modelServer(t, model, "base", false)
	for _, tc := range []struct {
		name, url string
		says      []string
	}{
		{"runtime LoRA updating off", base, []string{"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True", base + "/unload_lora_adapter", "does not allow runtime LoRA updates"}},
		{"no server", "http://127.0.0.1:1/v1", []string{"GET http://127.0.0.1:1/v1/models", "connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vllmJob(t, dir, tc.url, "base", model, 1, "max_retries = 0", "")
			r := rlhost(t, dir, "run", "vllm.hcl", "--overwrite")
			if r.code != 1 {
				t.Fatalf("exit %d, want 1: %+v", r.code, r)
			}
			for _, s := range tc.says {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
				}
			}
			if strings.Contains(r.stdout, "step 0") {
				t.Errorf("a step ran:\n%s", r.stdout)
			}
		})
	}
}
