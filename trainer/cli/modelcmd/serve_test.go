package modelcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe to write from the command's goroutine
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The start-up line says where the server is and which model name to
// send; a request with that name, or with none, is served.
func TestServeStartupLineNamesTheModel(t *testing.T) {
	tmp := t.TempDir()
	tokPath := writeTokenizer(t, tmp)
	cfg := `{"model_type":"qwen2","hidden_size":16,"intermediate_size":32,"num_hidden_layers":1,
	"num_attention_heads":2,"num_key_value_heads":1,"vocab_size":260,"max_position_embeddings":512,
	"rope_theta":10000,"rms_norm_eps":1e-6,"tie_word_embeddings":false,"eos_token_id":257}`
	cfgPath := filepath.Join(tmp, "config.json")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "m")
	mustRun(t, "init", "--config", cfgPath, "--out", dir, "--tokenizer", tokPath)

	ctx, cancel := context.WithCancel(context.Background())
	var out, errs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--model", dir, "--port", "0", "--name", "mine", "--threads", "1"}, &out, &errs)
	}()
	line := regexp.MustCompile(`serving (\S+) at (http://\S+/v1) \(requests send "model": "([^"]+)", or leave it out\)`)
	var m []string
	for deadline := time.Now().Add(time.Minute); m == nil; {
		if m = line.FindStringSubmatch(out.String()); m == nil {
			if time.Now().After(deadline) {
				t.Fatalf("no start-up line: stdout %q, stderr %q", out.String(), errs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if m[1] != dir || m[3] != "mine" {
		t.Fatalf("start-up line %q", m[0])
	}
	for _, body := range []map[string]any{
		{"model": m[3], "messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 2},
		{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 2},
	} {
		b, _ := json.Marshal(body)
		resp, err := http.Post(m[2]+"/chat/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Model string `json:"model"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || r.Model != "mine" {
			t.Fatalf("%v: HTTP %d, model %q, %v", body, resp.StatusCode, r.Model, err)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d: %s", code, errs.String())
	}
}
