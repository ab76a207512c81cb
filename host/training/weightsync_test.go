package training

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/host/config"
)

// decodeWith decodes a job whose policy block is policy, in a directory
// that holds a model directory "base" (a config.json is all Decode looks
// for).
func decodeWith(t *testing.T, policy, trainer string) (*Settings, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "base"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "base", "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := "env \"e\" {}\nsandbox \"s\" { backend = \"local\" }\n" + policy + "\nrun { steps = 10 }\n" + trainer
	f, diags := config.Parse(filepath.Join(dir, "job.hcl"), []byte(src), nil)
	if diags.HasErrors() {
		t.Fatalf("config: %v", diags)
	}
	s, diags := Decode(f, 1, f.Run.Steps)
	var msgs []string
	for _, d := range diags {
		where := ""
		if d.Subject != nil {
			where = fmt.Sprintf("%s:%d:%d", filepath.Base(d.Subject.Filename), d.Subject.Start.Line, d.Subject.Start.Column)
		}
		msgs = append(msgs, where+": "+d.Summary+": "+d.Detail)
	}
	return s, strings.Join(msgs, "\n")
}

const vllmPolicy = `policy "p" {
  provider = "vllm"
  base_url = "http://127.0.0.1:8000/v1"
  model    = "Qwen/Qwen2.5-0.5B-Instruct"
}`

func TestDecodeWeightsSync(t *testing.T) {
	s, errs := decodeWith(t, vllmPolicy, `trainer {
  weights_sync          = "lora"
  model                 = "base"
  adapter_dir           = "/shared/adapters"
  importance_ratio_warn = 0.05
  lora {
    rank = 8
  }
}`)
	if errs != "" {
		t.Fatal(errs)
	}
	if s.Sync == nil || s.Sync.Mode != "lora" || filepath.Base(s.Sync.Model) != "base" || !filepath.IsAbs(s.Sync.Model) ||
		s.Sync.AdapterDir != "/shared/adapters" || s.Sync.RatioWarn != 0.05 {
		t.Errorf("sync settings %+v", s.Sync)
	}
	s, errs = decodeWith(t, vllmPolicy, "trainer {\n  weights_sync = \"lora\"\n  model = \"base\"\n  lora {\n    rank = 8\n  }\n}")
	if errs != "" || s.Sync.AdapterDir != "" || s.Sync.RatioWarn != DefaultRatioWarn {
		t.Errorf("defaults: %+v %s", s.Sync, errs)
	}
}

func TestDecodeWeightsSyncErrors(t *testing.T) {
	embedded := `policy "p" { provider = "embedded" }`
	openai := `policy "p" {
  provider = "openai"
  model    = "gpt"
}`
	for _, c := range []struct {
		name, policy, block, want string
	}{
		{"vllm without a sync", vllmPolicy, "trainer {\n}", `job.hcl:9:1: Training needs a weight sync: The policy is served by vLLM (provider = "vllm"): set weights_sync = "lora"`},
		{"sync with the embedded server", embedded, "trainer {\n  weights_sync = \"lora\"\n  model = \"base\"\n}", `job.hcl:6:18: Invalid trainer setting: the "embedded" policy samples the weights being trained in-process, so there is nothing to sync`},
		{"sync with openai", openai, "trainer {\n  weights_sync = \"lora\"\n  model = \"base\"\n}", `Invalid trainer setting: weights_sync = "lora" loads adapters through vLLM's runtime LoRA API, which provider "openai" does not have`},
		{"unknown mode", vllmPolicy, "trainer {\n  weights_sync = \"nccl\"\n  model = \"base\"\n}", `job.hcl:10:18: Invalid trainer setting: weights_sync "nccl" is not supported`},
		{"no model", vllmPolicy, "trainer {\n  weights_sync = \"lora\"\n}", `job.hcl:10:18: Invalid trainer setting: weights_sync = "lora" needs model`},
		{"model not a model", vllmPolicy, "trainer {\n  weights_sync = \"lora\"\n  model = \"nowhere\"\n}", `job.hcl:11:11: Invalid trainer setting: `},
		{"sync setting without a sync", embedded, "trainer {\n  adapter_dir = \"x\"\n}", `job.hcl:6:17: Invalid trainer setting: adapter_dir is a weights_sync setting`},
		{"no lora block", vllmPolicy, "trainer {\n  weights_sync = \"lora\"\n  model = \"base\"\n}", `job.hcl:10:18: Invalid trainer setting: weights_sync = "lora" trains a LoRA adapter: add a lora block`},
		{"bad threshold", vllmPolicy, "trainer {\n  weights_sync = \"lora\"\n  model = \"base\"\n  importance_ratio_warn = 0\n}", `importance_ratio_warn 0 must be positive`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errs := decodeWith(t, c.policy, c.block)
			if !strings.Contains(errs, c.want) {
				t.Errorf("got:\n%s\nwant it to contain:\n%s", errs, c.want)
			}
		})
	}
}

func TestDecodeWeightsSyncRefusesFullWarmup(t *testing.T) {
	_, errs := decodeWith(t, vllmPolicy, "trainer {\n  weights_sync = \"lora\"\n  model = \"base\"\n  lora {\n    rank = 4\n  }\n  warmup {\n    file = \"w.jsonl\"\n    lora = false\n  }\n}")
	if !strings.Contains(errs, "job.hcl:9:1: Warm-up with weights_sync") {
		t.Errorf("got %s", errs)
	}
	_, errs = decodeWith(t, vllmPolicy, "trainer {\n  weights_sync = \"lora\"\n  model = \"base\"\n  lora {\n    rank = 4\n  }\n  warmup {\n    file = \"w.jsonl\"\n  }\n}")
	if errs != "" {
		t.Errorf("an adapter warm-up is refused: %s", errs)
	}
}
