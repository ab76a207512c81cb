package modelcmd

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
)

// writeAdapter saves a random (non-zero B) adapter for the tiny preset.
func writeAdapter(t *testing.T, dir string) {
	t.Helper()
	be, err := cpu.New(cpu.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	cfg, _ := hfconfig.Preset("tiny")
	a, err := model.NewAdapter(be, cfg, model.AdapterConfig{Rank: 2, Alpha: 4, Targets: []model.Module{model.QProj, model.VProj, model.DownProj}})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range a.Params() {
		buf := make([]float32, p.Len())
		for i := range buf {
			buf[i] = float32(r.NormFloat64() * 0.5)
		}
		be.Upload(p.W, buf)
	}
	if err := lora.Save(a, dir, "base"); err != nil {
		t.Fatal(err)
	}
}

// TestMergeMatchesAdapter: scoring the merged model gives the scores of
// the base with the adapter applied, and they differ from the base's.
func TestMergeMatchesAdapter(t *testing.T) {
	tmp := t.TempDir()
	base, ad, merged := filepath.Join(tmp, "base"), filepath.Join(tmp, "adapter"), filepath.Join(tmp, "merged")
	mustRun(t, "init", "--preset", "tiny", "--out", base, "--seed", "3", "--init-std", "0.5")
	writeAdapter(t, ad)
	out := mustRun(t, "merge", "--base", base, "--adapter", ad, "--out", merged)
	if !strings.Contains(out, "wrote "+merged) || !strings.Contains(out, "q_proj,v_proj,down_proj") {
		t.Fatalf("merge output %q", out)
	}
	score := func(args ...string) []float32 {
		var s ScoreOutput
		out := mustRun(t, append([]string{"score", "--token-ids", "1,5,9,2,7,3", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatal(err)
		}
		return s.LogProbs
	}
	withAdapter, fromMerged, plain := score("--model", base, "--adapter", ad), score("--model", merged), score("--model", base)
	var moved float64
	for i := range plain {
		if math.Abs(float64(fromMerged[i]-withAdapter[i])) > 1e-4 {
			t.Fatalf("token %d: merged %g, base+adapter %g", i, fromMerged[i], withAdapter[i])
		}
		moved = math.Max(moved, math.Abs(float64(withAdapter[i]-plain[i])))
	}
	if moved < 1e-3 {
		t.Fatalf("the adapter moved log-probs by only %g", moved)
	}
	// Greedy generation with the adapter equals generation from the merged model.
	gen := func(args ...string) GenerateOutput {
		var g GenerateOutput
		out := mustRun(t, append([]string{"generate", "--prompt-ids", "1,5,9", "--max-tokens", "6", "--temperature", "0", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	ga, gm := gen("--model", base, "--adapter", ad), gen("--model", merged)
	if fmt.Sprint(ga.Tokens) != fmt.Sprint(gm.Tokens) {
		t.Fatalf("generate --adapter %v, merged model %v", ga.Tokens, gm.Tokens)
	}
	for i := range ga.LogProbs {
		if math.Abs(float64(ga.LogProbs[i]-gm.LogProbs[i])) > 1e-4 {
			t.Fatalf("token %d: log-prob with adapter %g, merged %g", i, ga.LogProbs[i], gm.LogProbs[i])
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"merge", "--base", base, "--out", merged}, 2, "need --base, --adapter and --out"},
		{[]string{"merge", "--base", base, "--adapter", ad, "--out", base}, 2, "--out must differ"},
		{[]string{"merge", "--base", base, "--adapter", tmp, "--out", merged}, 1, "adapter_config.json"},
		{[]string{"merge", "--help"}, 0, "--adapter"},
	} {
		code, out, errs := run(t, c.args...)
		got := errs
		if c.code == 0 {
			got = out
		}
		if code != c.code || !strings.Contains(got, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d containing %q", c.args, code, got, c.code, c.want)
		}
	}
}
