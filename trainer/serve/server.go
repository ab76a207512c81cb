package serve

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/generate"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// Options configure a Server.
type Options struct {
	// ModelName is the name clients must send as "model" and the one
	// /v1/models lists.
	ModelName string
	// MaxBatch is how many sequences (choices) generate at once: the KV
	// cache's slots. Default 16.
	MaxBatch int
	// MaxSeqLen bounds prompt plus completion per sequence; the KV cache
	// holds MaxBatch × MaxSeqLen positions up front. Default 2048, ceiling
	// the model's max_position_embeddings.
	MaxSeqLen int
	// DefaultMaxTokens is the completion budget of a request that sets
	// neither max_tokens nor max_completion_tokens; 0 means whatever room
	// MaxSeqLen leaves after the prompt.
	DefaultMaxTokens int
	// ReturnTokenIDs includes prompt_token_ids and token_ids in every
	// response, as if each request set return_token_ids, for clients
	// (such as go-openai) that cannot add the field to a request.
	ReturnTokenIDs bool
	// Logger receives the server's logs; nil discards them.
	Logger hclog.Logger
	// Adapters, when set, serves LoRA adapters through vLLM's runtime
	// adapter routes (see adapters.go); without it those routes are a 404,
	// as on a vLLM that does not allow runtime LoRA updating.
	Adapters AdapterHost
	// NoPrefixCache turns the prefix cache off: by default a finished
	// sequence's keys and values stay in its idle slot, and a request
	// whose prompt repeats cached tokens (the next turn of a conversation,
	// another request's prompt) computes only the rest. The logits are the
	// same either way, bit for bit on the CPU backend.
	NoPrefixCache bool
	// Deterministic makes a sequence's tokens independent of the other
	// requests on a device whose linear layers are not batch-invariant
	// (the CUDA backend's): each sequence then runs in a forward pass of
	// its own and the prefix cache is off, so a pass's shapes depend only
	// on that sequence. It costs the batching. A device with
	// compute.RowLinear (the CPU backend) is deterministic without it,
	// and it changes nothing there.
	Deterministic bool
}

// maxBody bounds a request body.
const maxBody = 32 << 20

// Server serves one model. Create it with New, serve it with Handler or
// Listen, and swap weights between training steps with Update.
type Server struct {
	opts   Options
	tok    *tokenizer.Tokenizer
	eng    *engine
	log    hclog.Logger
	maxLen int

	updateMu sync.Mutex
	adapters *adapterSet // nil without Options.Adapters

	mu      sync.Mutex
	servers []*http.Server
	closed  bool
	done    chan struct{} // closed by Close
}

// New starts the engine for m (which must not be used elsewhere except
// inside Update) and tok.
func New(m *model.Model, tok *tokenizer.Tokenizer, opts Options) (*Server, error) {
	if m == nil || tok == nil {
		return nil, fmt.Errorf("serve: a model and a tokenizer are required")
	}
	if opts.ModelName == "" {
		return nil, fmt.Errorf("serve: a model name is required")
	}
	if m.Cfg.VocabSize < tok.VocabSize() {
		return nil, fmt.Errorf("serve: model vocabulary %d is smaller than the tokenizer's %d", m.Cfg.VocabSize, tok.VocabSize())
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 16
	}
	ceiling := m.Cfg.MaxPositions
	if ceiling <= 0 {
		ceiling = math.MaxInt32
	}
	if opts.MaxSeqLen == 0 {
		opts.MaxSeqLen = min(2048, ceiling)
	}
	if opts.MaxBatch < 0 || opts.MaxSeqLen < 2 || opts.MaxSeqLen > ceiling || opts.DefaultMaxTokens < 0 {
		return nil, fmt.Errorf("serve: invalid options: max batch %d, max sequence length %d (model allows %d), default max tokens %d",
			opts.MaxBatch, opts.MaxSeqLen, ceiling, opts.DefaultMaxTokens)
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	// Scratch for a full-length prompt next to a decode row per slot, so
	// a long prompt never waits for the batch to drain.
	cache, err := m.NewPackedCache(opts.MaxBatch, opts.MaxSeqLen, opts.MaxSeqLen+opts.MaxBatch)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	stop := map[int]bool{}
	for _, id := range m.Cfg.EOSTokenIDs {
		stop[id] = true
	}
	for _, name := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := tok.TokenID(name); ok {
			stop[id] = true
		}
	}
	if id := tok.EOS(); id >= 0 {
		stop[id] = true
	}
	s := &Server{opts: opts, tok: tok, log: opts.Logger, maxLen: opts.MaxSeqLen, done: make(chan struct{}),
		eng: newEngine(m, tok, cache, stop, opts.NoPrefixCache, opts.Logger)}
	if _, invariant := m.Device().(compute.RowLinear); opts.Deterministic && !invariant {
		s.eng.alone, s.eng.noPrefix = true, true
	}
	if opts.Adapters != nil {
		s.adapters = newAdapterSet(opts.Adapters)
	}
	go s.eng.run()
	return s, nil
}

// WeightsVersion counts completed Updates; a response's
// system_fingerprint names the version it was generated with.
func (s *Server) WeightsVersion() uint64 { return s.eng.version.Load() }

// Running is the number of sequences holding a cache slot now.
func (s *Server) Running() int { return int(s.eng.running.Load()) }

// Stats counts tokens since the server started.
type Stats struct {
	// Generated is the completion tokens sampled.
	Generated int64
	// PromptTokens is the prompt tokens of the requests admitted;
	// CachedTokens is how many of them the prefix cache supplied, so
	// PromptTokens − CachedTokens were computed.
	PromptTokens, CachedTokens int64
}

// Stats returns the token counts so far.
func (s *Server) Stats() Stats {
	st := &s.eng.stats
	return Stats{Generated: st.generated.Load(), PromptTokens: st.prompt.Load(), CachedTokens: st.cached.Load()}
}

// Update waits until no generation is in flight (requests arriving
// meanwhile queue), runs fn, which may change the model's weights on its
// backend, bumps the weights version, empties the prefix cache and
// resumes generation. No request sees weights fn is still changing, nor
// keys and values computed with the weights before. It returns fn's error, or ctx's when
// ctx ends before the engine goes idle (fn has not run then).
func (s *Server) Update(ctx context.Context, fn func() error) error {
	return s.UpdateVersion(ctx, func(v uint64) (uint64, error) { return v + 1, fn() })
}

// UpdateVersion is Update where fn, given the current weights version,
// also returns the version that follows it: a trainer numbers its weights
// by the updates it applied, and leaves the number as it is when fn only
// reads the weights (a checkpoint) or skips its update.
func (s *Server) UpdateVersion(ctx context.Context, fn func(current uint64) (uint64, error)) error {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	e := s.eng
	p := &pauseReq{idle: make(chan struct{}), resume: make(chan struct{})}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errClosed
	}
	e.pause = p
	e.mu.Unlock()
	e.wake()
	defer func() {
		e.mu.Lock()
		if e.pause == p {
			e.pause = nil
		}
		e.mu.Unlock()
		close(p.resume)
		e.wake()
	}()
	select {
	case <-p.idle:
	case <-e.done:
		return errClosed
	case <-ctx.Done():
		return fmt.Errorf("serve: update: waiting for generation to finish: %w", ctx.Err())
	}
	v, err := fn(e.version.Load())
	e.version.Store(v)
	return err
}

// Handler serves /v1/chat/completions, /v1/models and /health.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("/v1/models", s.models)
	if s.adapters != nil {
		mux.HandleFunc("POST /v1/load_lora_adapter", s.loadAdapter)
		mux.HandleFunc("POST /v1/unload_lora_adapter", s.unloadAdapter)
	} else {
		// As vLLM without runtime LoRA updating: FastAPI's bare 404, which
		// clients tell apart from "no such adapter".
		for _, route := range []string{"/v1/load_lora_adapter", "/v1/unload_lora_adapter"} {
			mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"detail":"Not Found"}`)
			})
		}
	}
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", "", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// Listen serves Handler on addr, which must be a loopback address
// ("127.0.0.1:0" picks a port), until ctx ends or Close. It returns the
// base URL for OpenAI clients, ending in /v1.
func (s *Server) Listen(ctx context.Context, addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("serve: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("serve: listen address %q is not loopback", addr)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("serve: listen: %w", err)
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return "", errClosed
	}
	s.servers = append(s.servers, hs)
	s.mu.Unlock()
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", "error", err)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			hs.Close()
		case <-s.done:
		}
	}()
	return "http://" + ln.Addr().String() + "/v1", nil
}

// Close stops the listeners and the engine; queued and running requests
// fail.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	servers := s.servers
	s.mu.Unlock()
	var errs []error
	for _, hs := range servers {
		if err := hs.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.eng.close()
	return errors.Join(errs...)
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "", "use GET")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"object": "list",
		"data": append([]map[string]any{{
			"id": s.opts.ModelName, "object": "model", "created": 0, "owned_by": "rlhost",
			"max_model_len": s.maxLen,
		}}, s.adapterCards()...),
	})
}

// params is a validated request.
type params struct {
	job      *job
	tools    bool // parse <tool_call> blocks
	logprobs bool
	ids      bool
	stream   bool
	usage    bool // stream_options.include_usage
	prompt   []int
	adapter  string // the LoRA adapter the request names; "" for the base model
}

func (s *Server) parse(w http.ResponseWriter, r *http.Request) (*params, bool) {
	p, rerr := s.parseRequest(w, r)
	if rerr != nil {
		rerr.write(w)
		return nil, false
	}
	return p, true
}

// requestError is a request the server refuses: the HTTP status and the
// fields of the OpenAI error object it answers with.
type requestError struct {
	status           int
	code, param, msg string
}

// invalid is a 400 for the request field param.
func invalid(param, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

func (e *requestError) write(w http.ResponseWriter) {
	writeError(w, e.status, "invalid_request_error", e.code, e.param, e.msg)
}

// parseRequest turns a chat completion request into a job, checking it in
// the order a reader would: the body, the model, the conversation, the
// sampling settings, then the prompt against the context length.
func (s *Server) parseRequest(w http.ResponseWriter, r *http.Request) (*params, *requestError) {
	req, rerr := readRequest(w, r)
	if rerr != nil {
		return nil, rerr
	}
	adapter, rerr := s.adapterFor(req.Model)
	if rerr != nil {
		return nil, rerr
	}
	msgs, tools, rerr := conversation(req)
	if rerr != nil {
		return nil, rerr
	}
	stops, err := stopStrings(req.Stop)
	if err != nil {
		return nil, invalid("stop", "%v", err)
	}
	p := &params{adapter: adapter, tools: len(tools) > 0, stream: req.Stream, ids: req.ReturnTokenIDs || s.opts.ReturnTokenIDs,
		usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	j := newJob(r.Context())
	j.stops = stops
	if rerr := s.sampling(req, p, j); rerr != nil {
		return nil, rerr
	}
	if rerr := s.prompt(req, msgs, tools, p, j); rerr != nil {
		return nil, rerr
	}
	p.job = j
	return p, nil
}

// readRequest reads and decodes a POSTed chat completion request.
func readRequest(w http.ResponseWriter, r *http.Request) (*chatRequest, *requestError) {
	if r.Method != http.MethodPost {
		return nil, &requestError{status: http.StatusMethodNotAllowed, msg: "use POST"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return nil, invalid("", "reading the request body: %v", err)
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, invalid("", "request body is not valid JSON for a chat completion: %v", err)
	}
	return &req, nil
}

// adapterFor is the LoRA adapter a request's model names, "" for the
// served model. A request without a model gets the served model, as on
// vLLM.
func (s *Server) adapterFor(model string) (string, *requestError) {
	if model == "" || model == s.opts.ModelName {
		return "", nil
	}
	if !s.adapters.has(model) {
		return "", &requestError{status: http.StatusNotFound, code: "model_not_found", param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist. This server serves %q.", model, s.opts.ModelName)}
	}
	return model, nil
}

// conversation checks the messages and tools, returning the tools the
// model is shown (none under tool_choice "none").
func conversation(req *chatRequest) ([]core.Message, []core.ToolSpec, *requestError) {
	if len(req.Messages) == 0 {
		return nil, nil, invalid("messages", "messages: at least one message is required")
	}
	msgs := make([]core.Message, len(req.Messages))
	for i, m := range req.Messages {
		var err error
		if msgs[i], err = m.toCore(i); err != nil {
			return nil, nil, invalid("messages", "%v", err)
		}
	}
	choice, err := toolChoice(req.ToolChoice)
	if err != nil {
		return nil, nil, invalid("tool_choice", "%v", err)
	}
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, nil, invalid("tools", "tools[%d]: want {\"type\": \"function\", \"function\": {\"name\": ...}}", i)
		}
	}
	if choice == "none" {
		return msgs, nil, nil
	}
	return msgs, req.Tools, nil
}

// sampling checks n, the sampling settings and log-probs, setting them on
// the job.
func (s *Server) sampling(req *chatRequest, p *params, j *job) *requestError {
	j.n, j.topN = 1, -1
	if req.N != nil {
		j.n = *req.N
	}
	if j.n < 1 || j.n > s.opts.MaxBatch {
		return invalid("n", "n=%d: must be between 1 and %d (the server's batch)", j.n, s.opts.MaxBatch)
	}
	o := generate.Options{Temperature: 1, TopP: 1}
	if t := req.Temperature; t != nil {
		if *t < 0 || *t > 100 || math.IsNaN(*t) {
			return invalid("temperature", "temperature=%g: must be between 0 and 100", *t)
		}
		o.Temperature = *t
	}
	if t := req.TopP; t != nil {
		if !(*t > 0 && *t <= 1) {
			return invalid("top_p", "top_p=%g: must be in (0, 1]", *t)
		}
		o.TopP = *t
	}
	if k := req.TopK; k != nil {
		if *k < -1 {
			return invalid("top_k", "top_k=%d: must be -1 or 0 (off) or positive", *k)
		}
		o.TopK = max(*k, 0)
	}
	if req.Seed != nil {
		o.Seed = uint64(*req.Seed)
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Seed = binary.LittleEndian.Uint64(b[:])
	}
	switch {
	case req.Logprobs != nil && *req.Logprobs:
		p.logprobs, j.topN = true, 0
		if req.TopLogprobs != nil {
			if *req.TopLogprobs < 0 || *req.TopLogprobs > 20 {
				return invalid("top_logprobs", "top_logprobs=%d: must be between 0 and 20", *req.TopLogprobs)
			}
			j.topN = *req.TopLogprobs
		}
	case req.TopLogprobs != nil && *req.TopLogprobs > 0:
		return invalid("top_logprobs", "top_logprobs needs logprobs=true")
	}
	j.opts = o
	return nil
}

// prompt renders and tokenizes the conversation and sets the completion's
// token budget, refusing a request that does not fit the context.
func (s *Server) prompt(req *chatRequest, msgs []core.Message, tools []core.ToolSpec, p *params, j *job) *requestError {
	// The prompt is the rendered text tokenized as a whole, as vLLM does:
	// a conversation whose turns share a token at a boundary (content a
	// model wrote starting with a blank line) is still served.
	text, err := chat.Render(msgs, tools, true)
	if err != nil {
		return invalid("messages", "rendering the chat template: %v", err)
	}
	ids := s.tok.Encode(text)
	p.prompt = ids
	maxTokens, maxField := req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		maxTokens, maxField = req.MaxCompletionTokens, "max_completion_tokens"
	}
	room := s.maxLen - len(ids)
	switch {
	case maxTokens != nil && *maxTokens < 1:
		return invalid(maxField, "%s=%d: must be at least 1", maxField, *maxTokens)
	case maxTokens != nil:
		j.maxTokens = *maxTokens
	case s.opts.DefaultMaxTokens > 0:
		j.maxTokens = min(s.opts.DefaultMaxTokens, max(room, 1))
	default:
		j.maxTokens = max(room, 1)
	}
	if len(ids)+j.maxTokens > s.maxLen {
		return &requestError{status: http.StatusBadRequest, code: "context_length_exceeded", param: "messages",
			msg: fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				s.maxLen, len(ids)+j.maxTokens, len(ids), j.maxTokens)}
	}
	j.opts.MaxTokens = j.maxTokens
	j.prompt = make([]int32, len(ids))
	for i, id := range ids {
		j.prompt[i] = int32(id)
	}
	return nil
}

// choiceState accumulates one choice's events.
type choiceState struct {
	ids    []int
	logp   []tokenLogprobJSON
	text   strings.Builder
	finish string
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parse(w, r)
	if !ok {
		return
	}
	j := p.job
	release, err := s.acquire(r.Context(), p.adapter)
	if err != nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
			fmt.Sprintf("The model `%s` does not exist: %v", p.adapter, err))
		return
	}
	defer release()
	if err := s.eng.submit(j); err != nil {
		writeError(w, http.StatusServiceUnavailable, "server_error", "", "", err.Error())
		return
	}
	id := "chatcmpl-" + randomID()
	created := time.Now().Unix()
	if p.stream {
		s.stream(w, r, p, id, created)
		return
	}
	choices := make([]choiceState, j.n)
	for {
		select {
		case <-j.notify:
		case <-r.Context().Done():
			return // the engine sees the context and frees the slots
		}
		evs, end, err := j.take()
		for _, ev := range evs {
			s.apply(&choices[ev.choice], ev, p)
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "server_error", "", "", err.Error())
			return
		}
		if end {
			break
		}
	}
	resp := chatResponse{ID: id, Object: "chat.completion", Created: created, Model: p.modelName(s.opts.ModelName),
		SystemFingerprint: fmt.Sprintf("rlhost-weights-%d", j.weights())}
	completion := 0
	for c := range choices {
		cs := &choices[c]
		completion += len(cs.ids)
		msg, finish := s.message(cs, p, nil)
		cj := choiceJSON{Index: c, Message: msg, FinishReason: &finish}
		if p.logprobs {
			cj.Logprobs = &logprobsJSON{Content: cs.logp}
		}
		if p.ids {
			cj.TokenIDs = nonNil(cs.ids)
		}
		resp.Choices = append(resp.Choices, cj)
	}
	resp.Usage = &usageJSON{PromptTokens: len(p.prompt), CompletionTokens: completion, TotalTokens: len(p.prompt) + completion}
	if p.ids {
		resp.PromptTokenIDs = p.prompt
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func nonNil(ids []int) []int {
	if ids == nil {
		return []int{}
	}
	return ids
}

// apply adds one event to a choice and returns its logprobs entry.
func (s *Server) apply(cs *choiceState, ev event, p *params) *tokenLogprobJSON {
	cs.ids = append(cs.ids, ev.token)
	cs.text.WriteString(ev.text)
	if ev.finish != "" {
		cs.finish = ev.finish
	}
	if !p.logprobs {
		return nil
	}
	e := s.tokenLogprob(ev.token, ev.logprob)
	e.TopLogprobs = []topLogprobJSON{}
	for _, t := range ev.top {
		te := s.tokenLogprob(t.ID, t.LogProb)
		e.TopLogprobs = append(e.TopLogprobs, topLogprobJSON{Token: te.Token, Logprob: te.Logprob, Bytes: te.Bytes})
	}
	cs.logp = append(cs.logp, e)
	return &cs.logp[len(cs.logp)-1]
}

func (s *Server) tokenLogprob(id int, lp float32) tokenLogprobJSON {
	b := s.eng.tokText[id]
	bs := make([]int, len(b))
	for i, c := range b {
		bs[i] = int(c)
	}
	return tokenLogprobJSON{Token: string(b), Logprob: lp, Bytes: bs}
}

// message builds a finished choice's message: with tools on, <tool_call>
// blocks become tool_calls and the finish reason "tool_calls". index, when
// set, marks streamed tool-call deltas.
func (s *Server) message(cs *choiceState, p *params, index *int) (*messageJSON, string) {
	text, finish := cs.text.String(), cs.finish
	msg := &messageJSON{Role: "assistant"}
	if p.tools {
		content, calls, problems := chat.ParseToolCalls(text)
		if len(calls) > 0 {
			for _, pr := range problems {
				s.log.Debug("malformed tool call in model output", "problem", pr)
			}
			text, finish = content, "tool_calls"
			prefix := randomID()[:8]
			for i, c := range calls {
				tc := toolCallJSON{ID: fmt.Sprintf("call_%s_%d", prefix, i), Type: "function", Function: c.Function}
				if index != nil {
					tc.Index = &i
				}
				msg.ToolCalls = append(msg.ToolCalls, tc)
			}
		}
	}
	if text != "" || len(msg.ToolCalls) == 0 {
		msg.Content = &text
	}
	return msg, finish
}

// stream writes Server-Sent Events: a role delta per choice, a delta per
// token (content held back while it could still become a stop string, and
// until the end when tools are on, since a <tool_call> block is parsed
// whole), a final delta with the finish reason, the usage chunk when asked,
// and [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, p *params, id string, created int64) {
	j := p.job
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	base := chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: p.modelName(s.opts.ModelName)}
	send := func(v any) bool {
		data, err := json.Marshal(v)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	chunk := func(c choiceJSON) chatResponse {
		ch := base
		ch.Choices = []choiceJSON{c}
		return ch
	}
	empty := ""
	choices := make([]choiceState, j.n)
	for started := false; ; {
		select {
		case <-j.notify:
		case <-r.Context().Done():
			return
		}
		evs, end, err := j.take()
		if !started {
			// The role deltas go out once the job runs, naming the
			// weights version it runs with.
			started = true
			base.SystemFingerprint = fmt.Sprintf("rlhost-weights-%d", j.weights())
			for c := range j.n {
				if !send(chunk(choiceJSON{Index: c, Delta: &messageJSON{Role: "assistant", Content: &empty}})) {
					return
				}
			}
		}
		for _, ev := range evs {
			cs := &choices[ev.choice]
			lp := s.apply(cs, ev, p)
			c := choiceJSON{Index: ev.choice, Delta: &messageJSON{}}
			if !p.tools && ev.text != "" {
				t := ev.text
				c.Delta.Content = &t
			}
			if lp != nil {
				c.Logprobs = &logprobsJSON{Content: []tokenLogprobJSON{*lp}}
			}
			if p.ids {
				c.TokenIDs = []int{ev.token}
			}
			if ev.finish != "" {
				if p.tools {
					msg, finish := s.message(cs, p, new(int))
					msg.Role = ""
					c.Delta, cs.finish = msg, finish
				}
				f := cs.finish
				c.FinishReason = &f
			}
			if !send(chunk(c)) {
				return
			}
		}
		if err != nil {
			send(map[string]apiError{"error": {Message: err.Error(), Type: "server_error"}})
			return
		}
		if end {
			break
		}
	}
	if p.usage {
		completion := 0
		for _, cs := range choices {
			completion += len(cs.ids)
		}
		u := base
		u.Choices = []choiceJSON{}
		u.Usage = &usageJSON{PromptTokens: len(p.prompt), CompletionTokens: completion, TotalTokens: len(p.prompt) + completion}
		if p.ids {
			u.PromptTokenIDs = p.prompt
		}
		if !send(u) {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}
