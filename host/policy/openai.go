package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	openai "github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/retry"
)

// Defaults of the openai provider.
const (
	DefaultBaseURL     = "https://api.openai.com/v1"
	DefaultTimeout     = 300 * time.Second
	DefaultMaxRetries  = 8
	DefaultBackoffBase = 500 * time.Millisecond
	DefaultBackoffMax  = 30 * time.Second
)

// openAIPolicy calls an OpenAI-compatible Chat Completions endpoint.
type openAIPolicy struct {
	label       string
	fleet       *fleet // the servers: base_url, or each of base_urls
	http        *http.Client
	model       string
	temperature float32 // 0: leave to the server (see newOpenAI)
	topP        float32
	maxTokens   int
	stop        []string
	timeout     time.Duration
	maxRetries  int
	backoffBase time.Duration
	backoffMax  time.Duration
	// returnTokens asks for token ids and log-probs with every request.
	returnTokens bool
	// notFound, when set, is asked to make model known to server s after
	// s answered that it does not serve it (provider vllm: the server
	// restarted and forgot a LoRA adapter); the attempt is then repeated.
	notFound func(ctx context.Context, s *server, model string) error

	apiKey string // sent by the adapter routes of provider vllm

	// unsetKeyEnv names the api_key_env variable that was not set: no key
	// is sent, which keyless local servers accept; a 401 then says why.
	unsetKeyEnv string

	// nIgnored is set once the server answered n > 1 with a single choice;
	// later groups go straight to one request per choice.
	nIgnored atomic.Bool

	// Swapped by tests to observe backoff without waiting for it.
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func(n int64) int64 // uniform in [0, n)
}

// NewOpenAI builds an openai-provider policy from cfg; other providers
// that speak the same protocol (the trainer's embedded server) build theirs
// with it after filling in base_url and model.
func NewOpenAI(cfg Config, baseDir string) (Policy, error) { return newOpenAI(cfg, baseDir) }

func newOpenAI(cfg Config, _ string) (Policy, error) {
	if err := cfg.rejectUnused("base_url", "base_urls", "model", "api_key_env", "temperature", "top_p", "max_tokens",
		"stop", "timeout", "max_retries", "backoff_base", "backoff_max", "return_token_ids"); err != nil {
		return nil, err
	}
	p := &openAIPolicy{
		label:      cfg.label(),
		maxRetries: DefaultMaxRetries,
		stop:       cfg.Stop,
		sleep:      sleepCtx,
		jitter:     rand.Int64N,
	}
	if cfg.Model == nil || *cfg.Model == "" {
		return nil, cfg.attrErr("model", "required for provider \"openai\"")
	}
	p.model = *cfg.Model
	p.returnTokens = cfg.ReturnTokenIDs != nil && *cfg.ReturnTokenIDs
	urls, err := cfg.baseURLs()
	if err != nil {
		return nil, err
	}
	key := ""
	if cfg.APIKeyEnv != nil && *cfg.APIKeyEnv != "" {
		// Unset is fine until the server asks for a key: local vLLM,
		// SGLang and llama.cpp servers need none (see unauthorized).
		v, ok := os.LookupEnv(*cfg.APIKeyEnv)
		if !ok {
			p.unsetKeyEnv = *cfg.APIKeyEnv
		}
		key = v
	}
	if t := cfg.Temperature; t != nil {
		if *t < 0 || *t > 2 || math.IsNaN(*t) {
			return nil, cfg.attrErr("temperature", "%v is outside [0, 2]", *t)
		}
		// go-openai omits a zero temperature, which servers read as 1;
		// the smallest positive float32 goes out instead and means greedy.
		p.temperature = max(float32(*t), math.SmallestNonzeroFloat32)
	}
	if v := cfg.TopP; v != nil {
		if !(*v > 0 && *v <= 1) {
			return nil, cfg.attrErr("top_p", "%v is outside (0, 1]", *v)
		}
		p.topP = float32(*v)
	}
	if v := cfg.MaxTokens; v != nil {
		if *v < 1 {
			return nil, cfg.attrErr("max_tokens", "%d, want >= 1", *v)
		}
		p.maxTokens = *v
	}
	if v := cfg.MaxRetries; v != nil {
		if *v < 0 {
			return nil, cfg.attrErr("max_retries", "%d, want >= 0", *v)
		}
		p.maxRetries = *v
	}
	if p.timeout, err = cfg.duration("timeout", cfg.Timeout, DefaultTimeout); err != nil {
		return nil, err
	}
	if p.backoffBase, err = cfg.duration("backoff_base", cfg.BackoffBase, DefaultBackoffBase); err != nil {
		return nil, err
	}
	if p.backoffMax, err = cfg.duration("backoff_max", cfg.BackoffMax, DefaultBackoffMax); err != nil {
		return nil, err
	}
	if p.backoffMax < p.backoffBase {
		return nil, cfg.attrErr("backoff_max", "%s is below backoff_base (%s)", p.backoffMax, p.backoffBase)
	}

	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Many episodes share one server; the default of 2 idle connections per
	// host would reopen a connection for most requests.
	tr.MaxIdleConnsPerHost = 256
	p.http = &http.Client{Transport: tr}
	p.apiKey = key
	p.fleet = newFleet(p.label, urls, func(url string) *openai.Client {
		oc := openai.DefaultConfig(key)
		oc.BaseURL = url
		oc.HTTPClient = headerCapture{p.http}
		return openai.NewClientWithConfig(oc)
	})
	p.fleet.probe = func(ctx context.Context, s *server) error {
		_, err := s.client.ListModels(ctx)
		return err
	}
	p.fleet.start()
	return p, nil
}

// baseURLs are the block's servers: base_url, or base_urls, or OpenAI's.
func (c Config) baseURLs() ([]string, error) {
	switch {
	case c.BaseURL != nil && c.BaseURLs != nil:
		return nil, c.attrErr("base_urls", "set base_url (one server) or base_urls (several), not both")
	case c.BaseURL != nil:
		if *c.BaseURL == "" {
			return nil, c.attrErr("base_url", "empty")
		}
		return []string{*c.BaseURL}, nil
	case c.BaseURLs != nil:
		if len(c.BaseURLs) == 0 {
			return nil, c.attrErr("base_urls", "empty: name at least one server")
		}
		seen := map[string]bool{}
		for _, u := range c.BaseURLs {
			if u == "" {
				return nil, c.attrErr("base_urls", "an empty URL")
			}
			if seen[u] {
				return nil, c.attrErr("base_urls", "%s is listed twice", u)
			}
			seen[u] = true
		}
		return c.BaseURLs, nil
	}
	return []string{DefaultBaseURL}, nil
}

// retryAfterSlot carries a per-attempt place for the Retry-After header
// through the request context, since go-openai's errors drop headers.
type retryAfterSlot struct{}

// contentPatch marks a request whose body needs `"content": ""` put back.
type contentPatch struct{}

// headerCapture is the HTTP layer under go-openai: it records Retry-After
// and restores empty message content (see restoreEmptyContent).
type headerCapture struct{ c *http.Client }

func (h headerCapture) Do(req *http.Request) (*http.Response, error) {
	extras, _ := req.Context().Value(tokenSlot{}).(*tokenExtras)
	if (req.Context().Value(contentPatch{}) != nil || extras != nil) && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		if req.Context().Value(contentPatch{}) != nil {
			if body, err = restoreEmptyContent(body); err != nil {
				return nil, fmt.Errorf("restore empty message content: %w", err)
			}
		}
		if extras != nil {
			if body, err = askForTokenIDs(body); err != nil {
				return nil, fmt.Errorf("ask for token ids: %w", err)
			}
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.ContentLength = int64(len(body))
	}
	resp, err := h.c.Do(req)
	if err == nil {
		if slot, ok := req.Context().Value(retryAfterSlot{}).(*string); ok {
			*slot = resp.Header.Get("Retry-After")
		}
		if extras != nil && resp.StatusCode == http.StatusOK {
			if err := extras.capture(resp); err != nil {
				return nil, err
			}
		}
	}
	return resp, err
}

// needsContentPatch reports whether go-openai would drop a "content" that
// the API requires: it omits empty content, but only an assistant message
// with tool calls may go without one (an empty tool output or an empty
// earlier reply would be refused).
func needsContentPatch(msgs []core.Message) bool {
	for _, m := range msgs {
		if m.Content == "" && len(m.ToolCalls) == 0 {
			return true
		}
	}
	return false
}

// restoreEmptyContent adds "content": "" to every message of a request body
// that has neither content nor tool calls. Other bytes keep their meaning.
func restoreEmptyContent(body []byte) ([]byte, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(req["messages"], &msgs); err != nil {
		return nil, err
	}
	for _, m := range msgs {
		_, hasContent := m["content"]
		_, hasCalls := m["tool_calls"]
		if !hasContent && !hasCalls {
			m["content"] = json.RawMessage(`""`)
		}
	}
	patched, err := json.Marshal(msgs)
	if err != nil {
		return nil, err
	}
	req["messages"] = patched
	return json.Marshal(req)
}

func (p *openAIPolicy) Complete(ctx context.Context, req Request) (Response, error) {
	return p.complete(ctx, req, p.model, nil)
}

// complete asks for req's completions from model. version is the weights
// version model names (a vllm policy's adapter); nil reads it from the
// response (rlhost's server says it in system_fingerprint).
func (p *openAIPolicy) complete(ctx context.Context, req Request, model string, version *int) (Response, error) {
	n, err := numChoices(req)
	if err != nil {
		return Response{}, err
	}
	if needsContentPatch(req.Messages) {
		ctx = context.WithValue(ctx, contentPatch{}, true)
	}
	base := openai.ChatCompletionRequest{
		Model:       model,
		Messages:    toOpenAIMessages(req.Messages),
		Tools:       toOpenAITools(req.Tools),
		Temperature: p.temperature,
		TopP:        p.topP,
		MaxTokens:   p.maxTokens,
		Stop:        p.stop,
		LogProbs:    p.returnTokens,
	}
	var resp Response
	first := 0
	if n == 1 || !p.nIgnored.Load() {
		r, err := p.create(ctx, withN(base, n, req.Seed, 0), req, version)
		if err != nil {
			return Response{}, err
		}
		resp = r
		first = len(r.Choices)
		if first >= n {
			resp.Choices = resp.Choices[:n]
			return resp, nil
		}
		if first == 1 {
			p.nIgnored.Store(true)
		}
	}
	// The server gave fewer choices than asked: ask for the rest one by one,
	// concurrently, each with its own seed so they do not all come out the same.
	rest := make([]Response, n-first)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error // the root cause, not the cancellations it triggers
	)
	for i := range rest {
		wg.Go(func() {
			var err error
			one := req
			one.Index = req.Index + first + i
			rest[i], err = p.create(ctx, withN(base, 1, req.Seed, int64(first+i)), one, version)
			if err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return Response{}, firstErr
	}
	for _, r := range rest {
		if len(r.Choices) == 0 {
			return Response{}, fmt.Errorf("%s: task %q turn %d: server returned no choices", p.label, req.TaskID, req.Turn)
		}
		resp.Choices = append(resp.Choices, r.Choices[0])
		resp.Usage = addUsage(resp.Usage, r.Usage)
	}
	return resp, nil
}

// withN sets n and the seed for one HTTP request; the k-th separate request
// of a group gets seed+k.
func withN(r openai.ChatCompletionRequest, n int, seed, k int64) openai.ChatCompletionRequest {
	if n > 1 {
		r.N = n
	}
	if seed != 0 {
		s := int(seed + k)
		r.Seed = &s
	}
	return r
}

func addUsage(a, b core.Usage) core.Usage {
	return core.Usage{
		PromptTokens:     a.PromptTokens + b.PromptTokens,
		CompletionTokens: a.CompletionTokens + b.CompletionTokens,
		TotalTokens:      a.TotalTokens + b.TotalTokens,
	}
}

// create sends one request to the fleet's least loaded server (the
// episode's own, where it can), retrying failures worth retrying with
// exponential backoff and full jitter, or the server's Retry-After. A
// failure that says the server is gone takes it out of the fleet and
// repeats the request on another at once.
func (p *openAIPolicy) create(ctx context.Context, creq openai.ChatCompletionRequest, req Request, version *int) (Response, error) {
	where := fmt.Sprintf("%s: task %q turn %d", p.label, req.TaskID, req.Turn)
	var avoid *server
	failovers, reloaded := 0, map[*server]bool{}
	for attempt := 0; ; attempt++ {
		s, done := p.fleet.pick(req.Episode(), max(1, creq.N), avoid)
		out, retryAfter, err := p.send(ctx, s, creq)
		done()
		if err == nil {
			s.answered()
			resp := Response{Usage: core.Usage{
				PromptTokens:     out.Usage.PromptTokens,
				CompletionTokens: out.Usage.CompletionTokens,
				TotalTokens:      out.Usage.TotalTokens,
			}}
			v := version
			if v == nil {
				v = fingerprintVersion(out.SystemFingerprint)
			}
			for _, c := range out.Choices {
				ch := fromOpenAIChoice(c)
				ch.WeightsVersion = v
				resp.Choices = append(resp.Choices, ch)
			}
			if out.extras != nil {
				if err := out.extras.attach(resp.Choices, out.Choices); err != nil {
					return Response{}, fmt.Errorf("%s: %w", where, err)
				}
			}
			return resp, nil
		}
		if ctx.Err() != nil {
			return Response{}, fmt.Errorf("%s: %w (last error: %s)", where, ctx.Err(), describe(err))
		}
		if len(p.fleet.servers) > 1 {
			where = fmt.Sprintf("%s: task %q turn %d (server %s)", p.label, req.TaskID, req.Turn, s.url)
		}
		if serverDown(err) && p.fleet.takeOut(s, err) && failovers < len(p.fleet.servers) {
			// Another server is in: repeat there without waiting.
			failovers++
			avoid = s
			continue
		}
		switch classify(err) {
		case contextLength:
			return Response{}, fmt.Errorf("%s: %w: %s", where, ErrContextLength, describe(err))
		case permanent:
			if p.notFound != nil && creq.Model != p.model && modelNotFound(err) {
				if reloaded[s] {
					return Response{}, fmt.Errorf("%w %q at %s, even after loading it again: %w", ErrUnknownAdapter, creq.Model, s.url, err)
				}
				reloaded[s] = true
				if rerr := p.notFound(ctx, s, creq.Model); rerr != nil {
					return Response{}, fmt.Errorf("%s: the server at %s no longer knows LoRA adapter %q (did it restart?), and loading it again failed: %w",
						p.label, s.url, creq.Model, rerr)
				}
				avoid = nil
				continue
			}
			if status, _, _ := apiFailure(err); status == http.StatusBadRequest {
				return Response{}, fmt.Errorf("%s: %w: %w", where, ErrInvalidRequest, serverError{err})
			}
			return Response{}, fmt.Errorf("%s: %w: %w%s", where, ErrRejected, serverError{err}, p.unauthorized(err))
		}
		if attempt >= p.maxRetries+failovers {
			return Response{}, fmt.Errorf("%s: giving up after %d attempts: %s", where, attempt+1, describe(err))
		}
		avoid = s
		wait, ok := parseRetryAfter(retryAfter, time.Now())
		if !ok {
			// Full jitter: uniform in [0, base*2^attempt], capped.
			wait = time.Duration(p.jitter(int64(backoffCeiling(attempt-failovers, p.backoffBase, p.backoffMax)) + 1))
		}
		if serr := p.sleep(ctx, wait); serr != nil {
			return Response{}, fmt.Errorf("%s: %w while backing off (last error: %s)", where, serr, describe(err))
		}
	}
}

// sent is one answered attempt: go-openai's response and the token ids
// read beside it.
type sent struct {
	openai.ChatCompletionResponse
	extras *tokenExtras
}

// send makes one attempt on s. retryAfter is the server's Retry-After,
// if it sent one. When s is taken out of the fleet mid-attempt, the
// error says so (errServerOut).
func (p *openAIPolicy) send(ctx context.Context, s *server, creq openai.ChatCompletionRequest) (sent, string, error) {
	var retryAfter string
	actx := context.WithValue(ctx, retryAfterSlot{}, &retryAfter)
	var extras *tokenExtras
	if p.returnTokens {
		extras = &tokenExtras{}
		actx = context.WithValue(actx, tokenSlot{}, extras)
	}
	actx, end := s.begin(actx)
	defer end()
	tctx, cancel := context.WithTimeout(actx, p.timeout)
	defer cancel()
	out, err := s.client.CreateChatCompletion(tctx, creq)
	if err != nil {
		if cause := context.Cause(actx); errors.Is(cause, errServerOut) {
			return sent{}, retryAfter, cause
		}
		return sent{}, retryAfter, err
	}
	return sent{ChatCompletionResponse: out, extras: extras}, retryAfter, nil
}

// fingerprintVersion reads the weights version rlhost's own server puts
// in system_fingerprint ("rlhost-weights-N"); nil for other servers.
func fingerprintVersion(fp string) *int {
	rest, ok := strings.CutPrefix(fp, "rlhost-weights-")
	if !ok {
		return nil
	}
	v, err := strconv.Atoi(rest)
	if err != nil || v < 0 {
		return nil
	}
	return &v
}

// unauthorized explains a 401 that an unset api_key_env variable explains.
func (p *openAIPolicy) unauthorized(err error) string {
	if status, _, _ := apiFailure(err); status != http.StatusUnauthorized || p.unsetKeyEnv == "" {
		return ""
	}
	return fmt.Sprintf(" (the server wants an API key, and api_key_env names %s, which is not set)", p.unsetKeyEnv)
}

// Check asks every server GET {base_url}/models whether it is up,
// accepts the key, and serves the configured model. Failures worth
// retrying (a 503, a 429, a dropped connection) get the same retries and
// backoff as a completion; a refused connection or an unknown host fails
// at once. Every server must pass: a fleet that starts a server short is
// more likely a typo than a plan.
func (p *openAIPolicy) Check(ctx context.Context, notify func(msg string)) error {
	errs := make([]error, len(p.fleet.servers))
	var wg sync.WaitGroup
	for i, s := range p.fleet.servers {
		wg.Go(func() { errs[i] = p.checkServer(ctx, s, notify) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *openAIPolicy) checkServer(ctx context.Context, s *server, notify func(msg string)) error {
	url := strings.TrimSuffix(s.url, "/") + "/models"
	for attempt := 0; ; attempt++ {
		var retryAfter string
		actx, cancel := context.WithTimeout(context.WithValue(ctx, retryAfterSlot{}, &retryAfter), p.timeout)
		list, err := s.client.ListModels(actx)
		cancel()
		if err == nil {
			var ids []string
			for _, m := range list.Models {
				if m.ID == p.model {
					return nil
				}
				ids = append(ids, m.ID)
			}
			if len(ids) == 0 {
				return fmt.Errorf("GET %s: the server lists no models, so model %q is not served", url, p.model)
			}
			if len(ids) > 8 {
				ids = append(ids[:8], "...")
			}
			return fmt.Errorf("GET %s: model %q is not served (the server has %s)", url, p.model, strings.Join(ids, ", "))
		}
		if ctx.Err() != nil {
			return fmt.Errorf("GET %s: %w (last error: %s)", url, ctx.Err(), describe(err))
		}
		// Nothing listening, or no such host: no answer says "try again",
		// so the check fails now rather than after every retry.
		if cause, ok := retry.Unreachable(err); ok {
			return fmt.Errorf("GET %s: %s (is the server running, and is base_url right?)", url, cause)
		}
		if classify(err) != retryable {
			return fmt.Errorf("GET %s: %s%s", url, describe(err), p.unauthorized(err))
		}
		if attempt >= p.maxRetries {
			return fmt.Errorf("GET %s: giving up after %d attempts: %s", url, attempt+1, describe(err))
		}
		wait, ok := parseRetryAfter(retryAfter, time.Now())
		if !ok {
			wait = time.Duration(p.jitter(int64(backoffCeiling(attempt, p.backoffBase, p.backoffMax)) + 1))
		}
		if notify != nil {
			notify(fmt.Sprintf("GET %s: %s; retry %d of %d in %s", url, describe(err), attempt+1, p.maxRetries, wait.Round(time.Millisecond)))
		}
		if serr := p.sleep(ctx, wait); serr != nil {
			return fmt.Errorf("GET %s: %w while backing off (last error: %s)", url, serr, describe(err))
		}
	}
}

// EndEpisode forgets which server the episode used.
func (p *openAIPolicy) EndEpisode(k EpisodeKey) { p.fleet.EndEpisode(k) }

// SetLogger sets where the policy says that a server went out or came back.
func (p *openAIPolicy) SetLogger(l hclog.Logger) { p.fleet.SetLogger(l) }

// Servers describes each server of the policy.
func (p *openAIPolicy) Servers() []ServerStats { return p.fleet.Servers() }

func (p *openAIPolicy) Close() error {
	p.fleet.close()
	p.http.CloseIdleConnections()
	return nil
}
