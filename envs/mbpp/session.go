package mbpp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
)

// session is one episode: turns of tool calls, and a test run each time the
// agent ends a turn without tool calls, until it passes or attempts run out.
type session struct {
	cfg   *config
	prob  Problem
	sb    envplugin.Sandbox
	rt    runtimeInfo
	tools toolRunner

	mu          sync.Mutex // the host steps a session from one goroutine; this guards End racing Step
	attempt     int        // 1-based attempt being worked on
	turns       int
	toolCalls   int
	toolErrors  int
	testsPassed int
	testsTotal  int
	graded      int // test runs so far
	done        bool
	final       envplugin.Observation
}

// Step executes the reply's tool calls, or grades the solution when there
// are none.
func (s *session) Step(ctx context.Context, reply core.Message) (envplugin.Observation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return envplugin.Observation{}, errors.New("mbpp: step after the episode ended")
	}
	s.turns++
	if len(reply.ToolCalls) > 0 {
		msgs := make([]core.Message, 0, len(reply.ToolCalls))
		for _, tc := range reply.ToolCalls {
			s.toolCalls++
			out, err := s.tools.call(ctx, tc)
			if err != nil {
				return envplugin.Observation{}, fmt.Errorf("mbpp: tool %s: %w", tc.Function.Name, err)
			}
			if out.failed {
				s.toolErrors++
			}
			msgs = append(msgs, core.Message{Role: core.RoleTool, ToolCallID: tc.ID, Content: out.content})
		}
		return envplugin.Observation{Messages: msgs, Metrics: s.metrics()}, nil
	}
	g, err := grade(ctx, s.sb, s.rt, s.cfg, s.prob)
	if err != nil {
		return envplugin.Observation{}, fmt.Errorf("mbpp: attempt %d: %w", s.attempt, err)
	}
	s.graded++
	s.testsPassed, s.testsTotal = g.NumPassed(), len(g.Tests)
	switch {
	case g.Passed():
		return s.finish(math.Pow(s.cfg.AttemptDiscount, float64(s.attempt-1)), core.FinishPassed), nil
	case s.attempt >= s.cfg.MaxAttempts:
		return s.finish(0, core.FinishAttemptsExceeded), nil
	}
	s.attempt++
	return envplugin.Observation{
		Messages: []core.Message{{Role: core.RoleUser, Content: feedback(s.cfg, g, s.attempt-1)}},
		Metrics:  s.metrics(),
	}, nil
}

func (s *session) finish(reward float64, reason string) envplugin.Observation {
	s.done = true
	m := s.metrics()
	if reason == core.FinishPassed {
		m["passed"] = 1
	}
	s.final = envplugin.Observation{
		Done: true, Reward: reward, Metrics: m, FinishReason: reason,
		Info: map[string]string{"finish_reason": reason},
	}
	return s.final
}

// End returns the final observation; when the host stopped the episode
// (max turns, context limit, timeout, ...), the reward is 0.
func (s *session) End(_ context.Context, reason string) (envplugin.Observation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		// Step already finished the episode; a late stop by the host does
		// not take the earned reward away.
		return s.final, nil
	}
	if reason == "" {
		reason = core.FinishError // the host ended an unfinished episode without saying why
	}
	return s.finish(0, reason), nil
}

func (s *session) metrics() map[string]float64 {
	return map[string]float64{
		"attempts":     float64(s.graded),
		"turns":        float64(s.turns),
		"tool_calls":   float64(s.toolCalls),
		"tool_errors":  float64(s.toolErrors),
		"tests_passed": float64(s.testsPassed),
		"tests_total":  float64(s.testsTotal),
		"passed":       0,
	}
}

// feedback tells the agent which tests failed and how, within feedback_cap.
func feedback(cfg *config, g GradeResult, attempt int) string {
	var b strings.Builder
	left := cfg.MaxAttempts - attempt
	fmt.Fprintf(&b, "Your solution failed the tests (attempt %d of %d; %d left).\n", attempt, cfg.MaxAttempts, left)
	if g.Broken != "" {
		fmt.Fprintf(&b, "\nThe test run did not complete: %s\n", g.Broken)
	} else {
		fmt.Fprintf(&b, "%d of %d tests passed.\n", g.NumPassed(), len(g.Tests))
		for _, t := range g.Tests {
			if !t.OK {
				fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(t.Detail, "\n"))
			}
		}
	}
	tail := fmt.Sprintf("\nFix %s and reply without a tool call to run the tests again.", cfg.SolutionPath)
	body := b.String()
	if len(body)+len(tail) > cfg.FeedbackCap {
		body = truncate(body, cfg.FeedbackCap-len(tail))
	}
	return strings.ToValidUTF8(body+tail, "\uFFFD")
}
