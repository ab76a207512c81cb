package fakevllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Options configure a Server, as vllm serve's flags and environment do.
type Options struct {
	// BaseModel is the served model name (--served-model-name).
	BaseModel string
	// AllowRuntimeLoRA is VLLM_ALLOW_RUNTIME_LORA_UPDATING=True: without
	// it the adapter routes do not exist.
	AllowRuntimeLoRA bool
	// MaxLoRARank is --max-lora-rank (vLLM's default is 16); an adapter of
	// a higher rank fails to load.
	MaxLoRARank int
	// Upstream is the OpenAI base URL (ending in /v1) of the server that
	// generates. When empty, Respond answers instead.
	Upstream string
	// Respond makes the completion of a request that names model, when
	// there is no Upstream. Nil answers "ok" as token 1 with log-prob 0.
	Respond func(model string, n int) Completion
	// UpstreamLoRA says Upstream implements the adapter routes (rlhost's
	// embedded server): loads and unloads that pass the fake's checks are
	// forwarded, and completions keep the adapter's name. Otherwise
	// completions reach Upstream under BaseModel.
	UpstreamLoRA bool
	// NoTokenIDs plays a vLLM older than return_token_ids: the request
	// field is ignored, so responses carry text and log-probs only.
	NoTokenIDs bool
	// RestartAfterLoad > 0 restarts the server (see Restart) right after
	// the RestartAfterLoad-th successful load, dropping RestartDrops
	// connections: a server that dies mid-run, at a point a test can name.
	RestartAfterLoad, RestartDrops int
	// Agent, when there is no Upstream, writes the replies instead of
	// Respond, and the fake adds token ids and log-probs (see Agent).
	Agent Agent
	// Throughput, when set, holds every answer for as long as a GPU
	// server would take to generate it (see Throughput).
	Throughput *Throughput
}

// Completion is what Respond generates: one choice, repeated n times.
type Completion struct {
	Text           string
	PromptTokenIDs []int
	TokenIDs       []int
	LogProbs       []float32
}

// Adapter is a loaded LoRA adapter.
type Adapter struct {
	Name, Path string
	Rank       int
}

// Server is a running fake. Use URL()+"/v1" as a client's base URL.
type Server struct {
	opts Options
	hs   *httptest.Server
	http *http.Client

	mu       sync.Mutex
	adapters map[string]Adapter
	loads    []string // names, in load order (successful loads only)
	unloads  []string
	models   []string // the model of each chat request, in order
	drops    int      // connections still to drop (a restart in progress)
	restarts int

	engine *engine      // the throughput model; instant without Options.Throughput
	cache  *prefixCache // prompts already prefilled (Throughput.PrefixCache)
}

// New starts a fake vLLM on loopback.
func New(opts Options) *Server {
	if opts.MaxLoRARank == 0 {
		opts.MaxLoRARank = 16
	}
	s := &Server{opts: opts, adapters: map[string]Adapter{}, http: &http.Client{Timeout: 10 * time.Minute}}
	var tp Throughput
	if opts.Throughput != nil {
		tp = *opts.Throughput
	}
	s.engine = newEngine(tp)
	if tp.PrefixCache {
		s.cache = newPrefixCache(prefixCacheEntries)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET "+StatsRoute, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) })
	if opts.AllowRuntimeLoRA {
		mux.HandleFunc("POST /v1/load_lora_adapter", s.load)
		mux.HandleFunc("POST /v1/unload_lora_adapter", s.unload)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
	s.hs = httptest.NewServer(s.dropping(mux))
	return s
}

// URL is the server's root (no /v1).
func (s *Server) URL() string { return s.hs.URL }

// Close stops the server; requests the throughput model holds are
// answered 503 at once.
func (s *Server) Close() {
	s.engine.close()
	s.hs.Close()
}

// StatsRoute is the fake's own route (not vLLM's) answering Stats as JSON,
// for a user in another process.
const StatsRoute = "/fake/stats"

// prefixCacheEntries is how many message boundaries a server's prefix
// cache remembers.
const prefixCacheEntries = 1 << 16

// Stats describes the requests served so far and how busy the server was.
func (s *Server) Stats() Stats { return s.engine.snapshot() }

// Restart plays a server process that dies and comes back: the next drops
// connections are closed without an answer, and the adapters loaded so
// far are forgotten, as a fresh vLLM process has none.
func (s *Server) Restart(drops int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops = drops
	s.adapters = map[string]Adapter{}
	s.restarts++
}

// Restarts counts the restarts so far.
func (s *Server) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Loads lists the adapter names loaded so far, in order.
func (s *Server) Loads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.loads)
}

// Unloads lists the adapter names unloaded so far, in order.
func (s *Server) Unloads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unloads)
}

// Loaded lists the adapters loaded now, by name.
func (s *Server) Loaded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.adapters {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Models lists the model field of every chat request served, in order.
func (s *Server) Models() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.models)
}

func (s *Server) dropping(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		drop := s.drops > 0
		if drop {
			s.drops--
		}
		s.mu.Unlock()
		if drop {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		h.ServeHTTP(w, r)
	})
}

// vLLM's ErrorResponse: {"error": {message, type, param, code}} with the
// HTTP status as an integer code.
func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": status}
	if param != "" {
		e["param"] = param
	}
	writeJSON(w, status, map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// jsonBody applies vLLM's validate_json_request and pydantic decoding:
// a non-JSON content type or a body that does not match is a 400.
func jsonBody(w http.ResponseWriter, r *http.Request, dst any) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/json" {
		writeError(w, http.StatusBadRequest, "Bad Request", "", "Unsupported Media Type: Only 'application/json' is allowed")
		return false
	}
	b, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(b, dst)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "Bad Request", "", fmt.Sprintf("1 validation error: %v", err))
		return false
	}
	return true
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data := []map[string]any{{"id": s.opts.BaseModel, "object": "model", "owned_by": "vllm", "root": s.opts.BaseModel, "parent": nil}}
	for _, n := range sortedKeys(s.adapters) {
		a := s.adapters[n]
		data = append(data, map[string]any{"id": a.Name, "object": "model", "owned_by": "vllm", "root": a.Path, "parent": s.opts.BaseModel})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func sortedKeys(m map[string]Adapter) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// loadRequest is LoadLoRAAdapterRequest: lora_name and lora_path are
// required strings; load_inplace replaces an adapter of the same name.
type loadRequest struct {
	Name        *string `json:"lora_name"`
	Path        *string `json:"lora_path"`
	LoadInplace bool    `json:"load_inplace"`
}

func (s *Server) load(w http.ResponseWriter, r *http.Request) {
	var req loadRequest
	if !jsonBody(w, r, &req) {
		return
	}
	if req.Name == nil || req.Path == nil {
		writeError(w, http.StatusBadRequest, "Bad Request", "", "validation error: lora_name and lora_path: Field required")
		return
	}
	name, path := *req.Name, *req.Path
	if name == "" || path == "" {
		writeError(w, http.StatusBadRequest, "InvalidUserInput", "", "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	s.mu.Lock()
	_, exists := s.adapters[name]
	s.mu.Unlock()
	if exists && !req.LoadInplace {
		writeError(w, http.StatusBadRequest, "InvalidUserInput", "",
			fmt.Sprintf("The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", name))
		return
	}
	rank, err := readAdapter(path)
	if err != nil {
		writeError(w, http.StatusNotFound, "NotFoundError", "", fmt.Sprintf("Loading lora %s failed: No adapter found for %s", name, path))
		return
	}
	if rank > s.opts.MaxLoRARank {
		writeError(w, http.StatusInternalServerError, "InternalServerError", "",
			fmt.Sprintf("LoRA rank %d is greater than max_lora_rank %d.", rank, s.opts.MaxLoRARank))
		return
	}
	if s.opts.UpstreamLoRA {
		// The upstream holds the weights; it may already have the name
		// from before a restart of the fake, so it loads in place.
		body, _ := json.Marshal(map[string]any{"lora_name": name, "lora_path": path, "load_inplace": true})
		if status, text, err := s.post("/load_lora_adapter", body); err != nil || status != http.StatusOK {
			writeError(w, http.StatusInternalServerError, "InternalServerError", "", fmt.Sprintf("engine failed to add LoRA %s: HTTP %d %s %v", name, status, text, err))
			return
		}
	}
	s.mu.Lock()
	s.adapters[name] = Adapter{Name: name, Path: path, Rank: rank}
	s.loads = append(s.loads, name)
	if len(s.loads) == s.opts.RestartAfterLoad {
		s.drops = s.opts.RestartDrops
		s.adapters = map[string]Adapter{}
		s.restarts++
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", name)
}

// readAdapter checks a PEFT directory as vLLM's loader does first: an
// adapter_config.json with the rank r and the weights beside it.
func readAdapter(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err != nil {
		return 0, err
	}
	var cfg struct {
		R *int `json:"r"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return 0, err
	}
	if cfg.R == nil || *cfg.R < 1 {
		return 0, fmt.Errorf("adapter_config.json has no rank r")
	}
	for _, name := range []string{"adapter_model.safetensors", "adapter_model.bin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return *cfg.R, nil
		}
	}
	return 0, fmt.Errorf("no adapter weights in %s", dir)
}

type unloadRequest struct {
	Name *string `json:"lora_name"`
}

func (s *Server) unload(w http.ResponseWriter, r *http.Request) {
	var req unloadRequest
	if !jsonBody(w, r, &req) {
		return
	}
	if req.Name == nil {
		writeError(w, http.StatusBadRequest, "Bad Request", "", "validation error: lora_name: Field required")
		return
	}
	name := *req.Name
	if name == "" {
		writeError(w, http.StatusBadRequest, "InvalidUserInput", "", "'lora_name' needs to be provided to unload a LoRA adapter.")
		return
	}
	s.mu.Lock()
	_, ok := s.adapters[name]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "NotFoundError", "", fmt.Sprintf("The lora adapter '%s' cannot be found.", name))
		return
	}
	if s.opts.UpstreamLoRA {
		body, _ := json.Marshal(map[string]any{"lora_name": name})
		if status, text, err := s.post("/unload_lora_adapter", body); err != nil || status != http.StatusOK {
			writeError(w, http.StatusInternalServerError, "InternalServerError", "", fmt.Sprintf("Failed to remove lora adapter '%s' from the engine: HTTP %d %s %v", name, status, text, err))
			return
		}
	}
	s.mu.Lock()
	delete(s.adapters, name)
	s.unloads = append(s.unloads, name)
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", name)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req map[string]json.RawMessage
	if !jsonBody(w, r, &req) {
		return
	}
	var model string
	_ = json.Unmarshal(req["model"], &model)
	s.mu.Lock()
	_, isAdapter := s.adapters[model]
	s.models = append(s.models, model)
	s.mu.Unlock()
	if model != "" && model != s.opts.BaseModel && !isAdapter {
		writeError(w, http.StatusNotFound, "NotFoundError", "model", fmt.Sprintf("The model `%s` does not exist.", model))
		return
	}
	if !s.opts.UpstreamLoRA || !isAdapter {
		req["model"], _ = json.Marshal(s.opts.BaseModel)
	}
	if s.opts.NoTokenIDs {
		delete(req, "return_token_ids")
	}
	body, _ := json.Marshal(req)
	var status int
	var text string
	var err error
	var wk *work
	switch {
	case s.opts.Upstream != "":
		status, text, err = s.post("/chat/completions", body)
	case s.opts.Agent != nil:
		status, text, wk = s.script(model, body)
	default:
		status, text = http.StatusOK, s.respond(model, req)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalServerError", "", err.Error())
		return
	}
	if status == http.StatusOK {
		// vLLM names the model the request named.
		var resp map[string]json.RawMessage
		if json.Unmarshal([]byte(text), &resp) == nil {
			if wk == nil {
				wk = workOf(resp)
			}
			resp["model"], _ = json.Marshal(model)
			if s.opts.NoTokenIDs {
				delete(resp, "prompt_token_ids")
				stripChoiceIDs(resp)
			}
			b, _ := json.Marshal(resp)
			text = string(b)
		}
		if wk != nil && !s.engine.run(*wk, r.Context().Done()) {
			// The client went away, or the server is closing.
			writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "", "the server is shutting down")
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, text)
}

// stripChoiceIDs removes token_ids from every choice.
func stripChoiceIDs(resp map[string]json.RawMessage) {
	var choices []map[string]json.RawMessage
	if json.Unmarshal(resp["choices"], &choices) != nil {
		return
	}
	for _, c := range choices {
		delete(c, "token_ids")
	}
	resp["choices"], _ = json.Marshal(choices)
}

func (s *Server) post(route string, body []byte) (int, string, error) {
	resp, err := s.http.Post(s.opts.Upstream+route, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// respond builds vLLM's chat.completion from Options.Respond.
func (s *Server) respond(model string, req map[string]json.RawMessage) string {
	n := 1
	_ = json.Unmarshal(req["n"], &n)
	var ids, logprobs bool
	_ = json.Unmarshal(req["return_token_ids"], &ids)
	_ = json.Unmarshal(req["logprobs"], &logprobs)
	c := Completion{Text: "ok", PromptTokenIDs: []int{1, 2, 3}, TokenIDs: []int{1}, LogProbs: []float32{0}}
	if s.opts.Respond != nil {
		c = s.opts.Respond(model, n)
	}
	var choices []map[string]any
	for i := range n {
		ch := map[string]any{"index": i, "finish_reason": "stop", "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": c.Text}}
		if ids {
			ch["token_ids"] = c.TokenIDs
		}
		if logprobs {
			var content []map[string]any
			for j, lp := range c.LogProbs {
				content = append(content, map[string]any{"token": fmt.Sprintf("token_id:%d", c.TokenIDs[j]), "logprob": lp, "bytes": nil, "top_logprobs": []any{}})
			}
			ch["logprobs"] = map[string]any{"content": content}
		}
		choices = append(choices, ch)
	}
	resp := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model, "choices": choices,
		"usage": map[string]int{"prompt_tokens": len(c.PromptTokenIDs), "completion_tokens": n * len(c.TokenIDs), "total_tokens": len(c.PromptTokenIDs) + n*len(c.TokenIDs)}}
	if ids {
		resp["prompt_token_ids"] = c.PromptTokenIDs
	}
	b, _ := json.Marshal(resp)
	return string(b)
}
