package serve

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/tokenizer/tokenizertest"
)

// nodeResult is what scripts/serve/client.mjs prints.
type nodeResult struct {
	Tools struct {
		Finish  string  `json:"finish"`
		Content *string `json:"content"`
		Calls   []struct {
			ID, Type, Name, Arguments string
		} `json:"calls"`
	} `json:"tools"`
	N []struct {
		Index    int    `json:"index"`
		Finish   string `json:"finish"`
		Content  string `json:"content"`
		Logprobs []struct {
			Token   string  `json:"token"`
			Logprob float64 `json:"logprob"`
			Top     int     `json:"top"`
		} `json:"logprobs"`
	} `json:"n"`
	NUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"n_usage"`
	Stop   struct{ Finish, Content string } `json:"stop"`
	Stream struct {
		Content string `json:"content"`
		Finish  string `json:"finish"`
		Usage   *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Chunks int `json:"chunks"`
	} `json:"stream"`
	TokenIDs struct {
		Prompt     []int  `json:"prompt"`
		Completion []int  `json:"completion"`
		Content    string `json:"content"`
	} `json:"token_ids"`
	Concurrent     []int       `json:"concurrent"`
	UnknownModel   nodeFailure `json:"unknown_model"`
	Overflow       nodeFailure `json:"overflow"`
	BadTemperature nodeFailure `json:"bad_temperature"`
	Models         []string    `json:"models"`
}

type nodeFailure struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// TestOpenAINodeClient drives the server with the official openai npm
// package (installed by scripts/serve/fetch.sh).
func TestOpenAINodeClient(t *testing.T) {
	tok := qwenTokenizer(t)
	root, err := tokenizertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	modules := filepath.Join(root, ".cache", "openai-node", "node_modules")
	node, nodeErr := exec.LookPath("node")
	if _, err := os.Stat(filepath.Join(modules, "openai")); err != nil || nodeErr != nil {
		msg := "OPENAI NPM CLIENT MISSING: run `bash scripts/serve/fetch.sh` (needs node and npm); the official-client test did NOT run"
		if os.Getenv(tokenizertest.EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	m := testModel(t, tok)
	const planted = `Sure<tool_call>{"name":"add","arguments":{"x":3}}</tool_call>`
	chain := plant(t, m, tok, planted)
	_, _, base := startServer(t, m, tok, Options{MaxBatch: 4, MaxSeqLen: 512})
	// ES modules resolve packages from the script's directory upwards, not
	// NODE_PATH: run from a copy next to node_modules.
	dir := filepath.Join(root, ".cache", "openai-node")
	script, err := os.ReadFile(filepath.Join(root, "scripts", "serve", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "client-"+filepath.Base(t.TempDir())+".mjs")
	if err := os.WriteFile(copyPath, script, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(copyPath) })
	cmd := exec.CommandContext(context.Background(), node, copyPath, base, testModelName)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node client: %v\n%s\n%s", err, out, stderr)
	}
	var r nodeResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Tools.Finish != "tool_calls" || r.Tools.Content == nil || *r.Tools.Content != "Sure" || len(r.Tools.Calls) != 1 ||
		r.Tools.Calls[0].Name != "add" || r.Tools.Calls[0].Arguments != `{"x":3}` || r.Tools.Calls[0].Type != "function" {
		t.Errorf("tools: %+v", r.Tools)
	}
	if len(r.N) != 2 || r.NUsage.CompletionTokens != 6 {
		t.Errorf("n=2: %+v usage %+v", r.N, r.NUsage)
	}
	for i, c := range r.N {
		if c.Index != i || c.Finish != "length" || c.Content != tok.Decode(chain[:3]) || len(c.Logprobs) != 3 || c.Logprobs[0].Top != 2 || c.Logprobs[0].Logprob < -1e-3 {
			t.Errorf("n=2 choice %d: %+v", i, c)
		}
	}
	if r.Stop.Finish != "stop" || r.Stop.Content != "Sure" {
		t.Errorf("stop: %+v", r.Stop)
	}
	// Without tools the tool call is plain text, streamed token by token.
	if r.Stream.Content != planted || r.Stream.Finish != "stop" || r.Stream.Usage == nil || r.Stream.Usage.CompletionTokens != len(chain) || r.Stream.Chunks < len(chain) {
		t.Errorf("stream: %+v", r.Stream)
	}
	if !slices.Equal(r.TokenIDs.Completion, chain[:4]) || tok.Decode(r.TokenIDs.Completion) != r.TokenIDs.Content || len(r.TokenIDs.Prompt) == 0 {
		t.Errorf("token ids: %+v, planted %v", r.TokenIDs, chain[:4])
	}
	if !slices.Equal(r.Concurrent, []int{2, 3, 4, 5}) {
		t.Errorf("concurrent completion tokens %v", r.Concurrent)
	}
	for name, f := range map[string]nodeFailure{"unknown model": r.UnknownModel, "overflow": r.Overflow, "bad temperature": r.BadTemperature} {
		want := map[string]int{"unknown model": 404, "overflow": 400, "bad temperature": 400}[name]
		if f.Status != want {
			t.Errorf("%s: status %d (%s), want %d", name, f.Status, f.Message, want)
		}
	}
	if !strings.Contains(r.Overflow.Message, "maximum context length") {
		t.Errorf("overflow message %q", r.Overflow.Message)
	}
	if !slices.Equal(r.Models, []string{testModelName}) {
		t.Errorf("models %v", r.Models)
	}
}
