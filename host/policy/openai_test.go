package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/policy/fakeopenai"
)

func ptr[T any](v T) *T { return &v }

// sleepLog records the backoffs a policy asked for instead of waiting.
type sleepLog struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleepLog) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepLog) get() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// newTestOpenAI builds an openai policy against url with a 1ms backoff base
// and its sleeps recorded rather than slept.
func newTestOpenAI(t *testing.T, url string, mut func(*Config)) (*openAIPolicy, *sleepLog) {
	t.Helper()
	cfg := Config{
		Name: "test", Provider: "openai", BaseURL: ptr(url), Model: ptr("fake-model"),
		MaxRetries: ptr(4), BackoffBase: ptr("1ms"), BackoffMax: ptr("4ms"), Timeout: ptr("30s"),
	}
	if mut != nil {
		mut(&cfg)
	}
	p, err := New(cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	op := p.(*openAIPolicy)
	sl := &sleepLog{}
	op.sleep = sl.sleep
	return op, sl
}

var pythonTool = core.ToolSpec{Type: "function", Function: core.FunctionSpec{
	Name: "run_python", Description: "Run Python code in the sandbox.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}`),
}}

// conversation has every role and a malformed earlier tool call, to check
// the request crosses the wire unchanged.
var conversation = []core.Message{
	{Role: core.RoleSystem, Content: "You are a careful programmer."},
	{Role: core.RoleUser, Content: "Write add(a, b). <html> & \"quotes\" ünïcödé"},
	{Role: core.RoleAssistant, ToolCalls: []core.ToolCall{
		{ID: "call_1", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: `{"code": "print(1)"`}},
		{ID: "call_2", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: "{ \"code\" :\t\"x\" }"}},
	}},
	{Role: core.RoleTool, ToolCallID: "call_1", Content: "error: invalid JSON arguments"},
	{Role: core.RoleTool, ToolCallID: "call_2", Content: "NameError: x"},
	{Role: core.RoleAssistant, Content: "Let me retry.", Name: "bot"},
	{Role: core.RoleUser, Content: "go on"},
}

func TestOpenAIRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		reply fakeopenai.ReplyChoice
		want  Choice
	}{
		{
			name:  "tool call",
			reply: fakeopenai.ReplyChoice{ToolCalls: []core.ToolCall{{ID: "call_abc", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: `{"code":"def add(a, b):\n    return a + b"}`}}}},
			want: Choice{FinishReason: "tool_calls", Message: core.Message{Role: core.RoleAssistant, ToolCalls: []core.ToolCall{
				{ID: "call_abc", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: `{"code":"def add(a, b):\n    return a + b"}`}}}}},
		},
		{
			name:  "malformed arguments preserved",
			reply: fakeopenai.ReplyChoice{ToolCalls: []core.ToolCall{{ID: "c9", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: `{"code": "print('<&>')",,}` + "\x00\t"}}}},
			want: Choice{FinishReason: "tool_calls", Message: core.Message{Role: core.RoleAssistant, ToolCalls: []core.ToolCall{
				{ID: "c9", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: `{"code": "print('<&>')",,}` + "\x00\t"}}}}},
		},
		{
			name:  "text and tool call together",
			reply: fakeopenai.ReplyChoice{Content: "Testing:", ToolCalls: []core.ToolCall{{ID: "k", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: ""}}}},
			want: Choice{FinishReason: "tool_calls", Message: core.Message{Role: core.RoleAssistant, Content: "Testing:", ToolCalls: []core.ToolCall{
				{ID: "k", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: ""}}}}},
		},
		{
			name:  "plain text, length-limited",
			reply: fakeopenai.ReplyChoice{Content: strings.Repeat("long ", 10000), FinishReason: "length"},
			want:  Choice{FinishReason: "length", Message: core.Message{Role: core.RoleAssistant, Content: strings.Repeat("long ", 10000)}},
		},
		{
			name:  "empty reply returned as is",
			reply: fakeopenai.Text(""),
			want:  Choice{FinishReason: "stop", Message: core.Message{Role: core.RoleAssistant}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Always(tc.reply))
			defer srv.Close()
			p, _ := newTestOpenAI(t, srv.URL, nil)
			resp, err := p.Complete(context.Background(), Request{Messages: conversation, Tools: []core.ToolSpec{pythonTool}, TaskID: "t"})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Choices) != 1 || !reflect.DeepEqual(resp.Choices[0], tc.want) {
				t.Fatalf("choices = %#v\nwant %#v", resp.Choices, tc.want)
			}
			if resp.Usage.PromptTokens == 0 || resp.Usage.CompletionTokens == 0 ||
				resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
				t.Errorf("usage not recorded: %+v", resp.Usage)
			}
			log := srv.Log()
			if len(log) != 1 {
				t.Fatalf("%d requests, want 1", len(log))
			}
			got := log[0]
			if !reflect.DeepEqual(got.Messages, conversation) {
				t.Errorf("server saw messages\n%#v\nwant\n%#v", got.Messages, conversation)
			}
			if len(got.Tools) != 1 || got.Tools[0].Function.Name != "run_python" ||
				!bytes.Equal(got.Tools[0].Function.Parameters, pythonTool.Function.Parameters) ||
				got.Tools[0].Function.Description != pythonTool.Function.Description {
				t.Errorf("server saw tools %+v", got.Tools)
			}
			if got.Model != "fake-model" || got.N != nil || got.Seed != nil || got.Temperature != nil {
				t.Errorf("unexpected request options: model %q n %v seed %v temperature %v", got.Model, got.N, got.Seed, got.Temperature)
			}
		})
	}
}

func TestOpenAIEmptyContentSent(t *testing.T) {
	// go-openai omits empty content; the API requires it on all but
	// tool-calling assistant messages, and the fake refuses it the same way.
	conv := []core.Message{
		{Role: core.RoleSystem, Content: ""},
		{Role: core.RoleUser, Content: "run it"},
		{Role: core.RoleAssistant, ToolCalls: []core.ToolCall{{ID: "c1", Type: "function", Function: core.FunctionCall{Name: "run_python", Arguments: `{"code":"pass"}`}}}},
		{Role: core.RoleTool, ToolCallID: "c1", Content: ""},
		{Role: core.RoleAssistant, Content: ""}, // an empty reply the runner kept
		{Role: core.RoleUser, Content: "your reply was empty"},
	}
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("ok")))
	defer srv.Close()
	p, _ := newTestOpenAI(t, srv.URL, nil)
	resp, err := p.Complete(context.Background(), Request{Messages: conv, Tools: []core.ToolSpec{pythonTool}, Seed: 1 << 60})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "ok" {
		t.Fatalf("response %+v", resp)
	}
	got := srv.Log()[0]
	if !reflect.DeepEqual(got.Messages, conv) {
		t.Errorf("server saw\n%#v\nwant\n%#v", got.Messages, conv)
	}
	if got.Seed == nil || *got.Seed != 1<<60 || !bytes.Equal(got.Tools[0].Function.Parameters, pythonTool.Function.Parameters) {
		t.Errorf("rewriting the body changed other fields: seed %v tools %+v", got.Seed, got.Tools)
	}
}

func TestOpenAISamplingOptions(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("ok")))
	defer srv.Close()
	p, _ := newTestOpenAI(t, srv.URL, func(c *Config) {
		c.Temperature, c.TopP, c.MaxTokens, c.Stop = ptr(0.0), ptr(0.9), ptr(512), []string{"</answer>"}
	})
	if _, err := p.Complete(context.Background(), Request{Messages: conversation[:2], Seed: 1234}); err != nil {
		t.Fatal(err)
	}
	got := srv.Log()[0]
	if got.Temperature == nil || *got.Temperature <= 0 || *got.Temperature > 1e-30 {
		t.Errorf("temperature 0 went out as %v, want a tiny positive value", got.Temperature)
	}
	if got.TopP == nil || float32(*got.TopP) != float32(0.9) || got.MaxTokens == nil || *got.MaxTokens != 512 {
		t.Errorf("top_p %v max_tokens %v", got.TopP, got.MaxTokens)
	}
	if got.Seed == nil || *got.Seed != 1234 {
		t.Errorf("seed %v, want 1234", got.Seed)
	}
	var stop []string
	if err := json.Unmarshal(got.Stop, &stop); err != nil || !reflect.DeepEqual(stop, []string{"</answer>"}) {
		t.Errorf("stop %s", got.Stop)
	}
	if got.APIKey() != "" {
		t.Errorf("sent a key although api_key_env is not set")
	}
}

func TestOpenAIErrorsAndRetries(t *testing.T) {
	ok := fakeopenai.Always(fakeopenai.Text("ok"))
	retryAfter := func(n int, v string) fakeopenai.Agent {
		var mu sync.Mutex
		calls := 0
		return func(req fakeopenai.ChatRequest) fakeopenai.Reply {
			mu.Lock()
			calls++
			c := calls
			mu.Unlock()
			if c <= n {
				return fakeopenai.RateLimited(v)
			}
			return ok(req)
		}
	}
	tests := []struct {
		name       string
		agent      fakeopenai.Agent
		maxRetries int
		wantErr    error // nil: success expected
		rejected   bool  // error must not be a retry exhaustion
		requests   int
		sleeps     []time.Duration // exact backoffs; nil: only count and bounds checked
		numSleeps  int
	}{
		{name: "429 storm then success", agent: fakeopenai.FailFirst(4, http.StatusTooManyRequests, ok), maxRetries: 4, requests: 5, numSleeps: 4},
		{name: "Retry-After seconds honoured", agent: retryAfter(2, "7"), maxRetries: 4, requests: 3, sleeps: []time.Duration{7 * time.Second, 7 * time.Second}},
		{name: "Retry-After capped", agent: retryAfter(1, "86400"), maxRetries: 4, requests: 2, sleeps: []time.Duration{maxRetryAfter}},
		{name: "500 then success", agent: fakeopenai.FailFirst(1, http.StatusInternalServerError, ok), maxRetries: 4, requests: 2, numSleeps: 1},
		{name: "503 past max_retries", agent: fakeopenai.FailFirst(100, http.StatusServiceUnavailable, ok), maxRetries: 2, wantErr: errAny, requests: 3, numSleeps: 2},
		{name: "no retries allowed", agent: fakeopenai.FailFirst(1, http.StatusBadGateway, ok), maxRetries: 0, wantErr: errAny, requests: 1},
		{name: "context length (OpenAI)", agent: func(fakeopenai.ChatRequest) fakeopenai.Reply { return fakeopenai.ContextLengthExceeded() },
			maxRetries: 4, wantErr: ErrContextLength, requests: 1},
		{name: "context length (older vLLM)", agent: func(fakeopenai.ChatRequest) fakeopenai.Reply { return fakeopenai.VLLMContextLengthExceeded() },
			maxRetries: 4, wantErr: ErrContextLength, requests: 1},
		{name: "bad key", agent: fakeopenai.RequireKey("sk-right", ok), maxRetries: 4, wantErr: ErrRejected, rejected: true, requests: 1},
		{name: "invalid request 400", agent: func(fakeopenai.ChatRequest) fakeopenai.Reply {
			return fakeopenai.Error(http.StatusBadRequest, "", "messages: invalid content")
		}, maxRetries: 4, wantErr: ErrInvalidRequest, requests: 1},
		{name: "unknown model 404", agent: func(fakeopenai.ChatRequest) fakeopenai.Reply {
			return fakeopenai.Error(http.StatusNotFound, "model_not_found", "The model `x` does not exist")
		}, maxRetries: 4, wantErr: ErrRejected, rejected: true, requests: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("RLHOST_TEST_KEY", "sk-wrong-secret")
			srv := fakeopenai.New(tc.agent)
			defer srv.Close()
			p, sl := newTestOpenAI(t, srv.URL, func(c *Config) {
				c.MaxRetries = ptr(tc.maxRetries)
				c.APIKeyEnv = ptr("RLHOST_TEST_KEY")
			})
			resp, err := p.Complete(context.Background(), Request{Messages: conversation[:2], TaskID: "t"})
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr == nil && (len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "ok"):
				t.Fatalf("response %+v", resp)
			case tc.wantErr == errAny && err == nil,
				tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "sk-wrong-secret") {
				t.Fatalf("error leaks the API key: %v", err)
			}
			if err != nil && !tc.rejected && errors.Is(err, ErrRejected) {
				t.Fatalf("retryable failure reported as rejected: %v", err)
			}
			if got := srv.Requests(); got != tc.requests {
				t.Errorf("%d requests, want %d", got, tc.requests)
			}
			sleeps := sl.get()
			if tc.sleeps != nil {
				if !reflect.DeepEqual(sleeps, tc.sleeps) {
					t.Errorf("backoffs %v, want %v", sleeps, tc.sleeps)
				}
				return
			}
			if len(sleeps) != tc.numSleeps {
				t.Fatalf("backoffs %v, want %d of them", sleeps, tc.numSleeps)
			}
			for i, d := range sleeps {
				if ceil := backoffCeiling(i, time.Millisecond, 4*time.Millisecond); d < 0 || d > ceil {
					t.Errorf("backoff %d = %v, outside [0, %v]", i, d, ceil)
				}
			}
		})
	}
}

// errAny marks a test case that expects some error.
var errAny = errors.New("any error")

func TestOpenAIBackoffUsesFullJitter(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.FailFirst(6, http.StatusTooManyRequests, fakeopenai.Always(fakeopenai.Text("ok"))))
	defer srv.Close()
	p, sl := newTestOpenAI(t, srv.URL, func(c *Config) { c.MaxRetries = ptr(6) })
	var ceilings []int64
	p.jitter = func(n int64) int64 { ceilings = append(ceilings, n); return n - 1 } // always the top of the range
	if _, err := p.Complete(context.Background(), Request{Messages: conversation[:2]}); err != nil {
		t.Fatal(err)
	}
	ms := int64(time.Millisecond)
	want := []int64{ms + 1, 2*ms + 1, 4*ms + 1, 4*ms + 1, 4*ms + 1, 4*ms + 1} // base 1ms doubling, capped at 4ms
	if !reflect.DeepEqual(ceilings, want) {
		t.Errorf("jitter ranges %v, want %v", ceilings, want)
	}
	if got := sl.get(); len(got) != 6 || got[2] != 4*time.Millisecond {
		t.Errorf("backoffs %v", got)
	}
}

func TestOpenAITransportErrorsRetried(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("ok")))
	url := srv.URL
	srv.Close() // nothing listens there any more
	p, sl := newTestOpenAI(t, url, func(c *Config) { c.MaxRetries = ptr(2) })
	_, err := p.Complete(context.Background(), Request{Messages: conversation[:2]})
	if err == nil || errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "giving up after 3 attempts") {
		t.Fatalf("error %v, want retries exhausted", err)
	}
	if n := len(sl.get()); n != 2 {
		t.Errorf("%d backoffs, want 2", n)
	}
}

func TestOpenAITimeoutRetried(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := fakeopenai.New(func(req fakeopenai.ChatRequest) fakeopenai.Reply {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			return fakeopenai.Reply{Hang: true}
		}
		return fakeopenai.Reply{Choices: []fakeopenai.ReplyChoice{fakeopenai.Text("ok")}}
	})
	defer srv.Close()
	// Long enough that a loaded machine answers the second attempt in time.
	p, sl := newTestOpenAI(t, srv.URL, func(c *Config) { c.Timeout = ptr("500ms") })
	resp, err := p.Complete(context.Background(), Request{Messages: conversation[:2]})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "ok" || srv.Requests() != 2 || len(sl.get()) != 1 {
		t.Fatalf("response %+v after %d requests and %d backoffs", resp, srv.Requests(), len(sl.get()))
	}
}

func TestOpenAIClientSideValidationNotRetried(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("ok")))
	defer srv.Close()
	// go-openai refuses max_tokens for reasoning models before sending.
	p, sl := newTestOpenAI(t, srv.URL, func(c *Config) { c.Model, c.MaxTokens = ptr("o1-mini"), ptr(100) })
	_, err := p.Complete(context.Background(), Request{Messages: conversation[:2]})
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("error %v, want ErrRejected", err)
	}
	if srv.Requests() != 0 || len(sl.get()) != 0 {
		t.Fatalf("%d requests and %d backoffs for a request that cannot succeed", srv.Requests(), len(sl.get()))
	}
}

func TestOpenAICancelledContext(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.FailFirst(100, http.StatusTooManyRequests, nil))
	defer srv.Close()
	p, _ := newTestOpenAI(t, srv.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	// Cancel during the first backoff; the policy must stop, not retry on.
	p.sleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	_, err := p.Complete(ctx, Request{Messages: conversation[:2]})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if n := srv.Requests(); n != 1 {
		t.Errorf("%d requests after cancel, want 1", n)
	}
}

func TestOpenAIChoicesN(t *testing.T) {
	numbered := func(req fakeopenai.ChatRequest) []fakeopenai.ReplyChoice {
		var out []fakeopenai.ReplyChoice
		for i := range req.NumChoices() {
			out = append(out, fakeopenai.Text(strings.Repeat("x", req.Seq*10+i)))
		}
		return out
	}
	tests := []struct {
		name      string
		agent     fakeopenai.Agent
		n         int
		calls     int // Complete calls made with the same policy
		requests  int // total HTTP requests over all calls
		wantSeeds []int64
	}{
		{name: "server honours n", n: 4, calls: 2, requests: 2,
			agent: func(req fakeopenai.ChatRequest) fakeopenai.Reply {
				return fakeopenai.Reply{Choices: numbered(req)}
			}, wantSeeds: []int64{7, 7}},
		{name: "server ignores n", n: 4, calls: 2, requests: 8,
			agent: func(req fakeopenai.ChatRequest) fakeopenai.Reply {
				return fakeopenai.Reply{Choices: numbered(req)[:1], IgnoreN: true}
			}, wantSeeds: []int64{7, 8, 9, 10, 7, 8, 9, 10}},
		{name: "server gives two of four", n: 4, calls: 1, requests: 3,
			agent: func(req fakeopenai.ChatRequest) fakeopenai.Reply {
				return fakeopenai.Reply{Choices: numbered(req)[:min(2, req.NumChoices())], IgnoreN: true}
			}, wantSeeds: []int64{7, 9, 10}},
		{name: "server gives more than asked", n: 2, calls: 1, requests: 1,
			agent: func(req fakeopenai.ChatRequest) fakeopenai.Reply {
				return fakeopenai.Reply{Choices: []fakeopenai.ReplyChoice{fakeopenai.Text("a"), fakeopenai.Text("b"), fakeopenai.Text("c")}, IgnoreN: true}
			}, wantSeeds: []int64{7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeopenai.New(tc.agent)
			defer srv.Close()
			p, _ := newTestOpenAI(t, srv.URL, nil)
			for range tc.calls {
				resp, err := p.Complete(context.Background(), Request{Messages: conversation[:2], N: tc.n, Seed: 7})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Choices) != tc.n {
					t.Fatalf("%d choices, want %d", len(resp.Choices), tc.n)
				}
				if resp.Usage.CompletionTokens == 0 {
					t.Errorf("usage not summed: %+v", resp.Usage)
				}
			}
			log := srv.Log()
			if len(log) != tc.requests {
				t.Fatalf("%d requests, want %d", len(log), tc.requests)
			}
			var seeds []int64
			for _, r := range log {
				seeds = append(seeds, *r.Seed)
			}
			// Fallback requests run concurrently and may arrive in any order.
			slicesSortPerCall(seeds, tc.calls)
			if !reflect.DeepEqual(seeds, tc.wantSeeds) {
				t.Errorf("seeds %v, want %v", seeds, tc.wantSeeds)
			}
		})
	}
}

// slicesSortPerCall sorts each call's share of the seeds.
func slicesSortPerCall(s []int64, calls int) {
	per := len(s) / calls
	for c := range calls {
		slices.Sort(s[c*per : (c+1)*per])
	}
}
