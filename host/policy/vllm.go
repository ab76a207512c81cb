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

// Adapters is a policy whose server hot-loads LoRA adapters. Training with
// weights_sync = "lora" pushes each step's adapter through it.
type Adapters interface {
	Policy
	// CheckAdapterAPI confirms the server has the runtime adapter routes.
	CheckAdapterAPI(ctx context.Context) error
	// SwitchAdapter loads the PEFT directory path as adapter name, makes
	// the following requests name it, and unloads the adapter used
	// before. A failed load leaves the previous adapter in use. An error
	// unloading the previous one is returned with the switch done
	// (errors.Is(err, ErrUnknownAdapter) when the server had forgotten it).
	SwitchAdapter(ctx context.Context, name, path string) error
	// Adapter is the adapter requests name now ("" for the base model).
	Adapter() string
	// Reloads counts adapters loaded again because the server had
	// forgotten them (it restarted).
	Reloads() int
}

// VLLM is the "vllm" provider's policy.
type VLLM struct {
	*openAIPolicy
	base string // the server's base model name (the block's model)

	mu      sync.Mutex
	adapter string // "" until the first SwitchAdapter
	path    string
	gen     int // bumped by every load, so concurrent reloads run once
	reloads int
}

var _ Adapters = (*VLLM)(nil)

// NewVLLM builds a "vllm"-provider policy from cfg.
func NewVLLM(cfg Config, baseDir string) (*VLLM, error) {
	if cfg.BaseURL == nil {
		return nil, cfg.attrErr("base_url", "required for provider \"vllm\": the server's OpenAI base URL, for example http://127.0.0.1:8000/v1")
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
	v := &VLLM{openAIPolicy: op, base: op.model}
	op.requestModel = v.Adapter
	return v, nil
}

func newVLLM(cfg Config, baseDir string) (Policy, error) { return NewVLLM(cfg, baseDir) }

// Adapter is the adapter requests name, or the base model before any.
func (v *VLLM) Adapter() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.adapter == "" {
		return v.base
	}
	return v.adapter
}

// Reloads counts adapters loaded again after the server forgot them.
func (v *VLLM) Reloads() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reloads
}

// Complete is the openai provider's, plus one recovery: when the server
// says the current adapter does not exist (it restarted and forgot it),
// the adapter is loaded again from its directory and the request repeated.
func (v *VLLM) Complete(ctx context.Context, req Request) (Response, error) {
	v.mu.Lock()
	gen, name := v.gen, v.adapter
	v.mu.Unlock()
	resp, err := v.openAIPolicy.Complete(ctx, req)
	if err == nil || name == "" || !modelNotFound(err) {
		return resp, err
	}
	if rerr := v.reload(ctx, gen); rerr != nil {
		return Response{}, fmt.Errorf("%s: the server at %s no longer knows LoRA adapter %q (did it restart?), and loading it again failed: %w",
			v.label, v.baseURL, name, rerr)
	}
	resp, err = v.openAIPolicy.Complete(ctx, req)
	if err != nil && modelNotFound(err) {
		return Response{}, fmt.Errorf("%w %q at %s, even after loading it again: %w", ErrUnknownAdapter, v.Adapter(), v.baseURL, err)
	}
	return resp, err
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

// reload loads the current adapter again, unless another request did so
// since gen.
func (v *VLLM) reload(ctx context.Context, gen int) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.gen != gen {
		return nil
	}
	err := v.post(ctx, "load_lora_adapter", map[string]any{"lora_name": v.adapter, "lora_path": v.path})
	if err != nil && !errors.Is(err, errAlreadyLoaded) {
		return err
	}
	v.gen++
	v.reloads++
	return nil
}

// SwitchAdapter loads name from path, makes requests name it, and unloads
// the previous adapter.
func (v *VLLM) SwitchAdapter(ctx context.Context, name, path string) error {
	if name == "" || path == "" {
		return fmt.Errorf("%s: an adapter needs a name and a path", v.label)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	err := v.post(ctx, "load_lora_adapter", map[string]any{"lora_name": name, "lora_path": path})
	if errors.Is(err, errAlreadyLoaded) {
		// Left by an earlier process of a resumed run: replace it.
		err = v.post(ctx, "load_lora_adapter", map[string]any{"lora_name": name, "lora_path": path, "load_inplace": true})
	}
	if err != nil {
		return err
	}
	prev := v.adapter
	v.adapter, v.path = name, path
	v.gen++
	if prev == "" || prev == name {
		return nil
	}
	if err := v.post(ctx, "unload_lora_adapter", map[string]any{"lora_name": prev}); err != nil {
		return fmt.Errorf("adapter %q is in use, but unloading %q failed: %w", name, prev, err)
	}
	return nil
}

// CheckAdapterAPI asks to unload an adapter name no one uses: a server
// with the routes answers 404 in the OpenAI error shape ("cannot be
// found"), one without them FastAPI's bare 404.
func (v *VLLM) CheckAdapterAPI(ctx context.Context) error {
	err := v.post(ctx, "unload_lora_adapter", map[string]any{"lora_name": "rlhost-probe-" + fmt.Sprint(time.Now().UnixNano())})
	if err == nil || errors.Is(err, ErrUnknownAdapter) {
		return nil
	}
	return err
}

// errAlreadyLoaded is vLLM's 400 for a name that is loaded already.
var errAlreadyLoaded = errors.New("already loaded")

// post sends one adapter request, retrying with the policy's backoff
// while no HTTP answer comes back (a restarting server). vLLM answers a
// load that fails inside the engine with a 500, which is not retried. Errors name the URL and what the server said.
func (v *VLLM) post(ctx context.Context, route string, body map[string]any) error {
	url := strings.TrimSuffix(v.baseURL, "/") + "/" + route
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
