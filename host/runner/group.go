package runner

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/policy"
)

// groupShare is the one first-turn request of a group. It carries the
// seed of the group's episode 0 whichever episode sends it, so the group's
// samples do not depend on which of them got there first.
type groupShare struct {
	n    int
	seed int64
	done chan struct{}
	key  string
	resp policy.Response
	err  error
	mu   sync.Mutex
}

func (g *groupShare) get(ctx context.Context, p policy.Policy, req policy.Request) (policy.Choice, core.Usage, bool, error) {
	key := promptKey(req)
	g.mu.Lock()
	if g.done == nil {
		g.done = make(chan struct{})
		g.key = key
		g.mu.Unlock()
		shared := req
		shared.N, shared.Index, shared.Seed = g.n, 0, g.seed
		g.resp, g.err = p.Complete(ctx, shared)
		close(g.done)
	} else {
		g.mu.Unlock()
	}
	if g.key != key {
		return policy.Choice{}, core.Usage{}, false, nil
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return policy.Choice{}, core.Usage{}, true, ctx.Err()
	}
	if g.err != nil {
		// The leader's own episode may have been cancelled; others ask alone.
		if errors.Is(g.err, context.Canceled) || errors.Is(g.err, context.DeadlineExceeded) {
			return policy.Choice{}, core.Usage{}, false, nil
		}
		return policy.Choice{}, core.Usage{}, true, g.err
	}
	if req.Index >= len(g.resp.Choices) {
		return policy.Choice{}, core.Usage{}, false, nil
	}
	return g.resp.Choices[req.Index], shareUsage(g.resp, req.Index), true, nil
}

// shareUsage is member k's part of a group request's usage. Its completion
// tokens are its own when the server said (token ids or logprobs), else an
// even split. The one shared prompt is split evenly, the remainder going to
// the first members, so the members' figures add up to the request's.
func shareUsage(resp policy.Response, k int) core.Usage {
	n := len(resp.Choices)
	split := func(total, k int) int {
		q, rem := total/n, total%n
		if k < rem {
			q++
		}
		return q
	}
	u := core.Usage{PromptTokens: split(resp.Usage.PromptTokens, k)}
	known := 0
	for _, c := range resp.Choices {
		known += c.CompletionTokens
	}
	if c := resp.Choices[k]; known == resp.Usage.CompletionTokens && known > 0 {
		u.CompletionTokens = c.CompletionTokens
	} else {
		u.CompletionTokens = split(resp.Usage.CompletionTokens, k)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func promptKey(req policy.Request) string {
	b, _ := json.Marshal(struct {
		M []core.Message
		T []core.ToolSpec
	}{req.Messages, req.Tools})
	return string(b)
}
