package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/rlhost/rlhost/core/jsonl"
)

// rulesPolicy answers by rules that look at the conversation so far, so a
// scripted test policy can react to what the environment said instead of
// replaying a precomputed script. The file holds one rule per line, tried
// in order; the first that matches gives the reply:
//
//	{"task": "^mbpp/", "turn": 0, "reply": {"tool_calls": [{"function": {"name": "run_tests", "arguments": "{}"}}]}}
//	{"when": "FAILED: (\\w+)", "reply": "I will fix {{1}}."}
//	{"reply": "done"}
//
// task matches the task id, when the content of the last message (the
// environment's latest answer), turn the policy call's turn; an absent
// condition always holds. reply is a turn as in a replay file; {{N}} in its
// content and tool-call arguments becomes when's N-th capture group. No
// matching rule gives ErrExhausted.
type rulesPolicy struct {
	file  string
	rules []rule
}

type rule struct {
	line  int
	task  *regexp.Regexp
	when  *regexp.Regexp
	turn  *int
	reply Choice
}

var captureRef = regexp.MustCompile(`\{\{(\d+)\}\}`)

func newRules(cfg Config, baseDir string) (Policy, error) {
	path, data, err := cfg.readFile(baseDir)
	if err != nil {
		return nil, err
	}
	rules, err := parseRules(data, path)
	if err != nil {
		return nil, cfg.attrErr("file", "%w", err)
	}
	return &rulesPolicy{file: path, rules: rules}, nil
}

// parseRules parses a rules file; errors name file:line.
func parseRules(data []byte, name string) ([]rule, error) {
	var rules []rule
	err := jsonl.Each(bytes.NewReader(data), name, len(data)+1, func(n int, line []byte) error {
		r, err := parseRule(line, n)
		rules = append(rules, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("%s: no rules", name)
	}
	return rules, nil
}

func parseRule(line []byte, n int) (rule, error) {
	var raw struct {
		Task  *string         `json:"task"`
		When  *string         `json:"when"`
		Turn  *int            `json:"turn"`
		Reply json.RawMessage `json:"reply"`
	}
	if err := jsonl.DecodeStrict(line, &raw); err != nil {
		return rule{}, err
	}
	r := rule{line: n, turn: raw.Turn}
	var err error
	if raw.Task != nil {
		if r.task, err = regexp.Compile(*raw.Task); err != nil {
			return rule{}, fmt.Errorf("task: %w", err)
		}
	}
	if raw.When != nil {
		if r.when, err = regexp.Compile(*raw.When); err != nil {
			return rule{}, fmt.Errorf("when: %w", err)
		}
	}
	if len(raw.Reply) == 0 {
		return rule{}, errors.New(`"reply" is missing`)
	}
	if r.reply, err = parseReplayTurn(raw.Reply, fmt.Sprintf("call_r%d", n)); err != nil {
		return rule{}, fmt.Errorf("reply: %w", err)
	}
	// A {{N}} beyond when's groups would silently stay as text.
	groups := 0
	if r.when != nil {
		groups = r.when.NumSubexp()
	}
	texts := []string{r.reply.Message.Content}
	for _, tc := range r.reply.Message.ToolCalls {
		texts = append(texts, tc.Function.Arguments)
	}
	for _, t := range texts {
		for _, m := range captureRef.FindAllStringSubmatch(t, -1) {
			if k, _ := strconv.Atoi(m[1]); k > groups {
				return rule{}, fmt.Errorf("reply uses {{%d}}, but when has %d capture groups", k, groups)
			}
		}
	}
	return r, nil
}

// match reports whether r applies, with when's captures.
func (r rule) match(req Request, last string) ([]string, bool) {
	if r.task != nil && !r.task.MatchString(req.TaskID) {
		return nil, false
	}
	if r.turn != nil && *r.turn != req.Turn {
		return nil, false
	}
	if r.when == nil {
		return nil, true
	}
	m := r.when.FindStringSubmatch(last)
	return m, m != nil
}

func expand(s string, groups []string) string {
	return captureRef.ReplaceAllStringFunc(s, func(ref string) string {
		k, _ := strconv.Atoi(ref[2 : len(ref)-2])
		if k < len(groups) {
			return groups[k]
		}
		return ref
	})
}

func (p *rulesPolicy) Complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	n, err := numChoices(req)
	if err != nil {
		return Response{}, err
	}
	last := ""
	if len(req.Messages) > 0 {
		last = req.Messages[len(req.Messages)-1].Content
	}
	for _, r := range p.rules {
		groups, ok := r.match(req, last)
		if !ok {
			continue
		}
		c := cloneChoice(r.reply)
		c.Message.Content = expand(c.Message.Content, groups)
		for i := range c.Message.ToolCalls {
			c.Message.ToolCalls[i].Function.Arguments = expand(c.Message.ToolCalls[i].Function.Arguments, groups)
			c.Message.ToolCalls[i].ID = fmt.Sprintf("%s_t%d", c.Message.ToolCalls[i].ID, req.Turn)
		}
		resp := Response{Choices: make([]Choice, n)}
		for k := range resp.Choices {
			resp.Choices[k] = cloneChoice(c)
		}
		return resp, nil
	}
	return Response{}, fmt.Errorf("rules %s: no rule matches task %q turn %d (last message %.80q): %w", p.file, req.TaskID, req.Turn, last, ErrExhausted)
}

func (p *rulesPolicy) Close() error { return nil }
