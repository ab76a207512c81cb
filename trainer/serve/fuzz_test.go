package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/trainer/model"
)

// FuzzParseRequest feeds arbitrary bodies to the request parser: it never
// panics, and either accepts a request the engine can run or answers a
// 4xx in OpenAI's error shape.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"n":2,"stop":["x","y"],"logprobs":true,"top_logprobs":3}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":-1,"temperature":1e309}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stop":"","top_k":-1,"top_p":1,"seed":-5,"max_completion_tokens":3}`,
		`[]`, `{`, `null`, `{"model":"m","messages":[{}]}`,
	} {
		f.Add([]byte(seed))
	}
	tok := qwenTokenizer(f)
	s := &Server{opts: Options{ModelName: "m", MaxBatch: 4, MaxSeqLen: 256}, tok: tok, log: hclog.NewNullLogger(), maxLen: 256}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		p, ok := s.parse(w, r)
		if ok {
			j := p.job
			if w.Code != http.StatusOK || j.n < 1 || j.n > 4 || j.maxTokens < 1 || len(j.prompt)+j.maxTokens > 256 || len(j.prompt) == 0 {
				t.Fatalf("accepted an unrunnable request: n=%d max=%d prompt=%d", j.n, j.maxTokens, len(j.prompt))
			}
			for _, id := range j.prompt {
				if int(id) >= tok.VocabSize() || id < 0 {
					t.Fatalf("prompt id %d outside the vocabulary", id)
				}
			}
			return
		}
		if w.Code < 400 || w.Code >= 500 {
			t.Fatalf("rejected with status %d", w.Code)
		}
		var e struct {
			Error apiError `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
			t.Fatalf("error body %q: %v", w.Body.String(), err)
		}
	})
}

// FuzzAdapterRoutes feeds arbitrary bodies to the adapter routes: they
// never panic, and answer 200 with vLLM's success text or an error in
// vLLM's shape whose code is the status.
func FuzzAdapterRoutes(f *testing.F) {
	for _, seed := range []string{
		`{"lora_name":"a","lora_path":"/nonexistent"}`, `{"lora_name":"a"}`, `{"lora_name":"","lora_path":""}`,
		`{"lora_name":"m","lora_path":"/x"}`, `{"lora_name":1}`, `[]`, `{`, `null`, `{"lora_name":"a","lora_path":"/x","load_inplace":true}`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	s := &Server{opts: Options{ModelName: "m"}, log: hclog.NewNullLogger(), adapters: newAdapterSet(dirHost{})}
	f.Fuzz(func(t *testing.T, body []byte, load bool) {
		w := httptest.NewRecorder()
		route, handle := "/v1/unload_lora_adapter", s.unloadAdapter
		if load {
			route, handle = "/v1/load_lora_adapter", s.loadAdapter
		}
		r := httptest.NewRequest(http.MethodPost, route, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		handle(w, r)
		if w.Code == http.StatusOK {
			if !bytes.HasPrefix(w.Body.Bytes(), []byte("Success: LoRA adapter '")) {
				t.Fatalf("200 with body %q", w.Body.String())
			}
			return
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Code != w.Code {
			t.Fatalf("HTTP %d body %q: %v", w.Code, w.Body.String(), err)
		}
	})
}

// dirHost loads any existing directory as an adapter and attaches
// nothing: enough for the routes' bookkeeping.
type dirHost struct{}

func (dirHost) LoadAdapter(dir string) (any, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	return dir, nil
}
func (dirHost) UseAdapter(*model.Cache, any) error { return nil }
