package lora

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
	"github.com/rlhost/rlhost/trainer/torchref"
)

// TestLoadsReferenceAdapter loads an adapter written by
// testdata/peft_reference.py in PEFT's layout (its own safetensors writer,
// PEFT's key names and adapter_config.json fields) and compares rlhost's
// logits of base + adapter with the reference's PyTorch forward, which
// applies the adapter as PEFT's LoRA Linear does.
func TestLoadsReferenceAdapter(t *testing.T) {
	torchref.Require(t)
	py := torchref.Python
	be, err := cpu.New64(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	type refCase struct {
		name    string
		targets []string
		rslora  bool
		tied    bool
		m       *model.Model
		ids     []int32
		adapter string
	}
	cases := []*refCase{
		{name: "qv", targets: []string{"q_proj", "v_proj"}, tied: true},
		{name: "all-rslora-untied", targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, rslora: true},
	}
	// One Python process for all cases: importing torch takes seconds.
	var in []map[string]any
	for _, tc := range cases {
		cfg := tiny(t)
		cfg.TieWordEmbeddings = tc.tied
		m, err := model.New(be, cfg)
		if err != nil {
			t.Fatal(err)
		}
		randomize(be, m.Params(), 9, 0.3)
		tmp := t.TempDir()
		base := filepath.Join(tmp, "base")
		tc.adapter = filepath.Join(tmp, "adapter")
		if err := m.Save(base, safetensors.F32); err != nil {
			t.Fatal(err)
		}
		if tc.m, err = model.Load(be, base); err != nil { // the float32 weights the reference reads
			t.Fatal(err)
		}
		tc.ids = []int32{3, 17, 5, 60, 1, 9, 2, 40}
		in = append(in, map[string]any{"base": base, "out": tc.adapter, "ids": tc.ids, "r": 4, "alpha": 12,
			"rslora": tc.rslora, "targets": tc.targets, "seed": 3})
	}
	stdin, _ := json.Marshal(in)
	cmd := exec.Command(py, filepath.Join("testdata", "peft_reference.py"))
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference: %v\n%s", err, stderr.String())
	}
	var refs []struct{ Logits [][]float64 }
	if err := json.Unmarshal(out, &refs); err != nil || len(refs) != len(cases) {
		t.Fatalf("reference output: %v (%d results)", err, len(refs))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, ref := tc.m, refs[i]
			a, err := Load(be, m.Cfg, tc.adapter)
			if err != nil {
				t.Fatal(err)
			}
			if a.Cfg.Rank != 4 || a.Cfg.Alpha != 12 || a.Cfg.RSLoRA != tc.rslora || len(a.Cfg.Targets) != len(tc.targets) {
				t.Fatalf("loaded config %+v", a.Cfg)
			}
			got := logits64(t, m, a, tc.ids)
			plain := logits64(t, m, nil, tc.ids)
			V := m.Cfg.VocabSize
			var moved float64
			for i, row := range ref.Logits {
				for j, want := range row {
					if d := math.Abs(got[i*V+j] - want); d > 1e-6 {
						t.Fatalf("pos %d logit %d: rlhost %.9g, reference %.9g", i, j, got[i*V+j], want)
					}
					moved = math.Max(moved, math.Abs(want-plain[i*V+j]))
				}
			}
			if moved < 1e-2 {
				t.Fatalf("the reference adapter moved logits by only %g", moved)
			}
		})
	}
}

func logits64(t *testing.T, m *model.Model, a *model.Adapter, ids []int32) []float64 {
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
	out := make([]float64, r.Logits().Len())
	m.Device().(*cpu.Device[float64]).Download64(out, r.Logits())
	return out
}
