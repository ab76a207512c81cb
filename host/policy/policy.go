package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/suggest"
)

// Policy produces assistant messages. Implementations are safe for
// concurrent use: the runner calls Complete from many episodes at once.
type Policy interface {
	// Complete returns req.N assistant completions of req.Messages, or an
	// error; it never returns fewer choices than asked for.
	Complete(ctx context.Context, req Request) (Response, error)
	Close() error
}

// Checker is a Policy that can confirm, before any episode runs, that its
// server answers, accepts the credentials and serves the configured model.
// The error names the URL and the cause. Failures worth retrying are
// retried as the policy's requests are; notify, if not nil, hears of each
// retry (what failed, and the wait), so a slow check is not a silent one.
// Policies without a server (replay) do not implement it.
type Checker interface {
	Check(ctx context.Context, notify func(msg string)) error
}

// Request is one call to the policy.
type Request struct {
	Messages []core.Message
	Tools    []core.ToolSpec
	// N is how many completions are wanted; single-shot environments ask for
	// a whole group at once. 0 means 1.
	N int
	// Who is asking. Replay picks its answer by TaskID, Index (+k for the
	// k-th of N choices) and Turn; the others only use them in errors.
	TaskID                   string
	Step, Group, Index, Turn int
	// Seed is sent to the server when non-zero.
	Seed int64
}

// Response holds the completions of one Request.
type Response struct {
	Choices []Choice // len == N on success
	Usage   core.Usage
}

// Choice is one completion. Message.Role is always assistant; an empty
// message (no content, no tool calls) is returned as the server sent it.
type Choice struct {
	Message      core.Message
	FinishReason string // as the server said it: "stop", "length", "tool_calls", ...

	// Filled when the server returns them (see Config.ReturnTokenIDs):
	// the prompt's tokens, the sampled tokens and their log-probs.
	PromptTokenIDs []int
	TokenIDs       []int
	LogProbs       []float32
	// CompletionTokens is this choice's own completion length when known
	// (from TokenIDs or logprobs), else 0.
	CompletionTokens int
	// WeightsVersion is the version of the weights that sampled every
	// token of the choice (the number of training steps applied to
	// them), when the server says; nil when it does not.
	WeightsVersion *int
}

// Errors callers act on, matched with errors.Is.
var (
	// ErrContextLength: the server says the conversation no longer fits the
	// model's context window. Retrying cannot help; end the episode.
	ErrContextLength = errors.New("context length exceeded")
	// ErrExhausted: replay has no completion for this task, index or turn.
	ErrExhausted = errors.New("no more replayed completions")
	// ErrRejected: the server refused the request for a reason retrying
	// cannot fix and that holds for every request (bad key, unknown
	// model, a request the client itself refuses to send).
	ErrRejected = errors.New("request rejected by the policy server")
	// ErrInvalidRequest: the server answered this request 400, a malformed
	// request. It may be this episode's alone (a prompt the server cannot
	// take), so the runner ends the episode and stops the run only when
	// requests keep failing.
	ErrInvalidRequest = errors.New("request refused as invalid by the policy server")
)

// Factory builds a Policy from its configuration. baseDir is the directory
// relative paths in cfg are resolved against (the config file's).
type Factory func(cfg Config, baseDir string) (Policy, error)

// Option adjusts New.
type Option func(map[string]Factory)

// WithProvider makes New accept provider name, e.g. the trainer's embedded
// policy, without this package importing the trainer. It can also replace a
// built-in provider.
func WithProvider(name string, f Factory) Option {
	return func(m map[string]Factory) { m[name] = f }
}

// New validates cfg and builds the policy its provider names.
func New(cfg Config, baseDir string, opts ...Option) (Policy, error) {
	providers := map[string]Factory{
		"replay": newReplay,
		"rules":  newRules,
		"openai": newOpenAI,
		"vllm":   newVLLM,
	}
	for _, o := range opts {
		o(providers)
	}
	if cfg.Provider == "" {
		return nil, cfg.attrErr("provider", "required (one of %s)", known(providers))
	}
	f, ok := providers[cfg.Provider]
	if !ok {
		if s := suggest.Closest(cfg.Provider, slices.Sorted(maps.Keys(providers))); s != "" {
			return nil, cfg.attrErr("provider", "unknown provider %q; did you mean %q? (known: %s)", cfg.Provider, s, known(providers))
		}
		return nil, cfg.attrErr("provider", "unknown provider %q (known: %s)", cfg.Provider, known(providers))
	}
	return f(cfg, baseDir)
}

func known(m map[string]Factory) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

// numChoices is req.N with 0 read as 1.
func numChoices(req Request) (int, error) {
	switch {
	case req.N < 0:
		return 0, fmt.Errorf("policy request for task %q: N = %d, want >= 1", req.TaskID, req.N)
	case req.N == 0:
		return 1, nil
	}
	return req.N, nil
}
