package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/core/schema"
)

// Provider "vllm" is provider "openai" for a vLLM server (or anything that
// speaks vLLM's runtime LoRA API, such as rlhost's embedded server): every
// request asks for the sampled token ids and their log-probs, and names the
// current LoRA adapter in "model" once one is loaded. The adapter routes
// are vLLM's (vllm/entrypoints/serve/lora): POST {base_url}/load_lora_adapter
// with {"lora_name", "lora_path"} and POST {base_url}/unload_lora_adapter
// with {"lora_name"}; a 200 answers with a plain-text "Success: ..." body,
// an error with {"error": {"message", "type", "param", "code"}}. vLLM only
// mounts them when started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True;
// otherwise they are FastAPI's bare 404 {"detail": "Not Found"}.

// Errors of the adapter API, matched with errors.Is.
var (
	// ErrRuntimeLoRADisabled: the server has no adapter routes.
	ErrRuntimeLoRADisabled = errors.New("the server does not allow runtime LoRA updates")
	// ErrAdapterRefused: the server answered a load with an error.
	ErrAdapterRefused = errors.New("the server refused the LoRA adapter")
	// ErrUnknownAdapter: the server does not know the adapter named.
	ErrUnknownAdapter = errors.New("the server does not know the LoRA adapter")
)

// Adapters is a policy whose servers hot-load LoRA adapters. Training
// with weights_sync = "lora" pushes each step's adapter through it.
type Adapters interface {
	Policy
	// CheckAdapterAPI confirms every server has the runtime adapter routes.
	CheckAdapterAPI(ctx context.Context) error
	// SwitchAdapter loads the PEFT directory path as adapter name into
	// every server, then makes the following requests name it; version
	// is the weights version it holds (the training steps applied), which
	// the choices it samples report. Requests already running keep the
	// adapter they named; each adapter switched away from is unloaded once
	// no request names it. A failed load leaves the previous adapter in
	// use. An error unloading a previous one is returned with the switch
	// done (errors.Is(err, ErrUnknownAdapter) when a server had forgotten
	// it).
	SwitchAdapter(ctx context.Context, name, path string, version int) error
	// Adapter is the adapter requests name now (the base model before any).
	Adapter() string
	// Reloads counts adapters loaded again because a server had
	// forgotten them (it restarted).
	Reloads() int
}

// VLLM is the "vllm" provider's policy.
type VLLM struct {
	*openAIPolicy
	base string // the servers' base model name (the block's model)

	mu      sync.Mutex
	current adapterRef            // name "" until the first SwitchAdapter
	known   map[string]adapterRef // every adapter loaded and not yet unloaded, by name
	inUse   map[string]int        // requests in flight naming each adapter
	reloads int
}

// adapterRef is one adapter: its name on the servers, its PEFT
// directory, and the weights version it holds.
type adapterRef struct {
	name, path string
	version    int
}

var _ Adapters = (*VLLM)(nil)

// NewVLLM builds a "vllm"-provider policy from cfg.
func NewVLLM(cfg Config, baseDir string) (*VLLM, error) {
	if cfg.BaseURL == nil && cfg.BaseURLs == nil {
		return nil, cfg.attrErr("base_url", "required for provider \"vllm\": the server's OpenAI base URL, for example http://127.0.0.1:8000/v1 (or base_urls for several servers)")
	}
	if cfg.ReturnTokenIDs != nil {
		return nil, cfg.attrErr("return_token_ids", "not used by provider \"vllm\": it always asks for token ids and log-probs")
	}
	oc := cfg
	yes := true
	oc.ReturnTokenIDs = &yes
	p, err := newOpenAI(oc, baseDir)
	if err != nil {
		if d := schema.FromError(err); len(d) == 1 && slices.Equal(d[0].Path, []string{"model"}) {
			return nil, cfg.attrErr("model", "required for provider \"vllm\": the base model's name as the server serves it (vllm serve --served-model-name, or the model path)")
		}
		return nil, err
	}
	op := p.(*openAIPolicy)
	v := &VLLM{openAIPolicy: op, base: op.model, known: map[string]adapterRef{}, inUse: map[string]int{}}
	op.notFound = v.reload
	op.fleet.rejoin = v.rejoin
	return v, nil
}

func newVLLM(cfg Config, baseDir string) (Policy, error) { return NewVLLM(cfg, baseDir) }

// Adapter is the adapter requests name, or the base model before any.
func (v *VLLM) Adapter() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.current.name == "" {
		return v.base
	}
	return v.current.name
}

// Reloads counts adapters loaded again after a server forgot them.
func (v *VLLM) Reloads() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reloads
}

// Complete is the openai provider's, naming the current adapter. Every
// attempt of the request names that same adapter, so a turn is sampled by
// one set of weights even when the adapter switches meanwhile. When a
// server says the adapter does not exist (it restarted and forgot it),
// the adapter is loaded there again from its directory and the request
// repeated.
func (v *VLLM) Complete(ctx context.Context, req Request) (Response, error) {
	ref := v.acquire()
	defer v.release(ref)
	if ref.name == "" {
		return v.complete(ctx, req, v.base, nil)
	}
	version := ref.version
	return v.complete(ctx, req, ref.name, &version)
}

// acquire counts a request naming the current adapter.
func (v *VLLM) acquire() adapterRef {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.inUse[v.current.name]++
	return v.current
}

// release ends a request's hold on ref; an adapter switched away from is
// unloaded with the last request that named it.
func (v *VLLM) release(ref adapterRef) {
	v.mu.Lock()
	v.inUse[ref.name]--
	retire := ref.name != "" && ref.name != v.current.name && v.inUse[ref.name] == 0
	if retire {
		delete(v.inUse, ref.name)
		delete(v.known, ref.name)
	}
	v.mu.Unlock()
	if retire {
		ctx, cancel := context.WithTimeout(context.Background(), v.timeout)
		defer cancel()
		if err := v.unloadEverywhere(ctx, ref.name); err != nil {
			v.fleet.log().Warn(fmt.Sprintf("%s: unloading adapter %q: %v", v.label, ref.name, err))
		}
	}
}

// reload loads model, an adapter s has forgotten, into s again.
func (v *VLLM) reload(ctx context.Context, s *server, model string) error {
	v.mu.Lock()
	ref, ok := v.known[model]
	v.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownAdapter, model)
	}
	if err := v.load(ctx, s, ref); err != nil {
		return err
	}
	v.mu.Lock()
	v.reloads++
	v.mu.Unlock()
	return nil
}

// rejoin loads the current adapter into a server coming back to the
// fleet, before it takes requests again.
func (v *VLLM) rejoin(ctx context.Context, s *server) error {
	v.mu.Lock()
	ref := v.current
	v.mu.Unlock()
	s.mu.Lock()
	s.adapters = map[string]bool{} // a restarted server has none
	s.mu.Unlock()
	if ref.name == "" {
		return nil
	}
	return v.load(ctx, s, ref)
}

// load loads ref into s, replacing an adapter of that name s has already.
func (v *VLLM) load(ctx context.Context, s *server, ref adapterRef) error {
	err := v.post(ctx, s, "load_lora_adapter", map[string]any{"lora_name": ref.name, "lora_path": ref.path})
	if errors.Is(err, errAlreadyLoaded) {
		// Left by an earlier process of a resumed run, or loaded before the
		// server was taken out: replace it.
		err = v.post(ctx, s, "load_lora_adapter", map[string]any{"lora_name": ref.name, "lora_path": ref.path, "load_inplace": true})
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.adapters[ref.name] = true
	s.mu.Unlock()
	return nil
}

// SwitchAdapter loads name from path into every server in the fleet, makes
// requests name it, and unloads the previous adapter once no request
// names it. A server that fails to take the adapter while others take it
// is taken out of the fleet (it loads the adapter when it rejoins).
func (v *VLLM) SwitchAdapter(ctx context.Context, name, path string, version int) error {
	if name == "" || path == "" {
		return fmt.Errorf("%s: an adapter needs a name and a path", v.label)
	}
	ref := adapterRef{name: name, path: path, version: version}
	var targets []*server
	for _, s := range v.fleet.servers {
		if !s.isOut() || len(v.fleet.servers) == 1 {
			targets = append(targets, s)
		}
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, s := range targets {
		wg.Go(func() { errs[i] = v.load(ctx, s, ref) })
	}
	wg.Wait()
	loaded := 0
	for _, err := range errs {
		if err == nil {
			loaded++
		}
	}
	if loaded == 0 {
		return errors.Join(errs...)
	}
	for i, err := range errs {
		if err != nil {
			v.fleet.takeOut(targets[i], fmt.Errorf("loading adapter %q: %w", name, err))
		}
	}
	v.mu.Lock()
	prev := v.current
	v.current = ref
	v.known[name] = ref
	retire := prev.name != "" && prev.name != name && v.inUse[prev.name] == 0
	if retire {
		delete(v.inUse, prev.name)
		delete(v.known, prev.name)
	}
	v.mu.Unlock()
	if !retire {
		return nil
	}
	if err := v.unloadEverywhere(ctx, prev.name); err != nil {
		return fmt.Errorf("adapter %q is in use, but unloading %q failed: %w", name, prev.name, err)
	}
	return nil
}

// modelNotFound reports vLLM's answer to a model (adapter) name it does
// not serve: a 404 about the model parameter ("The model `X` does not
// exist."), not any 404 (a wrong base_url is one too).
func modelNotFound(err error) bool {
	status, _, msg := apiFailure(err)
	if status != http.StatusNotFound {
		return false
	}
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) && apiErr.Param != nil && *apiErr.Param == "model" {
		return true
	}
	return strings.Contains(msg, "does not exist")
}

// unloadEverywhere unloads adapter name from every server in the fleet
// that has it. A server out of the fleet is skipped: it loads only the
// current adapter when it rejoins, and an adapter left in its cache costs
// a slot vLLM evicts when it needs one.
func (v *VLLM) unloadEverywhere(ctx context.Context, name string) error {
	var errs []error
	for _, s := range v.fleet.servers {
		s.mu.Lock()
		has := s.adapters[name]
		delete(s.adapters, name)
		out := s.out
		s.mu.Unlock()
		if !has || out {
			continue
		}
		if err := v.post(ctx, s, "unload_lora_adapter", map[string]any{"lora_name": name}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckAdapterAPI asks every server to unload an adapter name no one
// uses: a server with the routes answers 404 in the OpenAI error shape
// ("cannot be found"), one without them FastAPI's bare 404.
func (v *VLLM) CheckAdapterAPI(ctx context.Context) error {
	var errs []error
	for _, s := range v.fleet.servers {
		err := v.post(ctx, s, "unload_lora_adapter", map[string]any{"lora_name": "rlhost-probe-" + fmt.Sprint(time.Now().UnixNano())})
		if err != nil && !errors.Is(err, ErrUnknownAdapter) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// errAlreadyLoaded is vLLM's 400 for a name that is loaded already.
var errAlreadyLoaded = errors.New("already loaded")

// post sends one adapter request, retrying with the policy's backoff
// while no HTTP answer comes back (a restarting server). vLLM answers a
// load that fails inside the engine with a 500, which is not retried. Errors name the URL and what the server said.
func (v *VLLM) post(ctx context.Context, s *server, route string, body map[string]any) error {
	url := strings.TrimSuffix(s.url, "/") + "/" + route
	data, _ := json.Marshal(body)
	name, _ := body["lora_name"].(string)
	for attempt := 0; ; attempt++ {
		status, text, err := v.send(ctx, url, data)
		if err == nil {
			return adapterStatus(url, route, name, status, text)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("POST %s: %w (last error: %v)", url, ctx.Err(), err)
		}
		if attempt >= v.maxRetries {
			return fmt.Errorf("POST %s: giving up after %d attempts: %w", url, attempt+1, err)
		}
		wait := time.Duration(v.jitter(int64(backoffCeiling(attempt, v.backoffBase, v.backoffMax)) + 1))
		if serr := v.sleep(ctx, wait); serr != nil {
			return fmt.Errorf("POST %s: %w while backing off (last error: %v)", url, serr, err)
		}
	}
}

// send does one POST; err is set only when no HTTP answer came back.
func (v *VLLM) send(ctx context.Context, url string, data []byte) (int, string, error) {
	actx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if key := v.apiKey; key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := v.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(b), nil
}

// adapterStatus turns an adapter route's answer into an error.
func adapterStatus(url, route, name string, status int, body string) error {
	if status == http.StatusOK {
		return nil
	}
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
		// Older vLLM sends the error fields at the top level.
		Object  string `json:"object"`
		Message string `json:"message"`
		Detail  any    `json:"detail"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	msg := strings.TrimSpace(body)
	switch {
	case e.Error != nil:
		msg = e.Error.Message
	case e.Object == "error":
		msg = e.Message
	case status == http.StatusNotFound && e.Detail != nil:
		// FastAPI's own 404: the route is not mounted.
		return fmt.Errorf("POST %s: %w: HTTP 404 (start vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora; see docs/vllm.md)", url, ErrRuntimeLoRADisabled)
	}
	switch {
	case route == "unload_lora_adapter" && status == http.StatusNotFound:
		return fmt.Errorf("POST %s: %w %q: %s", url, ErrUnknownAdapter, name, msg)
	case route == "load_lora_adapter" && status == http.StatusBadRequest && strings.Contains(msg, "already been loaded"):
		return fmt.Errorf("POST %s: %w: %s", url, errAlreadyLoaded, msg)
	case route == "load_lora_adapter":
		return fmt.Errorf("POST %s: %w %q: HTTP %d: %s", url, ErrAdapterRefused, name, status, msg)
	}
	return fmt.Errorf("POST %s: HTTP %d: %s", url, status, msg)
}
