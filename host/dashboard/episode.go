package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/dashboard/rundir"
)

// episodeView is one episode as the model saw it, with what the host
// measured around it. Every string in it came from a model, a sandbox or
// an environment; the template escapes them all.
type episodeView struct {
	Key, RawURL, LinkURL       string
	Task, Env, Finish, Reward  string
	Duration, Started, Sandbox string
	Error                      []seg
	Passed, TimedOut           bool
	Turns                      int
	PromptTokens, ComplTokens  string
	Metrics, Info              []item
	Messages                   []messageView
	Tools                      []toolView
	Err                        string
	PrevURL, NextURL, CloseURL string
	PolicyMS, EnvMS, ToolCalls string
	RewardClass                string
}

type messageView struct {
	Index     int
	Role      string
	Name      string
	Content   []seg
	Empty     bool
	ToolCalls []callView
	Answers   string // a tool result: the call it answers
	Turn      *turnView
}

type callView struct {
	ID, Name string
	Args     []argView
	Raw      []seg // arguments that are not a JSON object, verbatim
	Invalid  bool  // not valid JSON at all
}

// argView is one argument of a tool call: strings are shown as text (code
// with its line breaks), anything else as JSON.
type argView struct {
	Name  string
	Value []seg
	JSON  bool
}

type turnView struct {
	Index                int
	Policy, Env          string
	Prompt, Completion   string
	Stop, Error, LogProb string
	Empty                bool
}

type toolView struct{ Name, Description, Params string }

func (s *Server) episodeView(ref runRef, key, query string, q url.Values, base string) *episodeView {
	v := &episodeView{Key: key, CloseURL: link(base, q, "ep", "")}
	e, ok := findEpisode(ref, key)
	if !ok {
		v.Err = fmt.Sprintf("Run %s has no episode %q.", ref.Key, key)
		return v
	}
	v.RawURL = "/runs/" + pathEscape(ref.Key) + "/episodes/" + key + ".json"
	v.LinkURL = "/runs/" + pathEscape(ref.Key) + "/episodes/" + key
	t, err := ref.Dir.Trajectory(e)
	if err != nil {
		v.Err = err.Error()
		return v
	}
	v.neighbours(ref, e, q, base)
	v.Task, v.Env, v.Finish, v.Reward = t.TaskID, t.Env, t.FinishReason, exact(t.Reward)
	v.Duration, v.Sandbox = ms(t.DurationMS), t.SandboxID
	if !t.StartedAt.IsZero() {
		v.Started = t.StartedAt.UTC().Format("2006-01-02 15:04:05.000 UTC")
	}
	if t.Error != "" {
		v.Error = highlight(t.Error, query)
	}
	v.Passed, v.TimedOut, v.Turns = e.Is(rundir.Passed), e.Is(rundir.TimedOut), len(t.Turns)
	v.RewardClass = row(ref, e, nil, "", "").RewardClass
	var prompt, compl, calls int
	var policyMS, envMS float64
	for _, tu := range t.Turns {
		prompt += tu.Usage.PromptTokens
		compl += tu.Usage.CompletionTokens
		calls += tu.ToolCalls
		policyMS += tu.PolicyMS
		envMS += tu.EnvMS
	}
	v.PromptTokens, v.ComplTokens, v.ToolCalls = comma(prompt), comma(compl), comma(calls)
	v.PolicyMS, v.EnvMS = ms(policyMS), ms(envMS)
	for _, k := range slices.Sorted(maps.Keys(t.Metrics)) {
		v.Metrics = append(v.Metrics, item{Label: k, Value: exact(t.Metrics[k])})
	}
	for _, k := range slices.Sorted(maps.Keys(t.Info)) {
		v.Info = append(v.Info, item{Label: k, Value: t.Info[k]})
	}
	for _, tool := range t.Tools {
		params := ""
		if len(tool.Function.Parameters) > 0 {
			var b bytes.Buffer
			if json.Indent(&b, tool.Function.Parameters, "", "  ") == nil {
				params = b.String()
			} else {
				params = string(tool.Function.Parameters)
			}
		}
		v.Tools = append(v.Tools, toolView{Name: tool.Function.Name, Description: tool.Function.Description, Params: params})
	}
	v.Messages = messages(t, query)
	return v
}

// neighbours links the episodes before and after e in its step.
func (v *episodeView) neighbours(ref runRef, e rundir.Episode, q url.Values, base string) {
	f := rundir.NewFilter(ref.ID)
	f.Step = int(e.Step)
	eps := ref.Dir.Episodes(f)
	i := slices.IndexFunc(eps, func(x rundir.Episode) bool { return x.Group == e.Group && x.Index == e.Index })
	if i > 0 {
		v.PrevURL = link(base, q, "ep", eps[i-1].Key())
	}
	if i >= 0 && i+1 < len(eps) {
		v.NextURL = link(base, q, "ep", eps[i+1].Key())
	}
}

// messages lays out the conversation: each assistant message with the
// turn that produced it (timings, tokens), its tool calls with their
// arguments, and each tool result labelled with the call it answers.
func messages(t core.Trajectory, query string) []messageView {
	turns := map[int]core.Turn{}
	var orphans []core.Turn // policy calls that produced no message
	for _, tu := range t.Turns {
		if tu.MessageIndex >= 0 && tu.MessageIndex < len(t.Messages) {
			turns[tu.MessageIndex] = tu
		} else {
			orphans = append(orphans, tu)
		}
	}
	calls := map[string]string{} // id -> function name
	var out []messageView
	for i, m := range t.Messages {
		mv := messageView{Index: i, Role: string(m.Role), Name: m.Name, Content: highlight(m.Content, query), Empty: m.Content == ""}
		for _, c := range m.ToolCalls {
			calls[c.ID] = c.Function.Name
			mv.ToolCalls = append(mv.ToolCalls, call(c, query))
		}
		if m.Role == core.RoleTool {
			name := m.Name
			if name == "" {
				name = calls[m.ToolCallID]
			}
			switch {
			case name != "" && m.ToolCallID != "":
				mv.Answers = fmt.Sprintf("%s (%s)", name, m.ToolCallID)
			case name != "":
				mv.Answers = name
			default:
				mv.Answers = m.ToolCallID
			}
		}
		if tu, ok := turns[i]; ok {
			mv.Turn = turn(tu)
		}
		out = append(out, mv)
	}
	for _, tu := range orphans {
		out = append(out, messageView{Index: -1, Role: "policy error", Turn: turn(tu), Empty: true})
	}
	return out
}

func turn(tu core.Turn) *turnView {
	v := &turnView{Index: tu.Index, Policy: ms(tu.PolicyMS), Env: ms(tu.EnvMS), Prompt: comma(tu.Usage.PromptTokens),
		Completion: comma(tu.Usage.CompletionTokens), Stop: tu.StopReason, Error: tu.Error, Empty: tu.Empty}
	if n := len(tu.LogProbs); n > 0 {
		sum := 0.0
		for _, lp := range tu.LogProbs {
			sum += float64(lp)
		}
		v.LogProb = strconv.FormatFloat(sum/float64(n), 'f', 3, 64)
	}
	return v
}

// call shows a tool call's arguments: a JSON object member by member in
// the order sent, anything else verbatim.
func call(c core.ToolCall, query string) callView {
	v := callView{ID: c.ID, Name: c.Function.Name}
	raw := c.Function.Arguments
	if !json.Valid([]byte(raw)) {
		v.Raw, v.Invalid = highlight(raw, query), true
		return v
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		v.Raw = highlight(raw, query)
		return v
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		name, _ := tok.(string)
		var val json.RawMessage
		if dec.Decode(&val) != nil {
			break
		}
		var s string
		if json.Unmarshal(val, &s) == nil {
			v.Args = append(v.Args, argView{Name: name, Value: highlight(s, query)})
			continue
		}
		var b bytes.Buffer
		if json.Indent(&b, val, "", "  ") != nil {
			b.Reset()
			b.Write(val)
		}
		v.Args = append(v.Args, argView{Name: name, Value: highlight(b.String(), query), JSON: true})
	}
	return v
}
