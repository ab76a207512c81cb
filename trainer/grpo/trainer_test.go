package grpo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

func tinyModel(t *testing.T, be compute.Device, vocab int, seed uint64) *model.Model {
	t.Helper()
	cfg, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	if vocab > 0 {
		cfg.VocabSize, cfg.EOSTokenIDs = vocab, []int{vocab - 1}
	}
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(seed, 0.3)
	return m
}

func backend64(t *testing.T) *cpu.Device[float64] {
	t.Helper()
	b, err := cpu.New64(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func backend32(t *testing.T) *cpu.Device[float32] {
	t.Helper()
	b, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// randomGroups makes groups of multi-turn-looking samples: a prompt, then
// alternating trained (policy) and untrained (tool/user) segments.
func randomGroups(r *rand.Rand, vocab, groups, size, maxLen int) [][]Sample {
	out := make([][]Sample, groups)
	for g := range out {
		for range size {
			n := 4 + r.IntN(maxLen-3)
			s := Sample{Tokens: make([]int32, n), Trained: make([]bool, n), Reward: float64(r.IntN(3))}
			prompt := 1 + r.IntN(3)
			for i := range n {
				s.Tokens[i] = int32(r.IntN(vocab))
				s.Trained[i] = i >= prompt && (i/3)%2 == 0
			}
			out[g] = append(out[g], s)
		}
	}
	return out
}

// logpF64 recomputes the log-probs of seqs' trained tokens in float64 from
// the logits of the run's last forward (LogProbs rounds to float32).
func logpF64(tr *Trainer, run *model.Run, seqs []*seq, mb []int) [][]float64 {
	be := tr.m.Device().(compute.Float64IO)
	V, T := tr.m.Cfg.VocabSize, run.T
	logits := make([]float64, run.Logits().Len())
	be.Download64(logits, run.Logits())
	out := make([][]float64, len(mb))
	for b, i := range mb {
		s := seqs[i]
		for _, p := range s.pos {
			row := logits[(b*T+p-1)*V : (b*T+p)*V]
			mx := math.Inf(-1)
			for _, z := range row {
				mx = math.Max(mx, z/tr.cfg.Temperature)
			}
			var sum float64
			for _, z := range row {
				sum += math.Exp(z/tr.cfg.Temperature - mx)
			}
			out[b] = append(out[b], row[s.tokens[p]]/tr.cfg.Temperature-mx-math.Log(sum))
		}
	}
	return out
}

// TestGradientThroughModel checks the gradient the trainer accumulates
// for the GRPO loss (log-probs → Loss → dlogp → Backward, over several
// micro-batches) against central differences of the same loss on the
// float64 backend, off-policy (old ≠ current, so clipping is active),
// with KL, for token- and sequence-level ratios.
func TestGradientThroughModel(t *testing.T) {
	for _, tc := range []struct{ loss, level string }{
		{LossDAPO, LevelToken}, {LossGRPO, LevelSequence}, {LossBNPO, LevelToken}, {LossDrGRPO, LevelSequence},
	} {
		t.Run(tc.loss+"/"+tc.level, func(t *testing.T) {
			be := backend64(t)
			m := tinyModel(t, be, 0, 3)
			cfg := DefaultConfig()
			cfg.LossType, cfg.ImportanceSampling = tc.loss, tc.level
			cfg.Beta, cfg.Temperature, cfg.MicroBatch, cfg.MaxSeqLen, cfg.MaxCompletionLength = 0.1, 0.8, 2, 40, 10
			tr, err := New(m, cfg)
			if err != nil {
				t.Fatal(err)
			}
			// The reference differs from the policy, so the KL term has a gradient.
			for _, p := range tr.ref.Params() {
				be.Scale(p.W, 0.9)
			}
			r := rand.New(rand.NewPCG(1, 2))
			groups := randomGroups(r, m.Cfg.VocabSize, 1, 5, 12)
			var seqs []*seq
			for i := range groups[0] {
				s, err := tr.pack(&groups[0][i], "s", false)
				if err != nil {
					t.Fatal(err)
				}
				s.adv = r.NormFloat64()
				seqs = append(seqs, s)
			}
			mbs := tr.microBatches(len(seqs))
			lp := LossParams{Type: cfg.LossType, Epsilon: 0.2, EpsilonHigh: 0.2, Beta: cfg.Beta, Level: cfg.ImportanceSampling,
				MaxCompletionLength: cfg.MaxCompletionLength, AccumSteps: len(mbs)}
			for _, s := range seqs {
				lp.NumItemsInBatch += len(s.pos)
			}
			for _, mb := range mbs { // first pass: old and reference log-probs
				if _, err := tr.microStep(seqs, mb, lp, true); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range seqs {
				// Even sequences move far enough to be clipped at either
				// level; odd ones stay inside the clip range.
				off := 0.0
				if i%2 == 0 {
					off = -0.5 * math.Copysign(1, s.adv)
				}
				for k := range s.old {
					s.old[k] += off + 0.1*r.NormFloat64()
				}
			}
			m.ZeroGrads()
			var clipped float64
			for _, mb := range mbs {
				st, err := tr.microStep(seqs, mb, lp, false)
				if err != nil {
					t.Fatal(err)
				}
				clipped += st.ClipLow + st.ClipHigh
			}
			if clipped == 0 {
				t.Fatal("no ratio was clipped; perturb old log-probs more")
			}
			loss := func() float64 {
				var total float64
				for _, mb := range mbs {
					run, err := tr.forward(tr.run, seqs, mb, float32(cfg.Temperature), func(*seq, int, float64) {})
					if err != nil {
						t.Fatal(err)
					}
					lps := logpF64(tr, run, seqs, mb)
					ls := make([]LossSeq, len(mb))
					grads := make([][]float64, len(mb))
					for j, i := range mb {
						ls[j] = LossSeq{LogP: lps[j], OldLogP: seqs[i].old, RefLogP: seqs[i].ref, Adv: seqs[i].adv}
						grads[j] = make([]float64, len(lps[j]))
					}
					st, err := Loss(lp, ls, grads)
					if err != nil {
						t.Fatal(err)
					}
					total += st.Loss
				}
				return total
			}
			checked := 0
			for _, p := range m.Params() {
				g := make([]float64, p.Len())
				be.Download64(g, p.G)
				x := make([]float64, p.Len())
				be.Download64(x, p.W)
				for range 3 {
					i := r.IntN(p.Len())
					orig := x[i]
					x[i] = orig + 1e-5
					be.Upload64(p.W, x)
					lplus := loss()
					x[i] = orig - 1e-5
					be.Upload64(p.W, x)
					lminus := loss()
					x[i] = orig
					be.Upload64(p.W, x)
					num := (lplus - lminus) / 2e-5
					// dlogp comes from float32-rounded log-probs: ~1e-7 relative.
					if math.Abs(num-g[i]) > 1e-5*math.Max(1e-2, math.Abs(num)) {
						t.Errorf("%s[%d]: analytic %.10g numeric %.10g", p.Name, i, g[i], num)
					}
					if num != 0 {
						checked++
					}
				}
			}
			if checked < 20 {
				t.Fatalf("only %d non-zero gradient elements checked", checked)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.LossType = "ppo" }, "loss_type"},
		{func(c *Config) { c.ImportanceSampling = "tok" }, "importance_sampling_level"},
		{func(c *Config) { c.ScaleRewards = "std" }, "scale_rewards"},
		{func(c *Config) { c.Epsilon = -0.1 }, "epsilon"},
		{func(c *Config) { c.EpsilonHigh = math.NaN() }, "epsilon_high"},
		{func(c *Config) { c.Beta = -1 }, "beta"},
		{func(c *Config) { c.NumIterations = 0 }, "num_iterations"},
		{func(c *Config) { c.Temperature = 0 }, "temperature"},
		{func(c *Config) { c.LossType, c.MaxCompletionLength = LossDrGRPO, 0 }, "max_completion_length"},
		{func(c *Config) { c.MaxGradNorm = -1 }, "max_grad_norm"},
		{func(c *Config) { c.MicroBatch = 0 }, "micro_batch"},
		{func(c *Config) { c.MaxSeqLen = 1 }, "max_seq_len"},
		{func(c *Config) { c.LR = -1 }, "learning_rate"},
		{func(c *Config) { c.Schedule = "cosine" }, "lr_scheduler"},
		{func(c *Config) { c.Schedule = "step" }, "lr_scheduler"},
		{func(c *Config) { c.Beta2 = 1 }, "adam_beta2"},
		{func(c *Config) { c.WarmupSteps = -1 }, "warmup_steps"},
		{func(c *Config) { c.SamplingCorrection = "vllm" }, "sampling_correction"},
		{func(c *Config) { c.SamplingCorrection, c.SamplingClipMax = CorrectionTokenMask, ptr(0.0) }, "sampling_clip_max"},
		{func(c *Config) { c.SamplingCorrection, c.SamplingClipMin = CorrectionTokenMask, 4 }, "sampling_clip_min"},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("want an error naming %s, got %v", tc.want, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestStepRejectsBadSamples(t *testing.T) {
	be := backend32(t)
	cfg := DefaultConfig()
	cfg.MaxSeqLen = 8
	tr, err := New(tinyModel(t, be, 0, 1), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ok := Sample{Tokens: []int32{1, 2, 3}, Trained: []bool{false, true, true}}
	for _, tc := range []struct {
		name string
		s    Sample
		want string
	}{
		{"too long", Sample{Tokens: make([]int32, 10), Trained: []bool{false, false, false, false, false, false, false, false, true, false}}, "max_seq_len"},
		{"mask length", Sample{Tokens: []int32{1, 2}, Trained: []bool{false}}, "trained flags"},
		{"first token trained", Sample{Tokens: []int32{1, 2}, Trained: []bool{true, true}}, "token 0"},
		{"token id", Sample{Tokens: []int32{1, 99}, Trained: []bool{false, true}}, "outside vocabulary"},
		{"logprob length", Sample{Tokens: []int32{1, 2}, Trained: []bool{false, true}, SampleLogProbs: []float32{0}}, "sampling log-probs"},
	} {
		_, err := tr.Step(context.Background(), [][]Sample{{ok, tc.s}})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "group 0 sample 1") {
			t.Errorf("%s: got %v, want an error naming group 0 sample 1 and %q", tc.name, err, tc.want)
		}
	}
	_, err = tr.Step(context.Background(), [][]Sample{{ok, {Tokens: make([]int32, 10), Trained: append(make([]bool, 9), true)}}})
	if !errors.Is(err, ErrTooLong) {
		t.Errorf("too long: %v does not wrap ErrTooLong", err)
	}
	// Untrained tokens past MaxSeqLen (a tool reply after the last turn) are fine.
	long := Sample{Tokens: make([]int32, 12), Trained: make([]bool, 12)}
	long.Trained[3] = true
	if _, err := tr.Step(context.Background(), [][]Sample{{ok, long}}); err != nil {
		t.Errorf("trailing untrained tokens: %v", err)
	}
	// A sampling correction needs the sampler's log-probs.
	tr.cfg.SamplingCorrection = CorrectionSequenceMask
	if _, err := tr.Step(context.Background(), [][]Sample{{ok, ok}}); err == nil || !strings.Contains(err.Error(), "sampling_correction") {
		t.Errorf("correction without sampling log-probs: %v", err)
	}
	withLP := ok
	withLP.SampleLogProbs = []float32{0, -1, -2}
	if _, err := tr.Step(context.Background(), [][]Sample{{withLP, withLP}}); err != nil {
		t.Errorf("correction with sampling log-probs: %v", err)
	}
	tr.cfg.SamplingCorrection = CorrectionNone
	// A batch with nothing to train on applies no update.
	masked := Sample{Tokens: []int32{1, 2}, Trained: []bool{false, true}, Truncated: true}
	for _, batch := range [][][]Sample{nil, {{{Tokens: []int32{1, 2}, Trained: []bool{false, false}}}}} {
		st, err := tr.Step(context.Background(), batch)
		if err != nil || st.Skipped == "" || st.Updates != 0 {
			t.Errorf("empty batch: skipped %q, updates %d, err %v", st.Skipped, st.Updates, err)
		}
	}
	tr.cfg.MaskTruncated = true
	if st, err := tr.Step(context.Background(), [][]Sample{{masked, masked}}); err != nil || st.Updates != 0 || st.Tokens != 0 {
		t.Errorf("all truncated and masked: tokens %d, updates %d, err %v", st.Tokens, st.Updates, err)
	}
	tr.cfg.MaskTruncated = false
	if st, err := tr.Step(context.Background(), [][]Sample{{masked, ok}}); err != nil || st.Tokens != 3 {
		t.Errorf("truncated not masked: tokens %d (want 3), err %v", st.Tokens, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.Step(ctx, [][]Sample{{ok, ok}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled step: %v", err)
	}
}

func weights(m *model.Model) [][]float32 {
	var out [][]float32
	for _, p := range m.Params() {
		w := make([]float32, p.Len())
		m.Device().Download(w, p.W)
		out = append(out, w)
	}
	return out
}

func TestNonFiniteSkipsUpdate(t *testing.T) {
	be := backend32(t)
	m := tinyModel(t, be, 0, 1)
	cfg := DefaultConfig()
	cfg.MaxSeqLen, cfg.LR = 16, 1e-2
	tr, err := New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups := randomGroups(rand.New(rand.NewPCG(3, 3)), m.Cfg.VocabSize, 2, 3, 12)
	// A NaN in one (unused by the loss otherwise) norm weight poisons the forward.
	p := m.Params()[1]
	w := make([]float32, p.Len())
	be.Download(w, p.W)
	w[0] = float32(math.NaN())
	be.Upload(p.W, w)
	before := weights(m)
	st, err := tr.Step(context.Background(), groups)
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped == "" || st.Updates != 0 || tr.OptimizerStep() != 0 {
		t.Fatalf("non-finite step: skipped %q, updates %d, optimizer step %d", st.Skipped, st.Updates, tr.OptimizerStep())
	}
	after := weights(m)
	for i := range before {
		for j := range before[i] {
			if math.Float32bits(before[i][j]) != math.Float32bits(after[i][j]) {
				t.Fatalf("weights changed by a skipped update")
			}
		}
	}
}

// TestMicroBatchesAccumulate checks that dapo's loss, normalised over the
// whole step's tokens, gives the same update whatever the micro-batch.
func TestMicroBatchesAccumulate(t *testing.T) {
	groups := randomGroups(rand.New(rand.NewPCG(4, 4)), 64, 2, 3, 12)
	var got [][][]float32
	var norms []float64
	for _, mb := range []int{1, 4, 6} {
		be := backend64(t)
		cfg := DefaultConfig()
		cfg.MaxSeqLen, cfg.MicroBatch, cfg.LR = 16, mb, 1e-3
		tr, err := New(tinyModel(t, be, 0, 2), cfg)
		if err != nil {
			t.Fatal(err)
		}
		st, err := tr.Step(context.Background(), groups)
		if err != nil {
			t.Fatal(err)
		}
		norms = append(norms, st.GradNorm)
		got = append(got, weights(tr.Model()))
	}
	for k := 1; k < len(got); k++ {
		if !near(norms[k], norms[0], 1e-9) {
			t.Errorf("grad norm %g with micro-batch variant %d, %g with 1", norms[k], k, norms[0])
		}
		for i := range got[0] {
			for j := range got[0][i] {
				if math.Abs(float64(got[k][i][j]-got[0][i][j])) > 1e-6 {
					t.Fatalf("variant %d: param %d[%d] %g vs %g", k, i, j, got[k][i][j], got[0][i][j])
				}
			}
		}
	}
}

func TestCheckpointResume(t *testing.T) {
	for _, beta := range []float64{0, 0.05} {
		t.Run(fmt.Sprintf("beta=%g", beta), func(t *testing.T) {
			be := backend32(t)
			cfg := DefaultConfig()
			cfg.MaxSeqLen, cfg.MicroBatch, cfg.LR, cfg.Beta = 16, 2, 3e-3, beta
			cfg.NumIterations, cfg.Schedule, cfg.WarmupSteps, cfg.TotalSteps = 2, "cosine", 2, 10
			cfg.WeightDecay = 0.01
			r := rand.New(rand.NewPCG(5, 5))
			batches := make([][][]Sample, 4)
			for i := range batches {
				batches[i] = randomGroups(r, 64, 2, 3, 12)
			}
			// Uninterrupted: 4 steps.
			a, err := New(tinyModel(t, be, 0, 7), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var want []Stats
			for _, b := range batches {
				st, err := a.Step(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, st)
			}
			// Interrupted: 2 steps, save, resume in a fresh trainer, 2 more.
			b, err := New(tinyModel(t, be, 0, 7), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, batch := range batches[:2] {
				if _, err := b.Step(context.Background(), batch); err != nil {
					t.Fatal(err)
				}
			}
			dir := t.TempDir()
			if err := b.Save(dir); err != nil {
				t.Fatal(err)
			}
			c, err := Resume(be, dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.OptimizerStep() != 4 || !reflect.DeepEqual(c.Config(), cfg) {
				t.Fatalf("resumed at step %d with config %+v", c.OptimizerStep(), c.Config())
			}
			for i, batch := range batches[2:] {
				st, err := c.Step(context.Background(), batch)
				if err != nil {
					t.Fatal(err)
				}
				if w := want[2+i]; st.Loss != w.Loss || st.GradNorm != w.GradNorm || st.LR != w.LR || st.KL != w.KL {
					t.Errorf("step %d after resume: loss %g grad %g lr %g kl %g, uninterrupted %g %g %g %g",
						2+i, st.Loss, st.GradNorm, st.LR, st.KL, w.Loss, w.GradNorm, w.LR, w.KL)
				}
			}
			wa, wc := weights(a.Model()), weights(c.Model())
			for i := range wa {
				for j := range wa[i] {
					if math.Float32bits(wa[i][j]) != math.Float32bits(wc[i][j]) {
						t.Fatalf("param %s[%d]: resumed %g, uninterrupted %g", a.Model().Params()[i].Name, j, wc[i][j], wa[i][j])
					}
				}
			}
			// The saved policy is a plain HF model directory.
			m, err := model.Load(be, dir+"/model")
			if err != nil {
				t.Fatal(err)
			}
			if m.Cfg.VocabSize != 64 {
				t.Fatalf("saved model vocab %d", m.Cfg.VocabSize)
			}
		})
	}
}

func TestSFTStepLowersNLL(t *testing.T) {
	be := backend32(t)
	cfg := DefaultConfig()
	cfg.MaxSeqLen, cfg.MicroBatch, cfg.LR = 16, 2, 1e-2
	tr, err := New(tinyModel(t, be, 0, 4), cfg)
	if err != nil {
		t.Fatal(err)
	}
	samples := randomGroups(rand.New(rand.NewPCG(8, 8)), 64, 1, 3, 12)[0]
	var losses []float64
	for range 20 {
		st, err := tr.SFTStep(context.Background(), samples)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, st.Loss)
	}
	// A random 64-token model starts near ln 64 ≈ 4.16 nats per token.
	if losses[0] < 3.5 || losses[len(losses)-1] > losses[0]-1 {
		t.Fatalf("SFT NLL %v: want a start near ln 64 and a drop of more than 1 nat", losses)
	}
	if tr.OptimizerStep() != 20 {
		t.Fatalf("optimizer step %d after 20 SFT steps", tr.OptimizerStep())
	}
}

// TestNumIterationsReusesOldLogProbs checks μ > 1: one Step makes μ
// updates, and the later iterations see ratios away from 1 (clipping
// happens), because old log-probs are kept from the first iteration.
func TestNumIterationsReusesOldLogProbs(t *testing.T) {
	be := backend32(t)
	cfg := DefaultConfig()
	cfg.MaxSeqLen, cfg.MicroBatch, cfg.LR, cfg.NumIterations = 16, 3, 5e-2, 3
	tr, err := New(tinyModel(t, be, 0, 6), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.Step(context.Background(), randomGroups(rand.New(rand.NewPCG(9, 9)), 64, 2, 4, 12))
	if err != nil {
		t.Fatal(err)
	}
	if st.Updates != 3 || st.OptimizerStep != 3 {
		t.Fatalf("updates %d, optimizer step %d; want 3", st.Updates, st.OptimizerStep)
	}
	if st.ClipRegion == 0 {
		t.Fatal("no clipping across 3 iterations at a large learning rate: old log-probs were not kept")
	}
	cfg.NumIterations = 1
	tr1, err := New(tinyModel(t, be, 0, 6), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := tr1.Step(context.Background(), randomGroups(rand.New(rand.NewPCG(9, 9)), 64, 2, 4, 12))
	if err != nil {
		t.Fatal(err)
	}
	if st1.ClipRegion != 0 || st1.Updates != 1 {
		t.Fatalf("μ = 1: clip fraction %g (ratio must be exactly 1), updates %d", st1.ClipRegion, st1.Updates)
	}
}
