package serve

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
)

// turnResult is what one turn of a conversation got back.
type turnResult struct {
	content string
	ids     []int
	lps     []float64 // each token's log-prob, then its top-2's
}

// converse runs convs conversations of turns turns each through base, the
// conversations of a turn concurrently (so they share forward passes),
// calling between after each turn. Conversation c sends model models[c %
// len(models)] and seed 100+c; each turn appends the reply and a new user
// message, as an agent's episode does.
func converse(t *testing.T, base string, convs, turns int, models []string, temperature float64, between func(turn int)) [][]turnResult {
	t.Helper()
	msgs := make([][]map[string]any, convs)
	out := make([][]turnResult, convs)
	for c := range convs {
		msgs[c] = []map[string]any{{"role": "system", "content": "You are terse."},
			{"role": "user", "content": fmt.Sprintf("Conversation %d begins. %s", c, strings.Repeat("Go on. ", c))}}
	}
	for turn := range turns {
		var wg sync.WaitGroup
		for c := range convs {
			wg.Go(func() {
				r := postOK(t, base, map[string]any{"model": models[c%len(models)], "messages": msgs[c], "max_tokens": 8,
					"temperature": temperature, "seed": 100 + c, "logprobs": true, "top_logprobs": 2, "return_token_ids": true})
				ch := r.Choices[0]
				res := turnResult{content: *ch.Message.Content, ids: ch.TokenIDs}
				for _, lp := range ch.Logprobs.Content {
					res.lps = append(res.lps, lp.Logprob)
					for _, top := range lp.TopLogprobs {
						res.lps = append(res.lps, top.Logprob)
					}
				}
				out[c] = append(out[c], res)
				msgs[c] = append(msgs[c], map[string]any{"role": "assistant", "content": res.content},
					map[string]any{"role": "user", "content": fmt.Sprintf("Turn %d: and then?", turn+1)})
			})
		}
		wg.Wait()
		if between != nil {
			between(turn)
		}
	}
	return out
}

// perturb changes m's weights in place, the same way for every model of
// the same shape: a stand-in for a training step.
func perturb(m *model.Model, step int) {
	be := m.Device()
	for i, p := range m.Params() {
		if len(p.Shape) != 2 || i%3 != step%3 {
			continue
		}
		w := make([]float32, p.Len())
		be.Download(w, p.W)
		for j := range w {
			w[j] *= 1 + 0.2*float32((j*7+step)%5-2)/2
		}
		be.Upload(p.W, w)
	}
}

// The prefix cache is exact: multi-turn conversations get the same tokens
// and the same log-probs, bit for bit, from a server with the cache and
// one without, greedy and sampled, with LoRA adapters, and across weight
// updates (which must empty the cache: kept keys and values were computed
// with the old weights).
func TestPrefixCacheExact(t *testing.T) {
	tok := qwenTokenizer(t)
	adapterPath := saveTestAdapter(t, testModel(t, tok))
	for _, tc := range []struct {
		name        string
		temperature float64
		adapters    bool
		slots       int
	}{
		{"greedy", 0, false, 6},
		{"sampled", 1, false, 6},
		{"greedy with adapters", 0, true, 6},
		{"sampled with adapters", 0.9, true, 6},
		// Fewer slots than conversations: requests wait for slots, and
		// held sequences are evicted to make room.
		{"sampled, slots evicted", 1, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var results [2][][]turnResult
			var stats [2]Stats
			for i, noPrefix := range []bool{false, true} {
				m := testModel(t, tok)
				o := Options{MaxBatch: tc.slots, MaxSeqLen: 512, NoPrefixCache: noPrefix}
				models := []string{testModelName}
				if tc.adapters {
					o.Adapters = LoRA(m)
					models = append(models, "a")
				}
				s, _, base := startServer(t, m, tok, o)
				if tc.adapters {
					if status, body := postJSON(t, base+"/load_lora_adapter", "application/json", map[string]any{"lora_name": "a", "lora_path": adapterPath}); status != 200 {
						t.Fatalf("load: HTTP %d %s", status, body)
					}
				}
				results[i] = converse(t, base, 4, 5, models, tc.temperature, func(turn int) {
					if turn == 2 {
						if err := s.Update(context.Background(), func() error { perturb(m, turn); return nil }); err != nil {
							t.Fatal(err)
						}
					}
				})
				stats[i] = s.Stats()
			}
			t.Logf("with the cache %+v, without %+v", stats[0], stats[1])
			cached, cold := results[0], results[1]
			for c := range cached {
				for turn := range cached[c] {
					a, b := cached[c][turn], cold[c][turn]
					if !slices.Equal(a.ids, b.ids) || !slices.EqualFunc(a.lps, b.lps, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }) {
						t.Fatalf("conversation %d turn %d: with the prefix cache %v %v, without %v %v", c, turn, a.ids, a.lps, b.ids, b.lps)
					}
				}
			}
			if stats[1].CachedTokens != 0 || stats[0].PromptTokens != stats[1].PromptTokens {
				t.Fatalf("stats with the cache %+v, without %+v", stats[0], stats[1])
			}
			// Without adapters, every turn after the first of each
			// conversation (but the one after the update) repeats its
			// conversation so far.
			if !tc.adapters && tc.slots >= 4 && stats[0].CachedTokens < stats[0].PromptTokens/3 {
				t.Fatalf("the cache supplied %d of %d prompt tokens", stats[0].CachedTokens, stats[0].PromptTokens)
			}
			if stats[0].CachedTokens == 0 {
				t.Fatal("the cache supplied nothing: the comparison is vacuous")
			}
			var distinct int
			for c := range cached {
				if !slices.Equal(cached[c][0].ids, cached[0][0].ids) {
					distinct++
				}
			}
			if distinct == 0 {
				t.Fatal("every conversation got the same first reply: the comparison is weak")
			}
		})
	}
}

// saveTestAdapter writes a LoRA adapter for m's shape whose B factors are
// not zero (PEFT starts them at zero, which would equal the base).
func saveTestAdapter(t *testing.T, m *model.Model) string {
	t.Helper()
	a, err := model.NewAdapter(m.Device(), m.Cfg, model.AdapterConfig{Rank: 4, Alpha: 8, Targets: []model.Module{model.QProj, model.VProj, model.DownProj}})
	if err != nil {
		t.Fatal(err)
	}
	a.Init(5)
	for _, p := range a.Params() {
		if strings.Contains(p.Name, "lora_B") {
			w := make([]float32, p.Len())
			for i := range w {
				w[i] = float32((i*37)%2001-1000) / 1000
			}
			m.Device().Upload(p.W, w)
		}
	}
	dir := t.TempDir()
	if err := lora.Save(a, dir, testModelName); err != nil {
		t.Fatal(err)
	}
	return dir
}

// batchDependent is the CPU backend without its batch-invariant linear
// layer: the cache then uses MatMul, whose few-row and many-row paths sum
// in different orders, as a GPU's GEMM picks its kernel by batch size.
type batchDependent struct{ compute.Device }

// On such a device a request's log-probs change with the load, and
// Options.Deterministic (a forward pass per sequence, no prefix cache)
// makes them the same alone and among 16 concurrent requests.
func TestDeterministicOnBatchDependentDevice(t *testing.T) {
	tok := qwenTokenizer(t)
	be, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	cfg, _ := hfconfig.Preset("tiny")
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 64, 64, 16
	cfg.VocabSize, cfg.EOSTokenIDs = tok.VocabSize(), []int{tok.EOS()}
	cfg.MaxPositions, cfg.TieWordEmbeddings = 512, false
	m, err := model.New(batchDependent{be}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(7, 0.5)
	body := func(i int) map[string]any {
		return req(map[string]any{"seed": 40 + i, "max_tokens": 8, "logprobs": true, "return_token_ids": true,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("request %d %s", i, strings.Repeat("y", 3*i))}}})
	}
	for _, deterministic := range []bool{false, true} {
		t.Run(fmt.Sprintf("deterministic=%v", deterministic), func(t *testing.T) {
			s, _, base := startServer(t, m, tok, Options{MaxBatch: 16, MaxSeqLen: 256, Deterministic: deterministic})
			alone := make([]rawResponse, 16)
			for i := range alone {
				alone[i] = postOK(t, base, body(i))
			}
			// Hold the engine (an Update) until all 16 have queued, so
			// they are admitted together and share forward passes.
			together := make([]rawResponse, 16)
			var wg sync.WaitGroup
			err := s.Update(context.Background(), func() error {
				for i := range together {
					wg.Go(func() { together[i] = postOK(t, base, body(i)) })
				}
				for {
					s.eng.mu.Lock()
					q := len(s.eng.queue)
					s.eng.mu.Unlock()
					if q == len(together) {
						return nil
					}
					waitABit()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			differ := 0
			for i := range alone {
				a, b := alone[i].Choices[0], together[i].Choices[0]
				for k := range min(len(a.Logprobs.Content), len(b.Logprobs.Content)) {
					if a.Logprobs.Content[k].Logprob != b.Logprobs.Content[k].Logprob {
						differ++
					}
				}
				if !slices.Equal(a.TokenIDs, b.TokenIDs) {
					differ++
				}
			}
			switch {
			case deterministic && differ > 0:
				t.Fatalf("%d log-probs or token lists differ between alone and among 16", differ)
			case !deterministic && differ == 0:
				t.Fatal("without the option nothing differed: the device is not batch-dependent and the test proves nothing")
			}
		})
	}
}
