package training

import (
	"slices"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

func TestRetokenize(t *testing.T) {
	tok, err := tokenizer.LoadDir("../../examples/quickstart")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []core.Message{{Role: core.RoleSystem, Content: "Answer with Python code only."},
		{Role: core.RoleUser, Content: "Write f(x) that returns x squared."},
		{Role: core.RoleAssistant, Content: "def f(x):\n    return x * x"}}
	// What the server sampled: the reply's tokens and the end of turn.
	prompt, _, err := chat.RenderTokens(tok, msgs[:2], nil, true)
	if err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.TokenID("<|im_end|>")
	sampled := append(tok.Encode(msgs[2].Content), imEnd)
	logprobs := func(n int) []float32 { return make([]float32, n) }
	traj := func(turn core.Turn) core.Trajectory {
		turn.MessageIndex = 2
		return core.Trajectory{TaskID: "sq", Messages: msgs, Turns: []core.Turn{turn}, Reward: 1}
	}
	for _, tc := range []struct {
		name             string
		in               core.Trajectory
		kept, mismatched int
		ids              []int
		why              string
	}{
		{"ids from the server are kept as sent", traj(core.Turn{PromptTokenIDs: []int{9, 9}, TokenIDs: []int{5}, LogProbs: logprobs(1)}), 1, 0, []int{5}, ""},
		{"text only, counts agree", traj(core.Turn{LogProbs: logprobs(len(sampled)), StopReason: "stop"}), 1, 0, sampled, ""},
		{"text only, truncated", traj(core.Turn{LogProbs: logprobs(len(sampled) - 1), StopReason: "length"}), 1, 0, sampled[:len(sampled)-1], ""},
		{"text only, the server sampled more tokens", traj(core.Turn{LogProbs: logprobs(len(sampled) + 2), StopReason: "stop"}), 0, 1, nil, "the server sampled"},
		{"text only, no log-probs either", traj(core.Turn{StopReason: "stop"}), 0, 1, nil, "neither token ids nor log-probs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, r := Retokenize(tok, []core.Trajectory{tc.in})
			if len(out) != tc.kept || r.Mismatched != tc.mismatched || r.Dropped != tc.mismatched {
				t.Fatalf("kept %d, %+v; want %d kept, %d mismatched and dropped", len(out), r, tc.kept, tc.mismatched)
			}
			if tc.why != "" && !strings.Contains(r.First, tc.why) {
				t.Errorf("First = %q, want it to say %q", r.First, tc.why)
			}
			if tc.kept == 0 {
				return
			}
			tr := out[0].Turns[0]
			if !slices.Equal(tr.TokenIDs, tc.ids) {
				t.Errorf("token ids %v, want %v", tr.TokenIDs, tc.ids)
			}
			if len(tc.in.Turns[0].TokenIDs) == 0 && !slices.Equal(tr.PromptTokenIDs, prompt) {
				t.Errorf("prompt ids %v, want the template's %v", tr.PromptTokenIDs, prompt)
			}
			// The result trains: Samples accepts it.
			if _, err := Samples(out); err != nil {
				t.Errorf("Samples: %v", err)
			}
		})
	}
}
