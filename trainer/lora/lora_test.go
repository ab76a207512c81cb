package lora

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

func device(t *testing.T) compute.Device {
	t.Helper()
	d, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func tiny(t *testing.T) *hfconfig.Config {
	t.Helper()
	c, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func randomize(be compute.Device, ps []*model.Param, seed uint64, std float64) {
	r := rand.New(rand.NewPCG(seed, 3))
	for _, p := range ps {
		buf := make([]float32, p.Len())
		for i := range buf {
			buf[i] = float32(r.NormFloat64() * std)
		}
		be.Upload(p.W, buf)
	}
}

func newAdapter(t *testing.T, be compute.Device, cfg *hfconfig.Config, ac model.AdapterConfig) *model.Adapter {
	t.Helper()
	a, err := model.NewAdapter(be, cfg, ac)
	if err != nil {
		t.Fatal(err)
	}
	randomize(be, a.Params(), 5, 0.2)
	return a
}

func logits(t *testing.T, m *model.Model, a *model.Adapter, ids []int32) []float32 {
	t.Helper()
	r, err := m.NewRun(1, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetAdapter(a); err != nil {
		t.Fatal(err)
	}
	if err := r.Forward(ids, []int{len(ids)}); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, r.Logits().Len())
	m.Device().Download(out, r.Logits())
	return out
}

var testIDs = []int32{3, 17, 5, 60, 1, 9, 2}

func TestSaveLoadRoundTrip(t *testing.T) {
	be := device(t)
	cfg := tiny(t)
	a := newAdapter(t, be, cfg, model.AdapterConfig{Rank: 4, Alpha: 16, Dropout: 0.05, RSLoRA: true,
		Targets: []model.Module{model.VProj, model.QProj, model.DownProj}})
	dir := t.TempDir()
	if err := Save(a, dir, "Qwen/Qwen2.5-0.5B-Instruct"); err != nil {
		t.Fatal(err)
	}
	b, err := Load(be, cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Cfg.Rank != 4 || b.Cfg.Alpha != 16 || b.Cfg.Dropout != 0.05 || !b.Cfg.RSLoRA || len(b.Cfg.Targets) != 3 {
		t.Fatalf("config after round trip: %+v", b.Cfg)
	}
	for _, p := range a.Params() {
		q, ok := b.Param(p.Name)
		if !ok {
			t.Fatalf("lost %s", p.Name)
		}
		x, y := make([]float32, p.Len()), make([]float32, p.Len())
		be.Download(x, p.W)
		be.Download(y, q.W)
		for i := range x {
			if x[i] != y[i] {
				t.Fatalf("%s[%d]: %g after round trip, was %g", p.Name, i, y[i], x[i])
			}
		}
	}
	// The files are PEFT's: check the config fields and key names readers
	// rely on.
	var pc map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err := json.Unmarshal(raw, &pc); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4.0, "lora_alpha": 16.0,
		"use_rslora": true, "bias": "none", "fan_in_fan_out": false, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"} {
		if pc[k] != want {
			t.Errorf("adapter_config.json %s = %v, want %v", k, pc[k], want)
		}
	}
	f, err := safetensors.Open(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, ok := f.Info("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight")
	if !ok || info.Shape[0] != cfg.HiddenSize || info.Shape[1] != 4 {
		t.Fatalf("down_proj lora_B: %+v %v", info, ok)
	}
	info, ok = f.Info("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight")
	if !ok || info.Shape[0] != 4 || info.Shape[1] != cfg.HiddenSize {
		t.Fatalf("q_proj lora_A: %+v %v", info, ok)
	}
}

func TestReadConfigRefuses(t *testing.T) {
	base := `"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":["q_proj","v_proj"]`
	for _, tc := range []struct{ body, want string }{
		{`{"peft_type":"IA3","r":8,"lora_alpha":16,"target_modules":["q_proj"]}`, "peft_type"},
		{`{` + base + `,"use_dora":true}`, "use_dora"},
		{`{` + base + `,"bias":"all"}`, "bias"},
		{`{` + base + `,"fan_in_fan_out":true}`, "fan_in_fan_out"},
		{`{` + base + `,"modules_to_save":["lm_head"]}`, "modules_to_save"},
		{`{` + base + `,"rank_pattern":{"q_proj":4}}`, "rank_pattern"},
		{`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":["q_proj","qkv_proj"]}`, "qkv_proj"},
		{`{"peft_type":"LORA","r":0,"lora_alpha":16,"target_modules":["q_proj"]}`, "rank"},
		{`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":3}`, "target_modules"},
		{`{`, "adapter_config.json"},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, ConfigFile), []byte(tc.body), 0o644)
		_, err := ReadConfig(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.body, err, tc.want)
		}
	}
	// PEFT also writes target_modules as one name, and lists in any order.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":["v_proj","q"],"task_type":"CAUSAL_LM"}`), 0o644)
	c, err := ReadConfig(dir)
	if err != nil || len(c.Targets) != 2 || c.Targets[0] != model.QProj {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestLoadRefusesMismatch(t *testing.T) {
	be := device(t)
	cfg := tiny(t)
	a := newAdapter(t, be, cfg, model.AdapterConfig{Rank: 2, Alpha: 4, Targets: []model.Module{model.QProj}})
	dir := t.TempDir()
	if err := Save(a, dir, ""); err != nil {
		t.Fatal(err)
	}
	wider := *cfg
	wider.HiddenSize *= 2
	if _, err := Load(be, &wider, dir); err == nil || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("loading onto another shape: %v", err)
	}
	deeper := *cfg
	deeper.NumLayers++
	if _, err := Load(be, &deeper, dir); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("loading onto more layers: %v", err)
	}
	os.Remove(filepath.Join(dir, WeightsFile))
	if _, err := Load(be, cfg, dir); err == nil || !strings.Contains(err.Error(), WeightsFile) {
		t.Fatalf("no weights: %v", err)
	}
}

// TestMergeEquivalence: the merged model's logits equal base + adapter.
func TestMergeEquivalence(t *testing.T) {
	be := device(t)
	cfg := tiny(t)
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	randomize(be, m.Params(), 1, 0.3)
	a := newAdapter(t, be, cfg, model.AdapterConfig{Rank: 3, Alpha: 6, Targets: model.Modules()})
	want := logits(t, m, a, testIDs)
	base := logits(t, m, nil, testIDs)
	if err := Merge(m, a); err != nil {
		t.Fatal(err)
	}
	got := logits(t, m, nil, testIDs)
	var moved float64
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-4 {
			t.Fatalf("logit %d: merged %g, base+adapter %g", i, got[i], want[i])
		}
		moved = math.Max(moved, math.Abs(float64(want[i]-base[i])))
	}
	if moved < 1e-2 {
		t.Fatalf("adapter moved logits by only %g", moved)
	}
}

// TestSaveMerged: the merged directory scores like base + adapter, and
// the model in memory is left as it was.
func TestSaveMerged(t *testing.T) {
	be := device(t)
	cfg := tiny(t)
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	randomize(be, m.Params(), 1, 0.3)
	a := newAdapter(t, be, cfg, model.AdapterConfig{Rank: 2, Alpha: 3, Targets: []model.Module{model.KProj, model.OProj, model.UpProj}})
	want, base := logits(t, m, a, testIDs), logits(t, m, nil, testIDs)
	dir := t.TempDir()
	if err := SaveMerged(m, a, dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	merged, err := model.Load(be, dir)
	if err != nil {
		t.Fatal(err)
	}
	got := logits(t, merged, nil, testIDs)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-4 {
			t.Fatalf("logit %d: merged %g, base+adapter %g", i, got[i], want[i])
		}
	}
	for i, v := range logits(t, m, nil, testIDs) {
		if v != base[i] {
			t.Fatalf("SaveMerged changed the model: logit %d %g, was %g", i, v, base[i])
		}
	}
}
