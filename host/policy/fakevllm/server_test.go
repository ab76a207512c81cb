package fakevllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func post(t *testing.T, url, ctype, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, ctype, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func adapter(t *testing.T, r int) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(fmt.Sprintf(`{"r": %d}`, r)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The wire behaviour vLLM's source defines, request by request.
func TestWire(t *testing.T) {
	s := New(Options{BaseModel: "base", AllowRuntimeLoRA: true, MaxLoRARank: 8})
	defer s.Close()
	v1 := s.URL() + "/v1"
	a := adapter(t, 4)
	noWeights := t.TempDir()
	os.WriteFile(filepath.Join(noWeights, "adapter_config.json"), []byte(`{"r": 4}`), 0o644)
	for _, tc := range []struct {
		name, route, ctype, body string
		status                   int
		says                     string
	}{
		{"load", "/load_lora_adapter", "application/json", `{"lora_name": "a", "lora_path": "` + a + `"}`, 200, "Success: LoRA adapter 'a' added successfully."},
		{"load again", "/load_lora_adapter", "application/json", `{"lora_name": "a", "lora_path": "` + a + `"}`, 400, "has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True."},
		{"load in place", "/load_lora_adapter", "application/json", `{"lora_name": "a", "lora_path": "` + a + `", "load_inplace": true}`, 200, "Success"},
		{"load, empty name", "/load_lora_adapter", "application/json", `{"lora_name": "", "lora_path": "x"}`, 400, "Both 'lora_name' and 'lora_path' must be provided."},
		{"load, no path field", "/load_lora_adapter", "application/json", `{"lora_name": "b"}`, 400, "Field required"},
		{"load, not JSON", "/load_lora_adapter", "text/plain", `{"lora_name": "b", "lora_path": "x"}`, 400, "Only 'application/json' is allowed"},
		{"load, no weights", "/load_lora_adapter", "application/json", `{"lora_name": "b", "lora_path": "` + noWeights + `"}`, 404, "No adapter found for " + noWeights},
		{"unload unknown", "/unload_lora_adapter", "application/json", `{"lora_name": "zz"}`, 404, "The lora adapter 'zz' cannot be found."},
		{"chat, unknown model", "/chat/completions", "application/json", `{"model": "zz", "messages": [{"role": "user", "content": "hi"}]}`, 404, "The model `zz` does not exist."},
		{"chat, adapter", "/chat/completions", "application/json", `{"model": "a", "messages": [{"role": "user", "content": "hi"}], "return_token_ids": true}`, 200, `"prompt_token_ids":[1,2,3]`},
		{"unload", "/unload_lora_adapter", "application/json", `{"lora_name": "a"}`, 200, "Success: LoRA adapter 'a' removed successfully."},
		{"chat, unloaded adapter", "/chat/completions", "application/json", `{"model": "a", "messages": [{"role": "user", "content": "hi"}]}`, 404, "does not exist"},
	} {
		status, body := post(t, v1+tc.route, tc.ctype, tc.body)
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
				t.Errorf("%s: %s is not vLLM's error shape with code %d", tc.name, body, status)
			}
		}
	}
	if got, want := strings.Join(s.Loads(), ","), "a,a"; got != want {
		t.Errorf("loads %s, want %s", got, want)
	}
	// A rank over --max-lora-rank fails inside the engine: a 500.
	status, body := post(t, v1+"/load_lora_adapter", "application/json", `{"lora_name": "big", "lora_path": "`+adapter(t, 9)+`"}`)
	if status != 500 || !strings.Contains(body, "LoRA rank 9 is greater than max_lora_rank 8") {
		t.Errorf("big adapter: HTTP %d %s", status, body)
	}
}

func TestModelsListsAdapters(t *testing.T) {
	s := New(Options{BaseModel: "base", AllowRuntimeLoRA: true})
	defer s.Close()
	a := adapter(t, 4)
	if status, body := post(t, s.URL()+"/v1/load_lora_adapter", "application/json", `{"lora_name": "a", "lora_path": "`+a+`"}`); status != 200 {
		t.Fatalf("load: %d %s", status, body)
	}
	resp, err := http.Get(s.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID, Root string
			Parent   *string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != 2 || list.Data[0].ID != "base" || list.Data[1].ID != "a" || list.Data[1].Root != a || list.Data[1].Parent == nil || *list.Data[1].Parent != "base" {
		t.Errorf("models %+v", list.Data)
	}
}

func TestRoutesNeedRuntimeUpdating(t *testing.T) {
	s := New(Options{BaseModel: "base"})
	defer s.Close()
	status, body := post(t, s.URL()+"/v1/load_lora_adapter", "application/json", `{"lora_name": "a", "lora_path": "/x"}`)
	if status != 404 || strings.TrimSpace(body) != `{"detail":"Not Found"}` {
		t.Errorf("HTTP %d %s, want FastAPI's bare 404", status, body)
	}
}

func TestNoTokenIDs(t *testing.T) {
	s := New(Options{BaseModel: "base", NoTokenIDs: true})
	defer s.Close()
	status, body := post(t, s.URL()+"/v1/chat/completions", "application/json", `{"model": "base", "messages": [{"role": "user", "content": "hi"}], "return_token_ids": true, "logprobs": true}`)
	if status != 200 || strings.Contains(body, "token_ids") || !strings.Contains(body, `"logprob"`) {
		t.Errorf("HTTP %d %s: want text and log-probs without ids", status, body)
	}
}
