package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

// -mode logits must write, for a saved model, exactly the logits a
// forward pass gives: gpu-check.sh compares them with transformers'.
func TestLogitsMode(t *testing.T) {
	be, err := cpu.New(cpu.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	cfg, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(3, 0.3)
	dir := t.TempDir()
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	ids := []int32{5, 9, 2}
	run1, err := m.NewRun(1, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	if err := run1.Forward(ids, []int{len(ids)}); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(ids)*cfg.VocabSize)
	be.Download(want, run1.Logits())

	var out bytes.Buffer
	if err := run([]string{"-mode", "logits", "-device", "cpu", "-dir", dir, "-ids", "5, 9,2"}, &out); err != nil {
		t.Fatal(err)
	}
	var got logitsResult
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Vocab != cfg.VocabSize || len(got.Logits) != len(want) {
		t.Fatalf("got vocab %d and %d logits, want %d and %d", got.Vocab, len(got.Logits), cfg.VocabSize, len(want))
	}
	for i := range want {
		if got.Logits[i] != want[i] {
			t.Fatalf("logit %d: %g, want %g", i, got.Logits[i], want[i])
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-mode", "nope", "-device", "cpu"},
		{"-mode", "logits", "-device", "cpu"},
		{"-device", "tpu"},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
