package training

import (
	"strings"
	"testing"

	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/optim"
)

func decode(t *testing.T, trainer string) (*Settings, string) {
	t.Helper()
	src := `
env "e" {}
sandbox "s" { backend = "local" }
policy "p" { provider = "embedded" }
run { steps = 10 }
` + trainer
	f, diags := config.Parse("/jobs/job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatalf("config: %v", diags)
	}
	s, diags := Decode(f, 0.7, f.Run.Steps)
	var msgs []string
	for _, d := range diags {
		where := ""
		if d.Subject != nil {
			where = d.Subject.String()
		}
		msgs = append(msgs, where+": "+d.Summary+": "+d.Detail)
	}
	return s, strings.Join(msgs, "\n")
}

func TestDecodeTrainerBlock(t *testing.T) {
	s, errs := decode(t, `
trainer {
  loss_type         = "grpo"
  learning_rate     = 0.001
  num_iterations    = 2
  lr_scheduler_type = "cosine"
  micro_batch       = 4
  checkpoint_every  = 5
  deterministic     = true
  warmup {
    file  = "sft.jsonl"
    steps = 20
  }
}`)
	if errs != "" {
		t.Fatal(errs)
	}
	g := s.GRPO
	if g.LossType != "grpo" || g.LR != 0.001 || g.NumIterations != 2 || g.Schedule != "cosine" || g.MicroBatch != 4 {
		t.Errorf("settings not applied: %+v", g)
	}
	if g.Temperature != 0.7 || g.TotalSteps != 20 {
		t.Errorf("temperature %v and total steps %v, want the policy's 0.7 and 10 steps x 2 iterations", g.Temperature, g.TotalSteps)
	}
	if g.Epsilon != 0.2 || g.MaxGradNorm != 1 {
		t.Errorf("defaults lost: %+v", g)
	}
	if s.CheckpointEvery != 5 || !s.Deterministic || s.Warmup == nil || s.Warmup.File != "/jobs/sft.jsonl" || s.Warmup.Steps != 20 {
		t.Errorf("host settings: %+v warmup %+v", s, s.Warmup)
	}
}

func TestDecodeTrainerBlockErrors(t *testing.T) {
	cases := []struct {
		name, block, want string
	}{
		{"unknown with suggestion", "trainer {\n  learning_rat = 0.1\n}", `job.hcl:7,3-15: Unsupported argument: An argument named "learning_rat" is not expected here. Did you mean "learning_rate"?`},
		{"wrong type", "trainer {\n  micro_batch = \"four\"\n}", "job.hcl:7,17-23: Invalid trainer setting: micro_batch: want a whole number"},
		{"bad value", "trainer {\n  loss_type = \"ppo\"\n}", `job.hcl:7,15-20: Invalid trainer setting: loss_type "ppo" is not one of`},
		{"derived", "trainer {\n  temperature = 1\n}", "job.hcl:7,17-18: Setting not allowed here: temperature is not set in the trainer block"},
		{"device", "trainer {\n  device = \"tpu\"\n}", `job.hcl:7,12-17: Invalid trainer setting: device "tpu" is not one of auto, cpu, cuda`},
		{"precision", "trainer {\n  precision = \"fp8\"\n}", `job.hcl:7,15-20: Invalid trainer setting: precision "fp8" is not one of fp32, bf16`},
		{"bf16 on the cpu", "trainer {\n  device = \"cpu\"\n  precision = \"bf16\"\n}", `job.hcl:8,15-21: Invalid trainer setting: precision "bf16" needs device "cuda"`},
		{"bf16 without CUDA", "trainer {\n  precision = \"bf16\"\n}", `precision "bf16" needs a build with the CUDA backend`},
		{"deterministic", "trainer {\n  deterministic = \"yes\"\n}", `job.hcl:7,19-24: Invalid trainer setting: deterministic:`},
		{"warmup needs a file", "trainer {\n  warmup {\n  }\n}", `Missing required argument`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs := decode(t, c.block)
			if !strings.Contains(errs, c.want) {
				t.Errorf("got:\n%s\nwant it to contain:\n%s", errs, c.want)
			}
		})
	}
}

// Values TRL accepts in another spelling, and the defaults a TRL user
// expects of the trainer block.
func TestDecodeTRLSpellings(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		check       func(g grpo.Config) bool
	}{
		{"scale_rewards true is group", `scale_rewards = true`, func(g grpo.Config) bool { return g.ScaleRewards == grpo.ScaleGroup }},
		{"scale_rewards false is none", `scale_rewards = false`, func(g grpo.Config) bool { return g.ScaleRewards == grpo.ScaleNone }},
		{"scale_rewards by name", `scale_rewards = "batch"`, func(g grpo.Config) bool { return g.ScaleRewards == grpo.ScaleBatch }},
		{"sampling_clip_max defaults to 3", `sampling_correction = "token_mask"`,
			func(g grpo.Config) bool { return g.SamplingClipMax != nil && *g.SamplingClipMax == 3 }},
		{"sampling_clip_max null is no bound", "sampling_correction = \"token_mask\"\n  sampling_clip_max = null",
			func(g grpo.Config) bool { return g.SamplingClipMax == nil }},
		{"null elsewhere keeps the default", `learning_rate = null`, func(g grpo.Config) bool { return g.LR == 1e-6 }},
		{"the schedule is transformers' linear", ``, func(g grpo.Config) bool { return g.Schedule == optim.Linear && g.TotalSteps == 10 }},
		{"sapo temperatures", "loss_type = \"sapo\"\n  sapo_temperature_neg = 2",
			func(g grpo.Config) bool { return g.SAPOTemperatureNeg == 2 && g.SAPOTemperaturePos == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, errs := decode(t, "trainer {\n  "+tc.block+"\n}")
			if errs != "" {
				t.Fatal(errs)
			}
			if !tc.check(s.GRPO) {
				t.Errorf("decoded %+v", s.GRPO)
			}
		})
	}
	_, errs := decode(t, "trainer {\n  sampling_correction = \"token_truncate\"\n  sampling_clip_max = null\n}")
	if want := "needs at least one bound"; !strings.Contains(errs, want) {
		t.Errorf("truncation without bounds: got %q, want %q", errs, want)
	}
	_, errs = decode(t, "trainer {\n  scale_rewards = 1\n}")
	if want := "want a string"; !strings.Contains(errs, want) {
		t.Errorf("scale_rewards = 1: got %q, want %q", errs, want)
	}
}
