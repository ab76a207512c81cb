package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlhost/rlhost/host/policy/fakevllm"
)

// Training a policy that another server samples (provider "vllm",
// weights_sync = "lora"), against rlhost's own server run as
// `rlhost model serve` (a real process) and against the fake vLLM in
// front of it.

// modelServer runs `rlhost model serve` on model dir under name and
// returns its base URL; the process is stopped when the test ends.
func modelServer(t *testing.T, modelDir, name string, lora bool) string {
	t.Helper()
	url, _ := modelServerProc(t, modelDir, name, lora)
	return url
}

// modelServerProc is modelServer that also returns the process, for a
// test that kills it.
func modelServerProc(t *testing.T, modelDir, name string, lora bool) (string, *exec.Cmd) {
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
		return strings.Fields(l[i:])[0], cmd
	case <-time.After(2 * time.Minute):
		t.Fatalf("model serve did not start: %s", stderr.String())
	}
	return "", nil
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
// name, trained from modelDir with weights_sync = "lora", writing to
// dir/out; rollouts run one step after another (max_off_policy_steps = 0)
// unless policyExtra is a fleet's base_urls and runExtra says otherwise.
func vllmJob(t *testing.T, dir, out, baseURL, name, modelDir string, steps, batch int, lr float64, policyExtra, trainerExtra string) {
	t.Helper()
	vllmJobRun(t, dir, out, baseURL, name, modelDir, steps, batch, lr, "max_off_policy_steps = 0", policyExtra, trainerExtra)
}

func vllmJobRun(t *testing.T, dir, out, baseURL, name, modelDir string, steps, batch int, lr float64, runExtra, policyExtra, trainerExtra string) {
	t.Helper()
	server := fmt.Sprintf("base_url    = %q", baseURL)
	if strings.HasPrefix(baseURL, "[") {
		server = "base_urls   = " + baseURL
	}
	write(t, dir, "vllm.hcl", fmt.Sprintf(`
run {
  name        = "vl"
  steps       = %d
  batch_size  = %d
  group_size  = 8
  seed        = 7
  concurrency = 8
  %s
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
  %s
  model       = %q
  temperature = 1.0
  max_tokens  = 16
  %s
}
trainer {
  weights_sync  = "lora"
  model         = %q
  learning_rate = %g
  micro_batch   = 16
  max_seq_len   = 64
  %s
}
output { dir = %q }
`, steps, batch, runExtra, server, name, policyExtra, modelDir, lr, trainerExtra, out))
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
			vllmJob(t, dir, "vpre", tc.url, "base", model, 1, 2, 0.003, "max_retries = 0", "lora {\n    rank = 4\n  }")
			r := rlhost(t, dir, "run", "vllm.hcl")
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

// warmedModel trains trainingJob's model in dir for one step after a
// warm-up and returns its final/ directory: a base model whose groups'
// rewards differ, so GRPO has something to learn.
func warmedModel(t *testing.T, dir string) string {
	t.Helper()
	trainingJob(t, dir, 1, 1, 8, 80)
	if r := rlhost(t, dir, "run", "job.hcl"); r.code != 0 {
		t.Fatalf("warm-up run: %+v", r)
	}
	return filepath.Join(dir, "out", "final")
}

// runID reads the run id from a run's summary.
func runID(t *testing.T, outDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(outDir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.RunID
}

// checkSynced checks a finished vllm run's metrics: each step that
// updated the adapter loaded it, and the server sampled with the weights
// the trainer scored (importance ratio 1), so the tokens trained on are
// the tokens sampled.
func checkSynced(t *testing.T, out string, steps int) (pushed int) {
	t.Helper()
	lines := readStepLines(t, filepath.Join(out, "metrics.jsonl"))
	if len(lines) != steps {
		t.Fatalf("%d metrics lines, want %d", len(lines), steps)
	}
	for _, l := range lines {
		e := l.Extra
		if e["train/updates"] == 0 {
			continue
		}
		pushed++
		t.Logf("step %d: importance ratio mean %.6f max %.6f", l.Step, e["train/sample_ratio_mean"], e["train/sample_ratio_max"])
		if e["sync/weights_version"] != float64(pushed) {
			t.Errorf("step %d: sync/weights_version %v, want %d (the updates so far)", l.Step, e["sync/weights_version"], pushed)
		}
		if r := e["train/sample_ratio_mean"]; math.Abs(r-1) > 1e-3 || e["train/sample_logprob_diff"] > 1e-3 || e["train/sample_ratio_clipped"] != 0 {
			t.Errorf("step %d: importance ratio mean %v (max %v, clipped %v), want 1: the server did not sample the trainer's weights",
				l.Step, r, e["train/sample_ratio_max"], e["train/sample_ratio_clipped"])
		}
		if e["train/tokens"] == 0 {
			t.Errorf("step %d trained on no tokens", l.Step)
		}
	}
	if pushed == 0 {
		t.Fatalf("no step updated the adapter: %+v", lines)
	}
	ads, _ := filepath.Glob(filepath.Join(out, "adapters", "*", "adapter_model.safetensors"))
	if len(ads) == 0 || len(ads) > 2 {
		t.Errorf("adapters dir holds %v, want the newest one or two", ads)
	}
	return pushed
}

// riseSteps, riseLR and riseTrainer make a LoRA run whose reward on the
// coding task rises: from about 0 to 0.4 to 0.7 by the tenth step in most
// runs, mostly late, and to only 0.25 in a slow one. Fourteen steps give a
// slow run time to show it. At 0.01 without warm-up an update could
// collapse the policy into code that does not run (a step at -0.81 after
// one at 0.72).
const (
	riseSteps   = 14
	riseLR      = 0.005
	riseTrainer = "warmup_steps = 2\n  lora {\n    rank = 4\n  }"
)

// checkRewardRises fits the trend of the step rewards with the Theil-Sen
// estimator (the median of the slopes between every pair of steps) and
// wants it to rise by at least 0.25 over the run: runs that learn rise by
// 0.6 to 0.75 over fourteen steps, and with the learning rate at 1e-9 two
// runs rose by 0.08 and 0.15 (noise). It uses every step, so noise (a
// step's mean reward over 32 episodes varies by about 0.1) weighs less
// than in the comparison of the two halves' medians it replaces, which
// failed a slow run of ten steps that was learning (rewards 0.09 -0.12
// 0.12 -0.06 0.19 0.22 0.09 0.09 0.28 0.25: medians 0.09 and 0.22); and,
// unlike a least-squares line, one collapsed step cannot pull it down.
func checkRewardRises(t *testing.T, out string) {
	t.Helper()
	lines := readStepLines(t, filepath.Join(out, "metrics.jsonl"))
	var r []float64
	var all []string
	for _, l := range lines {
		r = append(r, l.RewardMean)
		all = append(all, fmt.Sprintf("%.3f", l.RewardMean))
	}
	if len(r) < 4 {
		t.Fatalf("%d steps in the metrics, want at least 4", len(r))
	}
	var slopes []float64
	for i := range r {
		for j := i + 1; j < len(r); j++ {
			slopes = append(slopes, (r[j]-r[i])/float64(j-i))
		}
	}
	sort.Float64s(slopes)
	slope := slopes[len(slopes)/2]
	if len(slopes)%2 == 0 {
		slope = (slopes[len(slopes)/2-1] + slope) / 2
	}
	rise := slope * float64(len(r)-1)
	t.Logf("rewards %s; fitted rise %.3f", strings.Join(all, " "), rise)
	if rise < 0.25 {
		t.Errorf("reward did not rise: fitted rise %.3f over %d steps, want at least 0.25", rise, len(r))
	}
}

// GRPO runs with LoRA against rlhost's own server and against the fake
// vLLM in front of it: every update's adapter is written, loaded under
// RUNID-step-N and sampled from by the next step, and the reward rises. Then the failures:
// a refused adapter, a server restart.
func TestVLLMTraining(t *testing.T) {
	dir := t.TempDir()
	model := warmedModel(t, dir)
	base := modelServer(t, model, "base", true)

	t.Run("embedded server", func(t *testing.T) {
		vllmJob(t, dir, "vembedded", base, "base", model, riseSteps, 4, riseLR, "", riseTrainer)
		r := rlhost(t, dir, "run", "vllm.hcl")
		if r.code != 0 {
			t.Fatalf("run: %+v", r)
		}
		checkSynced(t, filepath.Join(dir, "vembedded"), riseSteps)
		checkRewardRises(t, filepath.Join(dir, "vembedded"))
		if !strings.Contains(r.stdout, "sync: ratio") {
			t.Errorf("no sync line in the progress:\n%s", r.stdout)
		}
	})
	t.Run("fake vLLM", func(t *testing.T) {
		fv := fakevllm.New(fakevllm.Options{BaseModel: "base", AllowRuntimeLoRA: true, Upstream: base, UpstreamLoRA: true})
		defer fv.Close()
		vllmJob(t, dir, "vfake", fv.URL()+"/v1", "base", model, riseSteps, 4, riseLR, "", riseTrainer)
		r := rlhost(t, dir, "run", "vllm.hcl")
		if r.code != 0 {
			t.Fatalf("run: %+v", r)
		}
		pushed := checkSynced(t, filepath.Join(dir, "vfake"), riseSteps)
		checkRewardRises(t, filepath.Join(dir, "vfake"))
		id := runID(t, filepath.Join(dir, "vfake"))
		loads := fv.Loads()
		if len(loads) != pushed {
			t.Fatalf("the server loaded %v, want %d adapters", loads, pushed)
		}
		for i, name := range loads {
			if !strings.HasPrefix(name, id+"-step-") {
				t.Errorf("adapter %d is named %q, want %s-step-N", i, name, id)
			}
		}
		if got := fv.Unloads(); len(got) != pushed-1 {
			t.Errorf("unloaded %v, want every adapter but the last", got)
		}
		// Step 0's requests name the base model; later ones the adapter
		// loaded before them.
		models := fv.Models()
		if models[0] != "base" || !slices.Contains(models, loads[0]) {
			t.Errorf("requests named %v, want base first and then %s", slices.Compact(models), loads[0])
		}
	})
	// A server that loads the adapters but samples the base model: the
	// off-policy guard sees the trainer's log-probs drift from the
	// server's, and warns.
	t.Run("server ignores the adapter", func(t *testing.T) {
		fv := fakevllm.New(fakevllm.Options{BaseModel: "base", AllowRuntimeLoRA: true, Upstream: base})
		defer fv.Close()
		vllmJob(t, dir, "vignored", fv.URL()+"/v1", "base", model, 2, 2, 0.003, "", "importance_ratio_warn = 0.0001\n  lora {\n    rank = 4\n  }")
		r := rlhost(t, dir, "run", "vllm.hcl")
		if r.code != 0 {
			t.Fatalf("run: %+v", r)
		}
		lines := readStepLines(t, filepath.Join(dir, "vignored", "metrics.jsonl"))
		last := lines[len(lines)-1].Extra
		t.Logf("last step: importance ratio mean %.6f max %.6f, mean |log ratio| %.6f", last["train/sample_ratio_mean"], last["train/sample_ratio_max"], last["train/sample_logprob_diff"])
		// Steps count from 0, as in metrics.jsonl: the second step is step 1.
		if lines[0].Extra["train/updates"] == 0 || !strings.Contains(r.stderr, "step 1: the trainer's log-probs drift from the server's") {
			t.Errorf("no drift warning for step 1:\n%s", r.stderr)
		}
	})
	// The server refuses the adapter: the run stops with the server's
	// reason and a checkpoint to resume from.
	t.Run("adapter refused", func(t *testing.T) {
		fv := fakevllm.New(fakevllm.Options{BaseModel: "base", AllowRuntimeLoRA: true, MaxLoRARank: 1, Upstream: base, UpstreamLoRA: true})
		defer fv.Close()
		vllmJob(t, dir, "vrefused", fv.URL()+"/v1", "base", model, 2, 2, 0.003, "", "lora {\n    rank = 4\n  }")
		r := rlhost(t, dir, "run", "vllm.hcl")
		if r.code != 1 {
			t.Fatalf("exit %d, want 1: %+v", r.code, r)
		}
		for _, s := range []string{"did not take the new adapter", "LoRA rank 4 is greater than max_lora_rank 1", "checkpoint saved; continue with"} {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
			}
		}
		ckpts, _ := filepath.Glob(filepath.Join(dir, "vrefused", "checkpoints", "step-*", "run_state.json"))
		if len(ckpts) != 1 {
			t.Fatalf("checkpoints %v, want one", ckpts)
		}
		// With a server that takes the adapter, --resume loads the
		// checkpoint's adapter before its first rollout and finishes.
		ok := fakevllm.New(fakevllm.Options{BaseModel: "base", AllowRuntimeLoRA: true, Upstream: base, UpstreamLoRA: true})
		defer ok.Close()
		vllmJob(t, dir, "vrefused", ok.URL()+"/v1", "base", model, 2, 2, 0.003, "", "lora {\n    rank = 4\n  }")
		r = rlhost(t, dir, "run", "vllm.hcl", "--resume", "vrefused")
		if r.code != 0 {
			t.Fatalf("resume: %+v", r)
		}
		loads, models := ok.Loads(), ok.Models()
		if len(loads) == 0 || !strings.HasSuffix(loads[0], "-step-1") || models[0] != loads[0] {
			t.Errorf("after --resume the server loaded %v and the first request named %q; want the checkpoint's step-1 adapter first", loads, models[0])
		}
	})
	// The server restarts mid-run: requests are retried and the adapter
	// is loaded again.
	t.Run("server restart", func(t *testing.T) {
		fv := fakevllm.New(fakevllm.Options{BaseModel: "base", AllowRuntimeLoRA: true, Upstream: base, UpstreamLoRA: true,
			RestartAfterLoad: 1, RestartDrops: 3})
		defer fv.Close()
		vllmJob(t, dir, "vrestart", fv.URL()+"/v1", "base", model, 2, 2, 0.003, `backoff_base = "10ms"`, "lora {\n    rank = 4\n  }")
		r := rlhost(t, dir, "run", "vllm.hcl")
		if r.code != 0 {
			t.Fatalf("run: %+v", r)
		}
		checkSynced(t, filepath.Join(dir, "vrestart"), 2)
		loads := fv.Loads()
		if fv.Restarts() != 1 || len(loads) < 2 || loads[0] != loads[1] {
			t.Errorf("restarts %d, loads %v: want the first adapter loaded again after the restart", fv.Restarts(), loads)
		}
	})
}
