package modelcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := run(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d\n%s", args, code, errs)
	}
	return out
}

func TestUsageAndErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Commands:"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"init", "--help"}, 0, "--preset"},
		{[]string{"init", "--out", "x"}, 2, "exactly one of --config and --preset"},
		{[]string{"init", "--preset", "nope", "--out", t.TempDir()}, 1, "unknown preset"},
		{[]string{"init", "--preset", "tiny", "--out", t.TempDir(), "--dtype", "f8"}, 2, "--dtype"},
		{[]string{"init", "--bogus"}, 2, "unknown flag"},
		{[]string{"score", "--model", t.TempDir(), "--token-ids", "1,2"}, 1, "config.json"},
		{[]string{"score", "--model", "m"}, 2, "exactly one of --token-ids and --text"},
		{[]string{"score", "--model", "m", "--token-ids", "1,x"}, 2, "token id"},
		{[]string{"generate", "--model", "m"}, 2, "exactly one of --prompt"},
		{[]string{"generate", "--help"}, 0, "--top-p"},
	}
	for _, c := range cases {
		code, out, errs := run(t, c.args...)
		// Help that was asked for is output; everything else is an error.
		got, stream := errs, "stderr"
		if c.code == 0 {
			got, stream = out, "stdout"
		}
		if code != c.code || !strings.Contains(got, c.want) {
			t.Errorf("%v: exit %d, %s %q; want exit %d containing %q", c.args, code, stream, got, c.code, c.want)
		}
	}
}

func TestFlagErrorHints(t *testing.T) {
	code, out, errs := run(t, "generate", "--tmperature", "1")
	if code != 2 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{"rlhost model generate: unknown flag: --tmperature", "did you mean --temperature?", "Run 'rlhost model generate --help'"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q lacks %q", errs, want)
		}
	}
}

// TestGenerateThenScore cross-checks the two paths through the model: the
// KV-cached generation's log-probs must equal the full-forward scores of
// the same tokens.
func TestGenerateThenScore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	mustRun(t, "init", "--preset", "tiny", "--out", dir, "--seed", "3", "--init-std", "0.5")
	for _, f := range []string{"config.json", "model.safetensors", "generation_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	out := mustRun(t, "generate", "--model", dir, "--prompt-ids", "1,2,3", "--max-tokens", "6", "--temperature", "0", "--json", "--threads", "2")
	var g GenerateOutput
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(g.Tokens) == 0 || len(g.Tokens) != len(g.LogProbs) {
		t.Fatalf("generate output %+v", g)
	}
	all := append([]int{1, 2, 3}, g.Tokens...)
	ids := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(all)), ","), "[]")
	out = mustRun(t, "score", "--model", dir, "--token-ids", ids, "--json")
	var s ScoreOutput
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(s.LogProbs) != len(all)-1 {
		t.Fatalf("score gave %d logprobs for %d tokens", len(s.LogProbs), len(all))
	}
	for i, lp := range g.LogProbs {
		if got := s.LogProbs[2+i]; math.Abs(float64(got-lp)) > 1e-4 {
			t.Fatalf("token %d: score %g, generate %g", i, got, lp)
		}
	}
	// Same seed, same sample; table output names every position.
	a := mustRun(t, "generate", "--model", dir, "--prompt-ids", "5", "--max-tokens", "5", "--seed", "7")
	b := mustRun(t, "generate", "--model", dir, "--prompt-ids", "5", "--max-tokens", "5", "--seed", "7")
	if a != b || a == "" {
		t.Fatalf("seeded generate differs: %q vs %q", a, b)
	}
	table := mustRun(t, "score", "--model", dir, "--token-ids", "4,5,6")
	if !strings.Contains(table, "sum") || strings.Count(table, "\n") != 4 {
		t.Fatalf("score table:\n%s", table)
	}
}

// byteLevel is GPT-2's byte-to-rune table, rebuilt here for the fixture.
func byteLevel() [256]rune {
	var t [256]rune
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}

// writeTokenizer writes a byte-level tokenizer.json with one token per
// byte (ids 0..255), one merge ("h"+"i" → 258) and <|endoftext|>=256,
// <|im_end|>=257, and a tokenizer_config.json naming <|im_end|> as EOS.
func writeTokenizer(t *testing.T, dir string) string {
	t.Helper()
	tbl := byteLevel()
	vocab := map[string]int{}
	for b, r := range tbl {
		vocab[string(r)] = b
	}
	vocab["hi"] = 258
	tj := map[string]any{
		"added_tokens": []map[string]any{
			{"id": 256, "content": "<|endoftext|>", "special": true},
			{"id": 257, "content": "<|im_end|>", "special": true},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": tokenizer.QwenSplitPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"h i"}},
	}
	b, _ := json.Marshal(tj)
	p := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token":"<|im_end|>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTextPathsWithTokenizer(t *testing.T) {
	tmp := t.TempDir()
	tokPath := writeTokenizer(t, tmp)
	if _, err := tokenizer.Load(tokPath); err != nil {
		t.Fatalf("fixture tokenizer does not load: %v", err)
	}
	cfg := `{"model_type":"qwen2","hidden_size":16,"intermediate_size":32,"num_hidden_layers":1,
	"num_attention_heads":2,"num_key_value_heads":1,"vocab_size":260,"max_position_embeddings":512,
	"rope_theta":10000,"rms_norm_eps":1e-6,"tie_word_embeddings":false,"eos_token_id":257}`
	cfgPath := filepath.Join(tmp, "config.json")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "m")
	mustRun(t, "init", "--config", cfgPath, "--out", dir, "--tokenizer", tokPath, "--dtype", "bf16")
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("init did not copy %s: %v", f, err)
		}
	}
	out := mustRun(t, "score", "--model", dir, "--text", "hi there", "--json")
	var s ScoreOutput
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	// "hi there" → "hi" (merged, 258), " " , "t","h","e","r","e" byte tokens.
	if len(s.Tokens) != 7 || s.Tokens[0] != 258 || len(s.LogProbs) != 6 {
		t.Fatalf("score of text: %+v", s)
	}
	out = mustRun(t, "generate", "--model", dir, "--prompt", "hi", "--max-tokens", "4", "--temperature", "0.8", "--json")
	var g GenerateOutput
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.PromptTokens) != 1 || g.PromptTokens[0] != 258 || len(g.Tokens) == 0 {
		t.Fatalf("generate from text: %+v", g)
	}
	// --messages renders with the chat template: the prompt is exactly the
	// tokenized rendering, holding the <|im_end|> added token (257).
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{
		`[{"role":"user","content":"hi"}]`,
		`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
	} {
		mp := filepath.Join(tmp, fmt.Sprintf("messages%d.json", i))
		if err := os.WriteFile(mp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		out = mustRun(t, "generate", "--model", dir, "--messages", mp, "--max-tokens", "2", "--temperature", "0", "--json")
		var gm GenerateOutput
		if err := json.Unmarshal([]byte(out), &gm); err != nil {
			t.Fatal(err)
		}
		msgs := []core.Message{{Role: core.RoleUser, Content: "hi"}}
		if i == 1 {
			msgs = append([]core.Message{{Role: core.RoleSystem, Content: "be brief"}}, msgs...)
		}
		text, err := chat.Render(msgs, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if want := tok.Encode(text); !slices.Equal(gm.PromptTokens, want) || !slices.Contains(want, 257) {
			t.Fatalf("messages %d: prompt %v, want %v (with 257)", i, gm.PromptTokens, want)
		}
	}
	if code, _, errs := run(t, "generate", "--model", dir, "--messages", filepath.Join(tmp, "absent.json")); code != 1 || !strings.Contains(errs, "absent.json") {
		t.Fatalf("missing messages file: exit %d %q", code, errs)
	}
}
