package fakeopenai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/rlhost/rlhost/core"
)

// Agent decides the reply to one request. It may be called concurrently.
type Agent func(req ChatRequest) Reply

// Reply is what the server sends back. With Status 0 or 200 it is a
// chat.completion built from Choices; with any other status it is an error in
// OpenAI's {"error":{...}} shape built from the Error fields, or RawBody
// verbatim when set (for vendor-specific shapes such as older vLLM).
type Reply struct {
	Choices []ReplyChoice
	// By default a single choice is repeated to fill the n the client asked
	// for, as a sampling server would; IgnoreN sends Choices exactly as given,
	// to play a server that ignores n.
	IgnoreN bool
	// Usage overrides the rough byte-count estimate.
	Usage *core.Usage

	Status       int
	ErrorType    string // defaults by status, as OpenAI sets it
	ErrorCode    string // e.g. "context_length_exceeded"; null on the wire when empty
	ErrorMessage string
	RetryAfter   string // Retry-After header value, sent with any status
	RawBody      string // replaces the generated error body

	// Hang sends nothing: the request stays open until the client gives up
	// (its timeout or cancellation) or the server is closed.
	Hang bool
}

// ReplyChoice is one assistant completion.
type ReplyChoice struct {
	Content   string
	ToolCalls []core.ToolCall // an empty ID is filled in by the server
	// FinishReason defaults to "tool_calls" when there are tool calls and
	// "stop" otherwise.
	FinishReason string
}

// Server is a running fake. Close it when done.
type Server struct {
	// URL is the base URL to give a client, ending in /v1.
	URL string

	srv   *httptest.Server
	agent Agent
	done  chan struct{} // closed by Close, releases hanging requests

	mu         sync.Mutex
	log        []ChatRequest
	models     []string // GET /v1/models lists these
	modelsKey  string   // when set, GET /v1/models wants it as the bearer token
	modelsGets int
}

// New starts a server that answers every chat completion with agent.
func New(agent Agent) *Server {
	s := &Server{agent: agent, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, Reply{Status: http.StatusNotFound, ErrorCode: "unknown_url",
			ErrorMessage: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
	})
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL + "/v1"
	return s
}

// Close shuts the server down, waiting for in-flight requests.
func (s *Server) Close() {
	close(s.done)
	s.srv.Close()
}

// SetModels sets the model ids GET /v1/models lists (none by default).
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = slices.Clone(ids)
}

// RequireModelsKey makes GET /v1/models answer 401 invalid_api_key, as
// OpenAI does, unless the client sends key as its bearer token.
func (s *Server) RequireModelsKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.modelsKey = key
}

// ModelsRequests is how many GET /v1/models requests arrived.
func (s *Server) ModelsRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.modelsGets
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.modelsGets++
	ids, key := slices.Clone(s.models), s.modelsKey
	s.mu.Unlock()
	if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
		writeError(w, Reply{Status: http.StatusUnauthorized, ErrorCode: "invalid_api_key", ErrorMessage: "Incorrect API key provided."})
		return
	}
	list := wireModelList{Object: "list", Data: []wireModel{}}
	for _, id := range ids {
		list.Data = append(list.Data, wireModel{ID: id, Object: "model", OwnedBy: "fakeopenai"})
	}
	writeJSON(w, http.StatusOK, list)
}

// Requests is how many chat completion requests arrived, valid or not.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

// Log returns every request received so far, in arrival order.
func (s *Server) Log() []ChatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func (s *Server) record(req ChatRequest) ChatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Seq = len(s.log) + 1
	s.log = append(s.log, req)
	return req
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := s.record(ChatRequest{Header: r.Header.Clone(), Body: body})
	if r.Method != http.MethodPost {
		writeError(w, Reply{Status: http.StatusMethodNotAllowed,
			ErrorMessage: fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path)})
		return
	}
	if err != nil {
		writeError(w, Reply{Status: http.StatusBadRequest, ErrorMessage: "could not read the request body"})
		return
	}
	if msg := decodeRequest(body, &req); msg != "" {
		s.update(req)
		writeError(w, Reply{Status: http.StatusBadRequest, ErrorMessage: msg})
		return
	}
	s.update(req)
	rep := s.agent(req)
	if rep.Hang {
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	}
	if rep.RetryAfter != "" {
		w.Header().Set("Retry-After", rep.RetryAfter)
	}
	if rep.Status != 0 && rep.Status != http.StatusOK {
		writeError(w, rep)
		return
	}
	writeJSON(w, http.StatusOK, buildResponse(req, rep))
}

// update stores the decoded form of a logged request.
func (s *Server) update(req ChatRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log[req.Seq-1] = req
}

// maxN is OpenAI's limit on n; it also keeps a fuzzed n from allocating
// without bound.
const maxN = 128

// decodeRequest fills req from body and returns an OpenAI-style complaint,
// or "" when the request is acceptable. Unknown fields are refused, as the
// real API does, so a client cannot send something the fake silently drops.
func decodeRequest(body []byte, req *ChatRequest) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return fmt.Sprintf("We could not parse the JSON body of your request: %v", err)
	}
	switch {
	case req.Model == "":
		return "you must provide a model parameter"
	case len(req.Messages) == 0:
		return "'messages' must contain at least one message"
	case req.Stream:
		return "fakeopenai: streaming is not implemented"
	case req.N != nil && *req.N < 1:
		return fmt.Sprintf("%d is less than the minimum of 1 - 'n'", *req.N)
	case req.N != nil && *req.N > maxN:
		return fmt.Sprintf("%d is greater than the maximum of %d - 'n'", *req.N, maxN)
	}
	// OpenAI requires "content" on every message but an assistant message
	// that carries tool calls; the typed decode cannot tell absent from "".
	var present struct {
		Messages []map[string]json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &present); err != nil {
		return fmt.Sprintf("We could not parse the JSON body of your request: %v", err)
	}
	for i, m := range req.Messages {
		if _, ok := present.Messages[i]["content"]; !ok && (m.Role != core.RoleAssistant || len(m.ToolCalls) == 0) {
			return fmt.Sprintf("Missing required parameter: 'messages[%d].content'.", i)
		}
		switch m.Role {
		case core.RoleSystem, core.RoleUser, core.RoleAssistant:
		case core.RoleTool:
			if m.ToolCallID == "" {
				return fmt.Sprintf("Missing parameter 'tool_call_id': messages[%d] with role 'tool' must have a 'tool_call_id'.", i)
			}
		default:
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', and 'tool'. (messages[%d].role)", m.Role, i)
		}
	}
	for i, t := range req.Tools {
		if string(t.Function.Parameters) == "null" {
			req.Tools[i].Function.Parameters = nil
		}
	}
	return ""
}

func buildResponse(req ChatRequest, rep Reply) wireResponse {
	choices := rep.Choices
	if n := req.NumChoices(); len(choices) == 1 && n > 1 && !rep.IgnoreN {
		choices = slices.Repeat(choices, n)
	}
	resp := wireResponse{
		ID:                fmt.Sprintf("chatcmpl-fake%d", req.Seq),
		Object:            "chat.completion",
		Created:           time.Now().Unix(),
		Model:             req.Model,
		Choices:           make([]wireChoice, len(choices)),
		SystemFingerprint: "fp_fakeopenai",
	}
	completion := 0
	for i, c := range choices {
		msg := wireMessage{Role: "assistant"}
		if c.Content != "" || len(c.ToolCalls) == 0 {
			content := c.Content
			msg.Content = &content
		}
		for k, tc := range c.ToolCalls {
			if tc.ID == "" {
				tc.ID = fmt.Sprintf("call_fake%d_%d_%d", req.Seq, i, k)
			}
			if tc.Type == "" {
				tc.Type = "function"
			}
			msg.ToolCalls = append(msg.ToolCalls, tc)
			completion += estimateTokens(tc.Function.Name + tc.Function.Arguments)
		}
		completion += estimateTokens(c.Content)
		finish := c.FinishReason
		if finish == "" {
			finish = "stop"
			if len(c.ToolCalls) > 0 {
				finish = "tool_calls"
			}
		}
		resp.Choices[i] = wireChoice{Index: i, Message: msg, Logprobs: json.RawMessage("null"), FinishReason: finish}
	}
	if rep.Usage != nil {
		resp.Usage = *rep.Usage
	} else {
		resp.Usage = core.Usage{PromptTokens: promptTokens(req), CompletionTokens: completion}
		resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	}
	return resp
}

// estimateTokens counts roughly four bytes per token, at least one, so
// usage is never zero.
func estimateTokens(s string) int {
	return max(1, len(s)/4)
}

func promptTokens(req ChatRequest) int {
	n := 0
	for _, m := range req.Messages {
		n += 4 + estimateTokens(m.Content) // 4: OpenAI's per-message framing
		for _, tc := range m.ToolCalls {
			n += estimateTokens(tc.Function.Name + tc.Function.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += estimateTokens(t.Function.Name + t.Function.Description + string(t.Function.Parameters))
	}
	return n
}

// errorType is the "type" value OpenAI uses for a status.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	default:
		return "server_error"
	}
}

func writeError(w http.ResponseWriter, rep Reply) {
	if rep.RawBody != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		io.WriteString(w, rep.RawBody)
		return
	}
	typ := rep.ErrorType
	if typ == "" {
		typ = errorType(rep.Status)
	}
	msg := rep.ErrorMessage
	if msg == "" {
		msg = http.StatusText(rep.Status)
	}
	body := wireError{Error: wireErrorBody{Message: msg, Type: typ}}
	if rep.ErrorCode != "" {
		code := rep.ErrorCode
		body.Error.Code = &code
	}
	writeJSON(w, rep.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// Only a broken agent reply (e.g. invalid RawMessage) gets here.
		status = http.StatusInternalServerError
		data = fmt.Appendf(nil, `{"error":{"message":%q,"type":"server_error","param":null,"code":null}}`, "fakeopenai: "+err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(data)
}
