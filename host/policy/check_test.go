package policy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rlhost/rlhost/host/policy/fakeopenai"
)

// A local server that wants no key works with api_key_env naming an unset
// variable; a server that answers 401 gets an error that names the variable.
func TestUnsetKeyVariable(t *testing.T) {
	const unset = "RLHOST_SURELY_UNSET_KEY_VAR"
	keyless := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("ok")))
	defer keyless.Close()
	p, _ := newTestOpenAI(t, keyless.URL, func(c *Config) { c.APIKeyEnv = ptr(unset) })
	if _, err := p.Complete(context.Background(), Request{Messages: conversation[:2]}); err != nil {
		t.Fatalf("keyless server: %v", err)
	}
	if got := keyless.Log()[0].APIKey(); got != "" {
		t.Errorf("sent key %q although %s is unset", got, unset)
	}

	locked := fakeopenai.New(fakeopenai.RequireKey("sk-right", fakeopenai.Always(fakeopenai.Text("ok"))))
	defer locked.Close()
	p, _ = newTestOpenAI(t, locked.URL, func(c *Config) { c.APIKeyEnv = ptr(unset) })
	_, err := p.Complete(context.Background(), Request{Messages: conversation[:2]})
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "api_key_env names "+unset+", which is not set") {
		t.Fatalf("401 with an unset key variable: %v", err)
	}
	if locked.Requests() != 1 {
		t.Errorf("a 401 was retried: %d requests", locked.Requests())
	}
	locked.RequireModelsKey("sk-right")
	if err := p.Check(context.Background(), nil); err == nil || !strings.Contains(err.Error(), unset) {
		t.Fatalf("Check with an unset key variable against a 401: %v", err)
	}
}

func TestCheck(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("ok")))
	defer srv.Close()
	srv.SetModels("other", "fake-model")
	var _ Checker = (*openAIPolicy)(nil)

	p, _ := newTestOpenAI(t, srv.URL, nil)
	if err := p.Check(context.Background(), nil); err != nil {
		t.Fatalf("served model: %v", err)
	}
	if srv.Requests() != 0 {
		t.Errorf("Check sent %d chat completions", srv.Requests())
	}

	p, _ = newTestOpenAI(t, srv.URL, func(c *Config) { c.Model = ptr("Qwen/Qwen3-8B") })
	err := p.Check(context.Background(), nil)
	for _, want := range []string{"GET " + srv.URL + "/models", `model "Qwen/Qwen3-8B" is not served`, "other, fake-model"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("unknown model: %v; want %q", err, want)
		}
	}

	t.Setenv("RLHOST_CHECK_KEY", "sk-wrong")
	srv.RequireModelsKey("sk-right")
	p, sl := newTestOpenAI(t, srv.URL, func(c *Config) { c.APIKeyEnv = ptr("RLHOST_CHECK_KEY") })
	err = p.Check(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "HTTP 401 invalid_api_key") || len(sl.get()) != 0 {
		t.Errorf("wrong key: %v after %d backoffs; want a 401 without retries", err, len(sl.get()))
	}
	if strings.Contains(err.Error(), "sk-wrong") {
		t.Errorf("the error shows the key: %v", err)
	}
}

// Nothing listening: no answer says "try again", so Check fails at once
// (core/retry.Unreachable also covers unknown hosts), naming the URL and the cause, and the retries are
// kept for answers that do (TestCheckRetriesFlakyServer).
func TestCheckUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name, url, cause string
	}{
		{"nothing listening", "http://" + addr + "/v1", "connection refused: nothing listens at " + addr},
		{"nothing listening, no path", "http://" + addr, "connection refused: nothing listens at " + addr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, sl := newTestOpenAI(t, tc.url, func(c *Config) { c.MaxRetries = ptr(2) })
			var notes []string
			err := p.Check(context.Background(), func(m string) { notes = append(notes, m) })
			if err == nil || !strings.HasPrefix(err.Error(), "GET "+tc.url+"/models: "+tc.cause) {
				t.Fatalf("Check = %v; want GET %s/models: %s", err, tc.url, tc.cause)
			}
			if strings.Count(err.Error(), tc.url) != 1 {
				t.Errorf("the error repeats the URL: %v", err)
			}
			if len(notes) != 0 || len(sl.get()) != 0 {
				t.Errorf("retried: notices %q, %d backoffs", notes, len(sl.get()))
			}
		})
	}
}

// A flaky server gets the configured retries before the check passes.
func TestCheckRetriesFlakyServer(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) <= 2 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"message":"loading","type":"server_error","code":null}}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"list","data":[{"id":"fake-model","object":"model","created":0,"owned_by":"vllm"}]}`))
	}))
	defer srv.Close()
	p, sl := newTestOpenAI(t, srv.URL+"/v1", nil)
	if err := p.Check(context.Background(), nil); err != nil {
		t.Fatalf("Check = %v", err)
	}
	if calls.Load() != 3 || len(sl.get()) != 2 {
		t.Errorf("%d calls, %d backoffs; want 3 and 2", calls.Load(), len(sl.get()))
	}
}
