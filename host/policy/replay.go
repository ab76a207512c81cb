package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/jsonl"
)

// replayPolicy answers from a JSONL file loaded once at construction. Each
// line is one task:
//
//	{"task_id": "t1", "completions": ["a", "b"]}            single turn: index k gets completions[k % len]
//	{"task_id": "t2", "episodes": [["turn 0", "turn 1"], ...]}  multi-turn: index k plays episodes[k % len]
//
// A turn is a string (the assistant's text) or a message object
// {"content": ..., "tool_calls": [...], "finish_reason": ...} whose role, if
// given, must be "assistant". Asking past the script gives ErrExhausted.
type replayPolicy struct {
	file    string
	entries map[string]replayEntry
}

// replayEntry is one parsed line: exactly one of single and episodes is set.
type replayEntry struct {
	taskID   string
	single   []Choice   // completions mode: one turn each
	episodes [][]Choice // episodes mode: episode -> turns
}

func newReplay(cfg Config, baseDir string) (Policy, error) {
	path, data, err := cfg.readFile(baseDir)
	if err != nil {
		return nil, err
	}
	entries, err := parseReplay(data, path)
	if err != nil {
		return nil, cfg.attrErr("file", "%w", err)
	}
	return &replayPolicy{file: path, entries: entries}, nil
}

// parseReplay parses a whole replay file; errors name file:line.
func parseReplay(data []byte, name string) (map[string]replayEntry, error) {
	entries := map[string]replayEntry{}
	lineOf := map[string]int{}
	err := jsonl.Each(bytes.NewReader(data), name, len(data)+1, func(n int, line []byte) error {
		e, err := parseReplayLine(line)
		if err != nil {
			return err
		}
		if prev, dup := lineOf[e.taskID]; dup {
			return fmt.Errorf("task_id %q already defined on line %d", e.taskID, prev)
		}
		entries[e.taskID], lineOf[e.taskID] = e, n
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s: no tasks in replay file", name)
	}
	return entries, nil
}

// parseReplayLine parses one non-empty line of a replay file.
func parseReplayLine(line []byte) (replayEntry, error) {
	var raw struct {
		TaskID      *string             `json:"task_id"`
		Completions []json.RawMessage   `json:"completions"`
		Episodes    [][]json.RawMessage `json:"episodes"`
	}
	if err := jsonl.DecodeStrict(line, &raw); err != nil {
		return replayEntry{}, err
	}
	if raw.TaskID == nil || *raw.TaskID == "" {
		return replayEntry{}, errors.New(`"task_id" is missing or empty`)
	}
	e := replayEntry{taskID: *raw.TaskID}
	switch {
	case len(raw.Completions) > 0 && len(raw.Episodes) > 0:
		return replayEntry{}, errors.New(`a line has either "completions" or "episodes", not both`)
	case len(raw.Completions) > 0:
		for k, t := range raw.Completions {
			c, err := parseReplayTurn(t, fmt.Sprintf("call_%d_0", k))
			if err != nil {
				return replayEntry{}, fmt.Errorf("completions[%d]: %w", k, err)
			}
			e.single = append(e.single, c)
		}
	case len(raw.Episodes) > 0:
		for k, ep := range raw.Episodes {
			if len(ep) == 0 {
				return replayEntry{}, fmt.Errorf("episodes[%d] has no turns", k)
			}
			turns := make([]Choice, 0, len(ep))
			for i, t := range ep {
				c, err := parseReplayTurn(t, fmt.Sprintf("call_%d_%d", k, i))
				if err != nil {
					return replayEntry{}, fmt.Errorf("episodes[%d][%d]: %w", k, i, err)
				}
				turns = append(turns, c)
			}
			e.episodes = append(e.episodes, turns)
		}
	default:
		return replayEntry{}, errors.New(`a line needs a non-empty "completions" or "episodes" list`)
	}
	return e, nil
}

// parseReplayTurn reads one scripted turn. Tool calls without an id get
// idPrefix_k, unique within an episode, so tool results can refer to them.
func parseReplayTurn(raw json.RawMessage, idPrefix string) (Choice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return Choice{}, err
		}
		return Choice{Message: core.Message{Role: core.RoleAssistant, Content: s}, FinishReason: "stop"}, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return Choice{}, errors.New("a turn is a string or an assistant message object")
	}
	var m struct {
		Role         core.Role       `json:"role"`
		Content      *string         `json:"content"`
		ToolCalls    []core.ToolCall `json:"tool_calls"`
		FinishReason string          `json:"finish_reason"`
	}
	if err := jsonl.DecodeStrict(raw, &m); err != nil {
		return Choice{}, err
	}
	if m.Role != "" && m.Role != core.RoleAssistant {
		return Choice{}, fmt.Errorf("role %q: replayed turns are assistant messages", m.Role)
	}
	c := Choice{Message: core.Message{Role: core.RoleAssistant}, FinishReason: m.FinishReason}
	if m.Content != nil {
		c.Message.Content = *m.Content
	}
	for k, tc := range m.ToolCalls {
		if tc.Function.Name == "" {
			return Choice{}, fmt.Errorf("tool_calls[%d]: function name is empty", k)
		}
		if tc.Type == "" {
			tc.Type = "function"
		}
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("%s_%d", idPrefix, k)
		}
		c.Message.ToolCalls = append(c.Message.ToolCalls, tc)
	}
	if c.FinishReason == "" {
		c.FinishReason = "stop"
		if len(c.Message.ToolCalls) > 0 {
			c.FinishReason = "tool_calls"
		}
	}
	return c, nil
}

func (p *replayPolicy) Complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	n, err := numChoices(req)
	if err != nil {
		return Response{}, err
	}
	e, ok := p.entries[req.TaskID]
	if !ok {
		return Response{}, fmt.Errorf("replay %s: task %q not in file: %w", p.file, req.TaskID, ErrExhausted)
	}
	resp := Response{Choices: make([]Choice, 0, n)}
	for k := range n {
		idx := req.Index + k
		var script []Choice
		switch {
		case idx < 0:
		case e.episodes != nil:
			script = e.episodes[idx%len(e.episodes)]
		default: // single-turn: completion idx is the whole script
			i := idx % len(e.single)
			script = e.single[i : i+1]
		}
		if req.Turn < 0 || req.Turn >= len(script) {
			return Response{}, fmt.Errorf("replay %s: task %q index %d has no turn %d: %w", p.file, req.TaskID, idx, req.Turn, ErrExhausted)
		}
		resp.Choices = append(resp.Choices, cloneChoice(script[req.Turn]))
	}
	return resp, nil
}

// cloneChoice copies the tool-call slice so a caller that edits a returned
// message cannot change the script.
func cloneChoice(c Choice) Choice {
	c.Message.ToolCalls = slices.Clone(c.Message.ToolCalls)
	return c
}

func (p *replayPolicy) Close() error { return nil }
