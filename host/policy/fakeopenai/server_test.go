package fakeopenai

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rlhost/rlhost/core"
)

// post sends body to the server's chat endpoint and decodes the JSON reply
// generically, so the checks see exactly the wire shape.
func post(t *testing.T, url, body string) (int, http.Header, map[string]any) {
	t.Helper()
	return postTo(t, url+"/chat/completions", body)
}

func postTo(t *testing.T, endpoint, body string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("reply is not a JSON object: %v: %s", err, data)
	}
	return resp.StatusCode, resp.Header, out
}

// at walks a decoded JSON value by keys and indexes.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: not an object: %v", path, v)
			}
			if _, ok := m[k]; !ok {
				t.Fatalf("at %v: key %q missing in %v", path, k, m)
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("at %v: no index %d in %v", path, k, v)
			}
			v = a[k]
		}
	}
	return v
}

const toolRequest = `{"model":"m","messages":[
 {"role":"user","content":"add"},
 {"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"run","arguments":"{\"code\": 1"}}]},
 {"role":"tool","tool_call_id":"c1","content":"bad args"}],
 "tools":[{"type":"function","function":{"name":"run","description":"d","parameters":{"type":"object"}}}],
 "n":2,"seed":5,"temperature":0.5,"stream":false}`

func TestWireFormat(t *testing.T) {
	srv := New(Always(ReplyChoice{ToolCalls: []core.ToolCall{Call("run", `{"code": "x"`)}}))
	defer srv.Close()
	status, _, out := post(t, srv.URL, toolRequest)
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, out)
	}
	checks := []struct {
		path []any
		want any
	}{
		{[]any{"object"}, "chat.completion"},
		{[]any{"id"}, "chatcmpl-fake1"},
		{[]any{"model"}, "m"},
		{[]any{"choices", 1, "index"}, 1.0},
		{[]any{"choices", 0, "message", "role"}, "assistant"},
		{[]any{"choices", 0, "message", "content"}, nil},
		{[]any{"choices", 0, "message", "tool_calls", 0, "id"}, "call_fake1_0_0"},
		{[]any{"choices", 1, "message", "tool_calls", 0, "id"}, "call_fake1_1_0"},
		{[]any{"choices", 0, "message", "tool_calls", 0, "type"}, "function"},
		{[]any{"choices", 0, "message", "tool_calls", 0, "function", "name"}, "run"},
		{[]any{"choices", 0, "message", "tool_calls", 0, "function", "arguments"}, `{"code": "x"`},
		{[]any{"choices", 0, "finish_reason"}, "tool_calls"},
		{[]any{"choices", 0, "logprobs"}, nil},
	}
	for _, c := range checks {
		if got := at(t, out, c.path...); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v = %#v, want %#v", c.path, got, c.want)
		}
	}
	if _, ok := at(t, out, "created").(float64); !ok {
		t.Error("created is not a number")
	}
	p, c, tot := at(t, out, "usage", "prompt_tokens").(float64), at(t, out, "usage", "completion_tokens").(float64), at(t, out, "usage", "total_tokens").(float64)
	if p < 1 || c < 1 || tot != p+c {
		t.Errorf("usage %v %v %v", p, c, tot)
	}

	req := srv.Log()[0]
	if req.Seq != 1 || req.NumChoices() != 2 || *req.Seed != 5 || *req.Temperature != 0.5 || req.Turn() != 1 ||
		req.Messages[1].ToolCalls[0].Function.Arguments != `{"code": 1` || req.LastMessage().ToolCallID != "c1" ||
		string(req.Tools[0].Function.Parameters) != `{"type":"object"}` || !bytes.Equal(req.Body, []byte(toolRequest)) {
		t.Errorf("logged request %+v", req)
	}
}

func TestChoicesFillN(t *testing.T) {
	tests := []struct {
		name  string
		reply Reply
		n     int
		want  int
	}{
		{"single choice repeated to n", Reply{Choices: []ReplyChoice{Text("a")}}, 3, 3},
		{"IgnoreN keeps one", Reply{Choices: []ReplyChoice{Text("a")}, IgnoreN: true}, 3, 1},
		{"several choices sent as given", Reply{Choices: []ReplyChoice{Text("a"), Text("b")}}, 3, 2},
		{"no n", Reply{Choices: []ReplyChoice{Text("a")}}, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := New(func(ChatRequest) Reply { return tc.reply })
			defer srv.Close()
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			if tc.n > 0 {
				body = strings.Replace(body, `"model"`, `"n":`+string(rune('0'+tc.n))+`,"model"`, 1)
			}
			_, _, out := post(t, srv.URL, body)
			if got := len(at(t, out, "choices").([]any)); got != tc.want {
				t.Fatalf("%d choices, want %d", got, tc.want)
			}
			if got := at(t, out, "choices", 0, "message", "content"); got != "a" {
				t.Fatalf("content %v", got)
			}
		})
	}
}

func TestErrorReplies(t *testing.T) {
	valid := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name       string
		agent      Agent
		path, body string
		status     int
		typ, code  any // want error.type and error.code; code nil means JSON null
		msgPart    string
		retryAfter string
	}{
		{name: "rate limited", agent: func(ChatRequest) Reply { return RateLimited("3") }, body: valid,
			status: 429, typ: "requests", code: "rate_limit_exceeded", msgPart: "Rate limit", retryAfter: "3"},
		{name: "context length", agent: func(ChatRequest) Reply { return ContextLengthExceeded() }, body: valid,
			status: 400, typ: "invalid_request_error", code: "context_length_exceeded", msgPart: "maximum context length"},
		{name: "server error", agent: FailFirst(1, 500, nil), body: valid, status: 500, typ: "server_error", code: nil},
		{name: "bad key", agent: RequireKey("k", nil), body: valid, status: 401, typ: "invalid_request_error", code: "invalid_api_key"},
		{name: "script exhausted", agent: Script(), body: valid, status: 400, typ: "invalid_request_error", code: nil, msgPart: "no turn 0"},
		{name: "unknown path", path: "/v1/completions", body: valid, status: 404, typ: "invalid_request_error", code: "unknown_url"},
		{name: "not JSON", body: "{", status: 400, typ: "invalid_request_error", code: nil, msgPart: "could not parse"},
		{name: "unknown field", body: `{"model":"m","mesages":[]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: `unknown field "mesages"`},
		{name: "no model", body: `{"messages":[{"role":"user","content":"x"}]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: "model"},
		{name: "streaming", body: `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: "streaming"},
		{name: "n too large", body: `{"model":"m","n":129,"messages":[{"role":"user","content":"x"}]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: "maximum of 128"},
		{name: "n zero", body: `{"model":"m","n":0,"messages":[{"role":"user","content":"x"}]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: "'n'"},
		{name: "tool without id", body: `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: "tool_call_id"},
		{name: "user without content", body: `{"model":"m","messages":[{"role":"user"}]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: "'messages[0].content'"},
		{name: "empty assistant without content", body: `{"model":"m","messages":[{"role":"user","content":""},{"role":"assistant"}]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: "'messages[1].content'"},
		{name: "bad role", body: `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, status: 400, typ: "invalid_request_error", code: nil, msgPart: "robot"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			agent := tc.agent
			if agent == nil {
				agent = Always(Text("unreachable"))
			}
			srv := New(agent)
			defer srv.Close()
			endpoint := srv.URL + "/chat/completions"
			if tc.path != "" {
				endpoint = strings.TrimSuffix(srv.URL, "/v1") + tc.path
			}
			status, hdr, out := postTo(t, endpoint, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %v", status, tc.status, out)
			}
			if got := at(t, out, "error", "type"); got != tc.typ {
				t.Errorf("type %v, want %v", got, tc.typ)
			}
			if got := at(t, out, "error", "code"); got != tc.code {
				t.Errorf("code %v, want %v", got, tc.code)
			}
			if got := at(t, out, "error", "param"); got != nil {
				t.Errorf("param %v, want null", got)
			}
			if msg := at(t, out, "error", "message").(string); !strings.Contains(msg, tc.msgPart) {
				t.Errorf("message %q lacks %q", msg, tc.msgPart)
			}
			if got := hdr.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
		})
	}
}

func TestVLLMRawBody(t *testing.T) {
	srv := New(func(ChatRequest) Reply { return VLLMContextLengthExceeded() })
	defer srv.Close()
	status, _, out := post(t, srv.URL, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	if status != 400 || at(t, out, "object") != "error" || !strings.Contains(at(t, out, "message").(string), "maximum context length") {
		t.Fatalf("status %d body %v", status, out)
	}
}

func TestScriptFollowsTurns(t *testing.T) {
	agent := Script(Text("first"), ToolCall("run", "{}"), Text("done"))
	conv := []core.Message{{Role: core.RoleUser, Content: "go"}}
	for turn, want := range []string{"first", "", "done"} {
		rep := agent(ChatRequest{Messages: conv})
		if len(rep.Choices) != 1 || rep.Choices[0].Content != want {
			t.Fatalf("turn %d: %+v", turn, rep)
		}
		conv = append(conv, core.Message{Role: core.RoleAssistant}, core.Message{Role: core.RoleUser, Content: "more"})
	}
	if rep := agent(ChatRequest{Messages: conv}); rep.Status != http.StatusBadRequest {
		t.Fatalf("past the script: %+v", rep)
	}
}

func TestConcurrentRequests(t *testing.T) {
	srv := New(FailFirst(10, http.StatusTooManyRequests, Always(Text("ok"))))
	defer srv.Close()
	const n = 32
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := http.Post(srv.URL+"/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	if srv.Requests() != n {
		t.Fatalf("%d requests logged, want %d", srv.Requests(), n)
	}
	var seqs []int
	for _, r := range srv.Log() {
		seqs = append(seqs, r.Seq)
	}
	slices.Sort(seqs)
	for i, s := range seqs {
		if s != i+1 {
			t.Fatalf("sequence numbers %v", seqs)
		}
	}
	limited := 0
	for _, s := range statuses {
		if s == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited != 10 {
		t.Fatalf("%d rate-limited replies, want exactly 10", limited)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(toolRequest))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":null}]}`))
	f.Add([]byte(`{"model":"m","n":-1,"messages":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req ChatRequest
		if msg := decodeRequest(body, &req); msg != "" {
			return
		}
		if req.Model == "" || len(req.Messages) == 0 || req.Stream || req.NumChoices() < 1 {
			t.Fatalf("accepted an invalid request: %s", body)
		}
		// An accepted request always gets a well-formed reply.
		resp := buildResponse(req, Reply{Choices: []ReplyChoice{Text("x")}})
		if len(resp.Choices) != req.NumChoices() {
			t.Fatalf("%d choices for n=%d", len(resp.Choices), req.NumChoices())
		}
		if _, err := json.Marshal(resp); err != nil {
			t.Fatal(err)
		}
	})
}
