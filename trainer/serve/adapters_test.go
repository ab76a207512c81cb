package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// plantHost is an AdapterHost whose "adapters" are directories holding a
// reply text: attaching one plants that reply into the model's weights,
// detaching plants the base reply. Generation really changes with the
// adapter, so these tests see which one the model carried.
type plantHost struct {
	t    *testing.T
	m    *model.Model
	tok  *tokenizer.Tokenizer
	base string

	mu   sync.Mutex
	uses []string
}

func (h *plantHost) LoadAdapter(dir string) (any, error) {
	b, err := os.ReadFile(filepath.Join(dir, "reply.txt"))
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("empty reply")
	}
	return string(b), nil
}

func (h *plantHost) UseAdapter(_ *model.Cache, a any) error {
	text := h.base
	if a != nil {
		text = a.(string)
	}
	h.mu.Lock()
	h.uses = append(h.uses, text)
	h.mu.Unlock()
	plant(h.t, h.m, h.tok, text)
	return nil
}

func adapterDir(t *testing.T, reply string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "reply.txt"), []byte(reply), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func postJSON(t *testing.T, url, contentType string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, contentType, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func TestAdapterRoutes(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	plant(t, m, tok, "base")
	host := &plantHost{t: t, m: m, tok: tok, base: "base"}
	_, client, base := startServer(t, m, tok, Options{MaxBatch: 4, Adapters: host})
	ctx := context.Background()
	reply := func(model string) (string, error) {
		resp, err := client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: model, Messages: userMsg("hi"), Temperature: 1e-9, MaxTokens: 8})
		if err != nil {
			return "", err
		}
		if resp.Model != model {
			t.Errorf("response names model %q, want %q", resp.Model, model)
		}
		return resp.Choices[0].Message.Content, nil
	}
	alpha, beta := adapterDir(t, "alpha"), adapterDir(t, "beta")
	for _, tc := range []struct {
		name, route, ctype string
		body               any
		status             int
		says               string
	}{
		{"load alpha", "load_lora_adapter", "application/json", map[string]any{"lora_name": "a", "lora_path": alpha}, 200, "Success: LoRA adapter 'a' added successfully."},
		{"load beta", "load_lora_adapter", "application/json; charset=utf-8", map[string]any{"lora_name": "b", "lora_path": beta}, 200, "Success: LoRA adapter 'b' added successfully."},
		{"load a name twice", "load_lora_adapter", "application/json", map[string]any{"lora_name": "a", "lora_path": beta}, 400, "has already been loaded"},
		{"load without a path", "load_lora_adapter", "application/json", map[string]any{"lora_name": "c", "lora_path": ""}, 400, "Both 'lora_name' and 'lora_path' must be provided."},
		{"load without lora_path", "load_lora_adapter", "application/json", map[string]any{"lora_name": "c"}, 400, "Field required"},
		{"load from nowhere", "load_lora_adapter", "application/json", map[string]any{"lora_name": "c", "lora_path": "/nonexistent"}, 404, "Loading lora c failed: No adapter found for /nonexistent"},
		{"load a broken adapter", "load_lora_adapter", "application/json", map[string]any{"lora_name": "c", "lora_path": adapterDir(t, "")}, 500, "empty reply"},
		{"load as text", "load_lora_adapter", "text/plain", map[string]any{"lora_name": "c", "lora_path": alpha}, 400, "Only 'application/json' is allowed"},
		{"unload unknown", "unload_lora_adapter", "application/json", map[string]any{"lora_name": "zz"}, 404, "The lora adapter 'zz' cannot be found."},
		{"unload without a name", "unload_lora_adapter", "application/json", map[string]any{"lora_name": ""}, 400, "'lora_name' needs to be provided"},
	} {
		status, body := postJSON(t, strings.TrimSuffix(base, "/v1")+"/v1/"+tc.route, tc.ctype, tc.body)
		if status != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("%s: HTTP %d %s, want %d saying %q", tc.name, status, body, tc.status, tc.says)
		}
		if status != 200 {
			var e struct {
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != status {
				t.Errorf("%s: error body %s is not vLLM's shape with code %d", tc.name, body, status)
			}
		}
	}
	for _, want := range []struct{ model, reply string }{{"a", "alpha"}, {"b", "beta"}, {testModelName, "base"}, {"a", "alpha"}} {
		got, err := reply(want.model)
		if err != nil || got != want.reply {
			t.Errorf("model %s replied %q (%v), want %q", want.model, got, err, want.reply)
		}
	}
	list, err := client.ListModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != testModelName+",a,b" {
		t.Errorf("/v1/models lists %v, want the base model and a, b", ids)
	}
	// Replaced in place, the adapter in use is attached again.
	status, body := postJSON(t, base+"/load_lora_adapter", "application/json", map[string]any{"lora_name": "a", "lora_path": beta, "load_inplace": true})
	if status != 200 {
		t.Fatalf("load_inplace: HTTP %d %s", status, body)
	}
	if got, _ := reply("a"); got != "beta" {
		t.Errorf("after load_inplace a replies %q, want beta", got)
	}
	if status, body := postJSON(t, base+"/unload_lora_adapter", "application/json", map[string]any{"lora_name": "a"}); status != 200 || body != "Success: LoRA adapter 'a' removed successfully." {
		t.Errorf("unload: HTTP %d %s", status, body)
	}
	_, err = reply("a")
	var apiErr *openai.APIError
	if !asAPIError(err, &apiErr) || apiErr.HTTPStatusCode != 404 || !strings.Contains(apiErr.Message, "The model `a` does not exist") {
		t.Errorf("request for an unloaded adapter: %v, want a 404 saying the model does not exist", err)
	}
}

func asAPIError(err error, target **openai.APIError) bool { return errors.As(err, target) }

// Without an AdapterHost the routes are absent, as on a vLLM started
// without VLLM_ALLOW_RUNTIME_LORA_UPDATING.
func TestAdapterRoutesAbsent(t *testing.T) {
	tok := qwenTokenizer(t)
	_, _, base := startServer(t, testModel(t, tok), tok, Options{MaxBatch: 2})
	status, body := postJSON(t, base+"/load_lora_adapter", "application/json", map[string]any{"lora_name": "a", "lora_path": "/x"})
	if status != 404 || body != `{"detail":"Not Found"}` {
		t.Errorf("HTTP %d %s, want FastAPI's bare 404", status, body)
	}
}

// Requests naming different adapters at once each get their own: the
// model swaps only between the groups that share one.
func TestAdapterRequestsInterleaved(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	plant(t, m, tok, "base")
	host := &plantHost{t: t, m: m, tok: tok, base: "base"}
	_, client, base := startServer(t, m, tok, Options{MaxBatch: 4, Adapters: host})
	for name, reply := range map[string]string{"a": "alpha", "b": "beta"} {
		if status, body := postJSON(t, base+"/load_lora_adapter", "application/json", map[string]any{"lora_name": name, "lora_path": adapterDir(t, reply)}); status != 200 {
			t.Fatalf("load %s: HTTP %d %s", name, status, body)
		}
	}
	want := map[string]string{"a": "alpha", "b": "beta", testModelName: "base"}
	names := []string{"a", "b", testModelName}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			model := names[i%3]
			resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: model, Messages: userMsg("hi"), Temperature: 1e-9, MaxTokens: 8})
			if err != nil {
				t.Error(err)
				return
			}
			if got := resp.Choices[0].Message.Content; got != want[model] {
				t.Errorf("request %d for %s got %q, want %q", i, model, got, want[model])
			}
		})
	}
	wg.Wait()
}

// A PEFT adapter loaded through the route is served exactly: the
// log-probs the server returns for an adapter's completion are those of
// base + adapter scored from scratch, and the base model's are the base's.
func TestLoRAAdapterServed(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	_, _, base := startServer(t, m, tok, Options{MaxBatch: 4, Adapters: LoRA(m)})
	a, err := model.NewAdapter(m.Device(), m.Cfg, model.AdapterConfig{Rank: 4, Alpha: 8, Targets: []model.Module{model.QProj, model.VProj, model.DownProj}})
	if err != nil {
		t.Fatal(err)
	}
	a.Init(5)
	// PEFT starts B at zero (the adapter equals the base); make it count.
	rng := uint64(9)
	for _, p := range a.Params() {
		if strings.Contains(p.Name, "lora_B") {
			w := make([]float32, p.Len())
			for i := range w {
				rng = rng*6364136223846793005 + 1442695040888963407
				w[i] = float32(int64(rng>>33)%2001-1000) / 1000
			}
			m.Device().Upload(p.W, w)
		}
	}
	dir := t.TempDir()
	if err := lora.Save(a, dir, testModelName); err != nil {
		t.Fatal(err)
	}
	if status, body := postJSON(t, base+"/load_lora_adapter", "application/json", map[string]any{"lora_name": "a", "lora_path": dir}); status != 200 {
		t.Fatalf("load: HTTP %d %s", status, body)
	}
	for _, tc := range []struct {
		model   string
		adapter *model.Adapter
	}{{"a", a}, {testModelName, nil}, {"a", a}} {
		raw, err := rawCompletion(base, tc.model)
		if err != nil {
			t.Fatal(err)
		}
		seq := append(slices.Clone(raw.PromptTokenIDs), raw.Choices[0].TokenIDs...)
		want := scoreWith(t, m, tc.adapter, seq)[len(raw.PromptTokenIDs)-1:]
		got := raw.Choices[0].Logprobs.Content
		if len(got) != len(raw.Choices[0].TokenIDs) || len(got) == 0 {
			t.Fatalf("%s: %d log-probs for %d tokens", tc.model, len(got), len(raw.Choices[0].TokenIDs))
		}
		for i := range got {
			if d := math.Abs(float64(got[i].Logprob - want[i])); d > 1e-3 {
				t.Errorf("%s: token %d log-prob %v served, %v scored with the adapter %v", tc.model, i, got[i].Logprob, want[i], tc.adapter != nil)
				break
			}
		}
	}
}

type adapterResponse struct {
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		TokenIDs []int `json:"token_ids"`
		Logprobs struct {
			Content []struct {
				Logprob float32 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

func rawCompletion(base, model string) (adapterResponse, error) {
	b, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "hi"}},
		"max_tokens": 12, "seed": 3, "logprobs": true, "return_token_ids": true})
	resp, err := http.Post(base+"/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		return adapterResponse{}, err
	}
	defer resp.Body.Close()
	var r adapterResponse
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		return r, fmt.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// scoreWith is log p(seq[t+1] | seq[:t+1]) at temperature 1 under m with
// adapter a (nil: the base), computed without a cache.
func scoreWith(t *testing.T, m *model.Model, a *model.Adapter, seq []int) []float32 {
	t.Helper()
	T := len(seq)
	r, err := m.NewRun(1, T)
	if err != nil {
		t.Fatal(err)
	}
	if a != nil {
		if err := r.SetAdapter(a); err != nil {
			t.Fatal(err)
		}
	}
	in, tg := make([]int32, T), make([]int32, T)
	for i, v := range seq {
		in[i], tg[i] = int32(v), -1
		if i+1 < T {
			tg[i] = int32(seq[i+1])
		}
	}
	if err := r.Forward(in, []int{T}); err != nil {
		t.Fatal(err)
	}
	lp := make([]float32, T)
	if err := r.LogProbs(tg, 1, lp); err != nil {
		t.Fatal(err)
	}
	return lp
}
