package serve

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/tokenizer"
	"github.com/rlhost/rlhost/trainer/tokenizer/tokenizertest"
)

const testModelName = "rlhost-test"

var (
	tokOnce sync.Once
	tokVal  *tokenizer.Tokenizer
	tokErr  error
)

// qwenTokenizer loads the real Qwen tokenizer fixture once per test binary.
func qwenTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	dir := tokenizertest.Dir(t)
	tokOnce.Do(func() { tokVal, tokErr = tokenizer.LoadDir(dir) })
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	return tokVal
}

// testModel is the "tiny" preset widened to the tokenizer's vocabulary, as
// `rlhost model init --tokenizer` makes it, with untied head and 64 wide so
// that plant can write up to 63 distinct tokens into it, and room for
// chat prompts. Its random weights emit near-uniform random tokens.
func testModel(t *testing.T, tok *tokenizer.Tokenizer) *model.Model {
	t.Helper()
	be, err := cpu.New(cpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	cfg, err := hfconfig.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 64, 64, 16
	cfg.VocabSize, cfg.EOSTokenIDs = tok.VocabSize(), []int{tok.EOS()}
	cfg.MaxPositions, cfg.TieWordEmbeddings = 512, false
	m, err := model.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(7, 0.5)
	return m
}

// plant rewrites m's weights so that it deterministically continues any
// assistant prompt with text followed by <|im_end|>: attention and MLP
// outputs are zeroed (the residual stream is the token's embedding), the
// chain's tokens embed as distinct one-hot vectors, and the head maps each
// to its successor with a logit of ~80 (probability 1 - 1e-29 per other
// token). Every other token embeds as e0, which leads to the chain's
// first token. The chain's tokens must be distinct and must not include
// "\n", the last token of a generation prompt.
func plant(t *testing.T, m *model.Model, tok *tokenizer.Tokenizer, text string) []int {
	t.Helper()
	end, _ := tok.TokenID("<|im_end|>")
	chain := append(tok.Encode(text), end)
	nl := tok.Encode("\n")
	C, V := m.Cfg.HiddenSize, m.Cfg.VocabSize
	for i, id := range chain {
		if slices.Contains(chain[:i], id) || slices.Contains(nl, id) || len(chain) >= C {
			t.Fatalf("plant: chain %v of %q must be distinct tokens without newline, fewer than %d", chain, text, C)
		}
	}
	be := m.Device()
	for _, p := range m.Params() {
		switch {
		case p.Name == "model.embed_tokens.weight" || p.Name == "lm_head.weight":
		case len(p.Shape) == 2 && (hasSuffix(p.Name, "o_proj.weight") || hasSuffix(p.Name, "down_proj.weight")):
			be.Zero(p.W)
		}
	}
	emb := make([]float32, V*C)
	head := make([]float32, V*C)
	for v := range V {
		emb[v*C] = 1
	}
	head[chain[0]*C] = 10
	for i, id := range chain {
		emb[id*C] = 0
		emb[id*C+i+1] = 1
		if i+1 < len(chain) {
			head[chain[i+1]*C+i+1] = 10
		}
	}
	e, _ := m.Param("model.embed_tokens.weight")
	h, _ := m.Param("lm_head.weight")
	be.Upload(e.W, emb)
	be.Upload(h.W, head)
	return chain
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

// startServer serves m on loopback and returns the server and a go-openai
// client for it.
func startServer(t *testing.T, m *model.Model, tok *tokenizer.Tokenizer, o Options) (*Server, *openai.Client, string) {
	t.Helper()
	o.ModelName = testModelName
	s, err := New(m, tok, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	base, err := s.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	cfg := openai.DefaultConfig("unused")
	cfg.BaseURL = base
	return s, openai.NewClientWithConfig(cfg), base
}

func userMsg(text string) []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}}
}
