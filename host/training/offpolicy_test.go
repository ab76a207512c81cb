package training

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/torchref"
)

func TestDropStale(t *testing.T) {
	v := func(versions ...int) core.Trajectory {
		var tr core.Trajectory
		for i, x := range versions {
			x := x
			tr.Turns = append(tr.Turns, core.Turn{Index: i, TokenIDs: []int{1}, WeightsVersion: &x})
		}
		return tr
	}
	failed := v(0)
	failed.Error = "env crashed"
	noVersion := core.Trajectory{Turns: []core.Turn{{TokenIDs: []int{1}}}}
	trajs := []core.Trajectory{v(5), v(4, 5), v(3, 5), v(2), failed, noVersion}
	kept, st := dropStale(trajs, 5, 2)
	if len(kept) != 5 || st.Dropped != 1 {
		t.Fatalf("kept %d, dropped %d; want 5 and 1 (the episode 3 updates old)", len(kept), st.Dropped)
	}
	if fmt.Sprint(st.Ages) != "map[0:1 1:1 2:1]" || st.Max() != 2 || st.Mean() != 1 {
		t.Errorf("ages %v (max %d, mean %g)", st.Ages, st.Max(), st.Mean())
	}
	got := map[string]float64{}
	st.figures().Put(got)
	if got["async/dropped_stale"] != 1 || got["async/staleness_2"] != 1 || got["async/staleness_max"] != 2 {
		t.Errorf("metrics %v", got)
	}
	back, ok := output.AgesOf(got)
	if !ok || back.Dropped != 1 || back.Max != 2 || back.Count[1] != 1 || len(back.Count) != 3 {
		t.Errorf("read back %+v", back)
	}
}

type offCase struct {
	Type                string       `json:"type"`
	Epsilon             float64      `json:"epsilon"`
	EpsilonHigh         float64      `json:"epsilon_high"`
	Level               string       `json:"level"`
	MaxCompletionLength int          `json:"max_completion_length"`
	AccumSteps          int          `json:"accum_steps"`
	Now                 int          `json:"now"`
	Limit               int          `json:"limit"`
	Mode                string       `json:"mode"`
	ClipMin             float64      `json:"clip_min"`
	ClipMax             float64      `json:"clip_max"`
	Episodes            []offEpisode `json:"episodes"`
}

type offEpisode struct {
	Versions []int     `json:"versions"`
	LogP     []float64 `json:"logp"`
	Old      []float64 `json:"old"`
	Sampled  []float64 `json:"sampled"`
	Adv      float64   `json:"adv"`
}

// TestOffPolicyMatchesPyTorch checks a step of off-policy training against
// testdata/offpolicy.py: which episodes are trained (dropStale), the
// importance-sampling weights of their tokens (grpo.SamplingWeights, every
// mode) and the loss and its gradient they give (grpo.Loss).
func TestOffPolicyMatchesPyTorch(t *testing.T) {
	torchref.Require(t)
	r := rand.New(rand.NewPCG(28, 4))
	var cases []offCase
	modes := []string{grpo.CorrectionTokenTruncate, grpo.CorrectionTokenMask, grpo.CorrectionSequenceTruncate, grpo.CorrectionSequenceMask}
	for _, typ := range []string{grpo.LossGRPO, grpo.LossDAPO} {
		for _, level := range []string{grpo.LevelToken, grpo.LevelSequence} {
			for _, mode := range modes {
				for _, limit := range []int{1, 2} {
					c := offCase{Type: typ, Epsilon: 0.2, EpsilonHigh: 0.28, Level: level, MaxCompletionLength: 8, AccumSteps: 1,
						Now: 6, Limit: limit, Mode: mode, ClipMin: 0.5, ClipMax: 2}
					for range 6 {
						// Turns sampled 0 to 3 updates before now: some too old.
						first := c.Now - r.IntN(4)
						ep := offEpisode{Versions: []int{first, min(c.Now, first+r.IntN(2))}, Adv: r.NormFloat64()}
						for range 1 + r.IntN(5) {
							old := -3 * r.Float64()
							age := float64(c.Now - first)
							ep.Old = append(ep.Old, old)
							ep.LogP = append(ep.LogP, old+0.2*r.NormFloat64())
							// Older weights sampled further from the trainer's.
							ep.Sampled = append(ep.Sampled, old+0.3*age*r.NormFloat64())
						}
						c.Episodes = append(c.Episodes, ep)
					}
					cases = append(cases, c)
				}
			}
		}
	}
	var want []struct {
		Kept []int       `json:"kept"`
		Loss float64     `json:"loss"`
		Grad [][]float64 `json:"grad"`
	}
	torchref.Run(t, "testdata/offpolicy.py", cases, &want)
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }
	dropped := 0
	for ci, c := range cases {
		name := fmt.Sprintf("%s/%s/%s/limit %d", c.Type, c.Level, c.Mode, c.Limit)
		// The trajectories a step of this case would hold, in order.
		trajs := make([]core.Trajectory, len(c.Episodes))
		for i, ep := range c.Episodes {
			trajs[i] = core.Trajectory{Index: i}
			for k, v := range ep.Versions {
				v := v
				trajs[i].Turns = append(trajs[i].Turns, core.Turn{Index: k, TokenIDs: []int{1}, WeightsVersion: &v})
			}
		}
		kept, st := dropStale(trajs, c.Now, c.Limit)
		dropped += st.Dropped
		var keptIdx []int
		var seqs []grpo.LossSeq
		items := 0
		for _, tr := range kept {
			ep := c.Episodes[tr.Index]
			keptIdx = append(keptIdx, tr.Index)
			seqs = append(seqs, grpo.LossSeq{LogP: ep.LogP, OldLogP: ep.Old, Adv: ep.Adv,
				ISWeight: grpo.SamplingWeights(c.Mode, c.ClipMin, c.ClipMax, ep.Old, ep.Sampled)})
			items += len(ep.LogP)
		}
		w := want[ci]
		if !slices.Equal(keptIdx, w.Kept) {
			t.Fatalf("%s: kept episodes %v, torch %v", name, keptIdx, w.Kept)
		}
		grad := make([][]float64, len(seqs))
		for i := range seqs {
			grad[i] = make([]float64, len(seqs[i].LogP))
		}
		p := grpo.LossParams{Type: c.Type, Epsilon: c.Epsilon, EpsilonHigh: c.EpsilonHigh, Level: c.Level,
			MaxCompletionLength: c.MaxCompletionLength, AccumSteps: c.AccumSteps, NumItemsInBatch: items}
		ls, err := grpo.Loss(p, seqs, grad)
		if err != nil {
			t.Fatal(err)
		}
		if !near(ls.Loss, w.Loss) {
			t.Errorf("%s: loss %.15g, torch %.15g", name, ls.Loss, w.Loss)
		}
		for i := range grad {
			for k := range grad[i] {
				if !near(grad[i][k], w.Grad[i][k]) {
					t.Errorf("%s: dloss/dlogp[%d][%d] %.15g, torch %.15g", name, i, k, grad[i][k], w.Grad[i][k])
				}
			}
		}
	}
	if dropped == 0 {
		t.Fatal("no case dropped an episode; the comparison would not cover the limit")
	}
}
