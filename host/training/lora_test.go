package training

import (
	"slices"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/model"
)

func TestDecodeLoRABlock(t *testing.T) {
	s, errs := decode(t, `
trainer {
  learning_rate = 0.0002
  lora {
    rank           = 16
    alpha          = 32
    dropout        = 0.05
    target_modules = ["q", "v_proj", "gate", "down_proj"]
    rslora         = true
    seed           = 4
  }
}`)
	if errs != "" {
		t.Fatal(errs)
	}
	l := s.GRPO.LoRA
	if l == nil || l.Rank != 16 || l.Alpha != 32 || l.Dropout != 0.05 || !l.RSLoRA || l.Seed != 4 ||
		!slices.Equal(l.Targets, []model.Module{model.QProj, model.VProj, model.GateProj, model.DownProj}) {
		t.Fatalf("lora settings: %+v", l)
	}
	// An empty block is PEFT's defaults.
	s, errs = decode(t, "trainer {\n  lora {}\n}")
	if errs != "" {
		t.Fatal(errs)
	}
	if l := s.GRPO.LoRA; l == nil || l.Rank != 8 || l.Alpha != 8 || l.Dropout != 0 || l.RSLoRA ||
		!slices.Equal(l.Targets, []model.Module{model.QProj, model.VProj}) {
		t.Fatalf("default lora settings: %+v", l)
	}
	// No block: full fine-tuning.
	if s, _ = decode(t, "trainer {}"); s.GRPO.LoRA != nil {
		t.Fatal("lora set without a lora block")
	}
}

func TestDecodeLoRABlockErrors(t *testing.T) {
	for _, c := range []struct{ name, block, want string }{
		{"typo in module", "trainer {\n  lora {\n    target_modules = [\"q\", \"gate_prj\"]\n  }\n}",
			`job.hcl:8,28-38: Unknown target module: "gate_prj" is not a module LoRA can adapt. Did you mean "gate_proj"?`},
		{"unknown module", "trainer {\n  lora {\n    target_modules = [\"lm_head\"]\n  }\n}",
			`job.hcl:8,23-32: Unknown target module: "lm_head" is not a module LoRA can adapt; the modules are q, k, v, o, gate, up, down`},
		{"duplicate module", "trainer {\n  lora {\n    target_modules = [\"q\", \"q_proj\"]\n  }\n}",
			`job.hcl:8,28-36: Duplicate target module: "q_proj" names q_proj`},
		{"empty modules", "trainer {\n  lora {\n    target_modules = []\n  }\n}", "job.hcl:8,22-24: Invalid lora setting: target_modules is empty"},
		{"not a list", "trainer {\n  lora {\n    target_modules = \"q\"\n  }\n}", "job.hcl:8,22-25: Invalid lora setting: target_modules must be a list"},
		{"rank", "trainer {\n  lora {\n    rank = 0\n  }\n}", "job.hcl:8,12-13: Invalid lora setting: rank 0 must be at least 1."},
		{"rank type", "trainer {\n  lora {\n    rank = \"big\"\n  }\n}", "job.hcl:8,12-17: Invalid lora setting: rank must be a whole number."},
		{"alpha", "trainer {\n  lora {\n    alpha = -1\n  }\n}", "Invalid lora setting: alpha -1 must be positive"},
		{"dropout", "trainer {\n  lora {\n    dropout = 1\n  }\n}", "job.hcl:8,15-16: Invalid lora setting: dropout 1 must be in [0, 1)."},
		{"unknown attribute", "trainer {\n  lora {\n    rnak = 4\n  }\n}", `job.hcl:8,5-9: Unsupported argument: An argument named "rnak" is not expected here. Did you mean "rank"?`},
		{"two blocks", "trainer {\n  lora {}\n  lora {}\n}", "Duplicate lora block"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errs := decode(t, c.block)
			if !strings.Contains(errs, c.want) {
				t.Errorf("got:\n%s\nwant it to contain:\n%s", errs, c.want)
			}
		})
	}
}
