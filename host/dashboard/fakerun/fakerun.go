// Package fakerun writes run directories shaped like the ones `rlhost run`
// writes, through the same output.Writer, for the dashboard's tests and
// benchmarks: multi-turn episodes with tool calls and sandbox output,
// token ids and log-probs, and per-step metrics with training, timing and
// async figures. It deliberately runs nothing: the contents are made up,
// deterministic for a seed.
package fakerun

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/output"
)

// Options shape a run.
type Options struct {
	RunID     string
	Steps     int
	Groups    int // tasks per step
	GroupSize int // episodes per task
	Turns     int // tool turns per episode before the final answer
	// ToolOutput is the bytes of sandbox output per tool result; TokenIDs
	// the completion tokens recorded per turn (the prompt's are 4x).
	ToolOutput int
	TokenIDs   int
	Seed       uint64
	// Hostile makes episode 0 of every step's first group answer with
	// markup and script, as a model might.
	Hostile bool
	// Start is the first step written: a run continued by a second call.
	Start int
}

// HostileText is what a hostile episode's assistant says and its tool
// prints.
const HostileText = `<script>document.title="pwned"</script><img src=x onerror="document.title='pwned'"><b>bold?</b>`

// Tasks are the task ids episodes cycle through.
var Tasks = []string{"sort_list", "max_subarray", "fizzbuzz", "reverse_words", "parse_csv", "lru_cache"}

// Write appends opt.Steps steps to the run directory dir (created when
// missing), with summary.json and job.json, and returns the metrics
// written.
func Write(dir string, opt Options) ([]core.StepMetrics, error) {
	w, err := output.Open(dir)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	rng := rand.New(rand.NewPCG(opt.Seed, 7))
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sum := output.Summary{RunID: opt.RunID, ConfigPath: "/jobs/fake.hcl", TotalSteps: opt.Start + opt.Steps, StartedAt: start}
	if err := w.WriteJob(output.Job{RunID: opt.RunID, ConfigPath: "/jobs/fake.hcl", Vars: map[string]string{"seed": fmt.Sprint(opt.Seed)},
		Source: "run {\n  steps = " + fmt.Sprint(opt.Start+opt.Steps) + "\n}\n", Steps: opt.Start + opt.Steps,
		BatchSize: opt.Groups, GroupSize: opt.GroupSize, Concurrency: 8, MaxTurns: opt.Turns + 1, Seed: int64(opt.Seed)}); err != nil {
		return nil, err
	}
	var out []core.StepMetrics
	for step := opt.Start; step < opt.Start+opt.Steps; step++ {
		var trajs []core.Trajectory
		for g := range opt.Groups {
			task := Tasks[(step*opt.Groups+g)%len(Tasks)]
			for i := range opt.GroupSize {
				t := Episode(rng, opt, step, g, i, task, start.Add(time.Duration(step)*time.Minute))
				if err := w.WriteTrajectory(t); err != nil {
					return nil, err
				}
				trajs = append(trajs, t)
			}
		}
		m := StepMetrics(opt.RunID, step, trajs)
		if err := w.WriteStep(m); err != nil {
			return nil, err
		}
		sum.AddStep(m)
		if err := w.WriteSummary(sum); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sum.EndedAt = start.Add(time.Duration(opt.Start+opt.Steps) * time.Minute)
	return out, w.WriteSummary(sum)
}

// Episode makes one episode: Turns rounds of a tool call and its result,
// then an answer, with a reward that grows with the step.
func Episode(rng *rand.Rand, opt Options, step, group, index int, task string, at time.Time) core.Trajectory {
	t := core.Trajectory{RunID: opt.RunID, Step: step, Group: group, Index: index, TaskID: task, Env: "coding",
		StartedAt: at, Metrics: map[string]float64{}, Info: map[string]string{"isolation": "namespaces"},
		SandboxID: fmt.Sprintf("%016x", rng.Uint64())}
	t.Tools = []core.ToolSpec{{Type: "function", Function: core.FunctionSpec{Name: "bash", Description: "Run a shell command in the sandbox.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}`)}}}
	t.Messages = []core.Message{
		{Role: core.RoleSystem, Content: "You are a careful programmer. Use the bash tool to test your code, then answer with the final Python code only."},
		{Role: core.RoleUser, Content: fmt.Sprintf("Write %s(xs) in Python. %s", task, words(rng, 60))},
	}
	hostile := opt.Hostile && group == 0 && index == 0
	calls := 0
	for turn := range opt.Turns + 1 {
		tr := core.Turn{Index: turn, PolicyMS: 20 + 80*rng.Float64(), MessageIndex: len(t.Messages), StopReason: "stop"}
		prompt := 4 * opt.TokenIDs * (turn + 1)
		tr.Usage = core.Usage{PromptTokens: prompt, CompletionTokens: opt.TokenIDs, TotalTokens: prompt + opt.TokenIDs}
		tr.PromptTokenIDs = tokens(rng, prompt)
		tr.TokenIDs = tokens(rng, opt.TokenIDs)
		tr.LogProbs = make([]float32, opt.TokenIDs)
		for k := range tr.LogProbs {
			tr.LogProbs[k] = -float32(rng.ExpFloat64())
		}
		if turn < opt.Turns {
			cmd := fmt.Sprintf("cat > sol.py <<'EOF'\ndef %s(xs):\n    # %s\n    return sorted(xs)\nEOF\npython3 -m pytest -q test_sol.py", task, words(rng, 8))
			args, _ := json.Marshal(map[string]string{"cmd": cmd})
			id := fmt.Sprintf("call_%d_%d", turn, rng.IntN(1e6))
			msg := core.Message{Role: core.RoleAssistant, Content: "Let me test it. " + words(rng, 12),
				ToolCalls: []core.ToolCall{{ID: id, Type: "function", Function: core.FunctionCall{Name: "bash", Arguments: string(args)}}}}
			result := core.Message{Role: core.RoleTool, ToolCallID: id, Name: "bash", Content: sandboxOutput(rng, opt.ToolOutput)}
			if hostile {
				msg.Content, result.Content = HostileText, "stdout:\n"+HostileText+"\nexit status 0"
			}
			t.Messages = append(t.Messages, msg, result)
			tr.ToolCalls, tr.EnvMS = 1, 50+400*rng.Float64()
			tr.StopReason = "tool_calls"
			calls++
		} else {
			answer := fmt.Sprintf("def %s(xs):\n    return sorted(xs)  # %s\n", task, words(rng, 6))
			if hostile {
				answer = HostileText
			}
			t.Messages = append(t.Messages, core.Message{Role: core.RoleAssistant, Content: answer})
			tr.EnvMS = 100 + 300*rng.Float64()
		}
		t.Turns = append(t.Turns, tr)
	}
	// The reward climbs with the step, with noise, so curves look trained.
	p := min(0.9, 0.2+0.02*float64(step))
	passed := 0
	for range 6 {
		if rng.Float64() < p {
			passed++
		}
	}
	t.Reward = float64(passed) / 6
	t.Metrics["tests_passed"], t.Metrics["tests_total"] = float64(passed), 6
	output.SandboxUse{Execs: float64(calls + 1)}.Put(t.Metrics)
	t.FinishReason = core.FinishDone
	switch r := rng.IntN(40); {
	case r == 0:
		t.FinishReason, t.Error, t.Reward = core.FinishError, "env step: sandbox exec: connection reset", 0
	case r == 1:
		t.FinishReason, t.Reward = core.FinishTimeout, 0
		t.Metrics[output.SandboxTimeouts] = 1
	case r == 2:
		t.FinishReason = core.FinishMaxTurns
	}
	t.DurationMS = 300 + 2000*rng.Float64()
	return t
}

// StepMetrics aggregates a step as the runner does and adds the figures a
// training run and an async run add.
func StepMetrics(runID string, step int, trajs []core.Trajectory) core.StepMetrics {
	m := output.Aggregate(runID, step, trajs)
	x := float64(step)
	output.Update{Loss: 0.5 / (1 + 0.1*x), GradNorm: 1 + 0.5/(1+x), LR: 1e-3, Seconds: 1.5}.Put(m.Extra)
	output.RolloutTimes{Rollout: 3 + 0.01*x}.Put(m.Extra)
	output.Ages{Mean: 0.5 + 0.1*float64(step%3), Max: 1}.Put(m.Extra)
	m.DurationMS = 4500 + 10*x
	return m
}

var vocabulary = strings.Fields("the list of values is sorted in place and returned when empty raise error test passes fails " +
	"python function input output loop index element count sum maximum minimum window buffer parse line field quote")

func words(rng *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = vocabulary[rng.IntN(len(vocabulary))]
	}
	return strings.Join(w, " ")
}

func tokens(rng *rand.Rand, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(151000)
	}
	return ids
}

func sandboxOutput(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.WriteString("exit status 1\nstdout:\n")
	for b.Len() < n {
		fmt.Fprintf(&b, "test_sol.py::test_%d %s\n", rng.IntN(100), words(rng, 6))
	}
	b.WriteString("stderr:\nAssertionError: expected [1, 2, 3]\n")
	return b.String()
}
