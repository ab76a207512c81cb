package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sashabaranov/go-openai"

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

func (h *plantHost) UseAdapter(a any) error {
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
