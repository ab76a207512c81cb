package fakevllm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/rlhost/rlhost/core"
)

// Agent scripts the fake model's replies: it is given each chat request
// and returns one assistant message per choice asked for (AgentRequest.N).
// The fake adds what vLLM adds: token ids, log-probs, usage and the
// finish reason. An Agent is called from many requests at once.
type Agent func(req AgentRequest) []core.Message

// AgentRequest is what an Agent is asked.
type AgentRequest struct {
	Model    string
	Messages []core.Message
	Tools    []core.ToolSpec
	N        int
	Seed     int64 // the request's seed; 0 when it sent none
}

// HasTool reports whether the request offers the function tool name.
func (r AgentRequest) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Function.Name == name {
			return true
		}
	}
	return false
}

// MBPPAgent plays an agent on rlhost's mbpp env, the way a model that can
// solve the problems behaves: it writes its solution with write_file (or
// bash, when write_file is not offered), says it is done, and after the
// env's test failure feedback writes the working solution. A share of the
// episodes (WrongFirst) first writes a solution that fails the tests.
// Each action is preceded by a little prose, as a model's reply is.
type MBPPAgent struct {
	// Solutions maps each problem's text (the first paragraph of the
	// env's first user message) to a working solution.
	Solutions map[string]string
	// WrongFirst is the share of episodes, in [0, 1], whose first
	// attempt is wrong; which ones follows from the request's seed.
	WrongFirst float64
	// ThinkTokens is about how many tokens of prose precede each action
	// (within ±50%, by the seed).
	ThinkTokens int
}

// solutionPathRE finds where the mbpp env's system prompt asks for the
// solution.
var solutionPathRE = regexp.MustCompile(`Write your solution to (\S+?)\.?\s`)

var defNameRE = regexp.MustCompile(`(?m)^def\s+(\w+)\s*\(`)

// Reply is the Agent.
func (a MBPPAgent) Reply(req AgentRequest) []core.Message {
	out := make([]core.Message, max(req.N, 1))
	for i := range out {
		out[i] = a.one(req, i)
	}
	return out
}

// one is choice i's reply.
func (a MBPPAgent) one(req AgentRequest, i int) core.Message {
	var system, problem string
	assistants := 0
	for _, m := range req.Messages {
		switch {
		case m.Role == core.RoleSystem && system == "":
			system = m.Content
		case m.Role == core.RoleUser && problem == "":
			problem = m.Content
		case m.Role == core.RoleAssistant:
			assistants++
		}
	}
	last := core.Message{}
	if len(req.Messages) > 0 {
		last = req.Messages[len(req.Messages)-1]
	}
	seed := mix(req.Seed, int64(i))
	turn := assistants
	if last.Role == core.RoleTool {
		return core.Message{Role: core.RoleAssistant, Content: a.prose(seed, turn, "The solution is written; I am done.")}
	}
	code, known := a.solution(problem)
	if !known {
		return core.Message{Role: core.RoleAssistant, Content: a.prose(seed, turn, "I do not know how to solve this problem.")}
	}
	if assistants == 0 && unit(seed) < a.WrongFirst {
		code = wrongAttempt(code)
	}
	path := "solution.py"
	if m := solutionPathRE.FindStringSubmatch(system); m != nil {
		path = m[1]
	}
	call := core.ToolCall{ID: fmt.Sprintf("call_%016x", uint64(mix(seed, int64(turn)))), Type: "function"}
	switch {
	case req.HasTool("write_file"):
		args, _ := json.Marshal(map[string]string{"path": path, "content": code})
		call.Function = core.FunctionCall{Name: "write_file", Arguments: string(args)}
	case req.HasTool("bash"):
		args, _ := json.Marshal(map[string]string{"command": "cat > " + path + " <<'RLHOST_EOF'\n" + code + "\nRLHOST_EOF"})
		call.Function = core.FunctionCall{Name: "bash", Arguments: string(args)}
	default:
		return core.Message{Role: core.RoleAssistant, Content: a.prose(seed, turn, "```python\n"+code+"\n```")}
	}
	return core.Message{Role: core.RoleAssistant, Content: a.prose(seed, turn, "I will write the solution to "+path+"."), ToolCalls: []core.ToolCall{call}}
}

// solution finds the working solution of the problem a first user
// message states.
func (a MBPPAgent) solution(first string) (string, bool) {
	text, _, _ := strings.Cut(first, "\n\n")
	if code, ok := a.Solutions[strings.TrimSpace(text)]; ok {
		return code, true
	}
	for t, code := range a.Solutions {
		if strings.HasPrefix(first, t) {
			return code, true
		}
	}
	return "", false
}

// wrongAttempt keeps the solution's function names but makes each return
// None: it imports, and its tests fail.
func wrongAttempt(code string) string {
	var b strings.Builder
	for _, m := range defNameRE.FindAllStringSubmatch(code, -1) {
		fmt.Fprintf(&b, "def %s(*args, **kwargs):\n    return None\n\n", m[1])
	}
	if b.Len() == 0 {
		return "raise SystemExit(1)\n"
	}
	return b.String()
}

// prose is about ThinkTokens tokens of reasoning ending in the sentence
// end.
var proseWords = strings.Fields("Let me think about the problem step by step and check the edge cases " +
	"such as an empty input, a single element, negative numbers and duplicates before I write the code " +
	"so that every test passes on the first run")

func (a MBPPAgent) prose(seed int64, turn int, end string) string {
	if a.ThinkTokens <= 0 {
		return end
	}
	n := a.ThinkTokens/2 + int(unit(mix(seed, int64(turn)+1000))*float64(a.ThinkTokens))
	var b strings.Builder
	for k := 0; b.Len() < n*bytesPerTok; k++ {
		b.WriteString(proseWords[k%len(proseWords)])
		b.WriteByte(' ')
	}
	b.WriteString(end)
	return b.String()
}

// mix hashes two numbers into one.
func mix(a, b int64) int64 {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], uint64(a))
	binary.LittleEndian.PutUint64(buf[8:], uint64(b))
	h := fnv.New64a()
	h.Write(buf[:])
	return int64(h.Sum64() >> 1)
}

// unit maps a hash to [0, 1).
func unit(x int64) float64 { return float64(uint64(x)>>10) / (1 << 53) }
