package training

import (
	"fmt"
	"slices"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// Retokenized says what Retokenize did to a step's trajectories.
type Retokenized struct {
	// Turns whose ids came from the chat template because the server sent
	// text only.
	Turns int
	// Mismatched turns: retokenising their text did not give back as many
	// tokens as the server says it sampled (its log-probs), or the
	// template could not render them. Their episodes are left out.
	Mismatched int
	// Dropped episodes (those holding a mismatched turn).
	Dropped int
	// First describes the first mismatch, for the log.
	First string
}

// Retokenize fills in token ids for the turns of trajs that came back
// from the server as text only (a server that ignores return_token_ids),
// by rendering the conversation with the model's chat template: the
// prompt is the messages before the turn plus the generation prompt, the
// completion the assistant message's own tokens. A turn is only kept when
// the server's log-probs say it sampled exactly that many tokens; an
// episode with a turn that fails the check is dropped and counted, never
// trained on. Turns that carry ids are left as they are: those are
// trained on exactly.
func Retokenize(tok *tokenizer.Tokenizer, trajs []core.Trajectory) ([]core.Trajectory, Retokenized) {
	var r Retokenized
	out := make([]core.Trajectory, 0, len(trajs))
	for _, t := range trajs {
		if t.Error != "" || t.FinishReason == core.FinishCancelled {
			out = append(out, t)
			continue
		}
		turns := slices.Clone(t.Turns)
		bad := false
		for i := range turns {
			tr := &turns[i]
			if tr.Error != "" || tr.MessageIndex < 0 || len(tr.TokenIDs) > 0 {
				continue
			}
			r.Turns++
			if err := retokenizeTurn(tok, t, tr); err != nil {
				r.Mismatched++
				bad = true
				if r.First == "" {
					r.First = fmt.Sprintf("step %d group %d episode %d (task %s) turn %d: %v", t.Step, t.Group, t.Index, t.TaskID, tr.Index, err)
				}
			}
		}
		if bad {
			r.Dropped++
			continue
		}
		t.Turns = turns
		out = append(out, t)
	}
	return out, r
}

// retokenizeTurn sets tr's prompt and sampled ids from the template.
func retokenizeTurn(tok *tokenizer.Tokenizer, t core.Trajectory, tr *core.Turn) error {
	m := tr.MessageIndex
	if m >= len(t.Messages) || t.Messages[m].Role != core.RoleAssistant {
		return fmt.Errorf("message %d is not the turn's assistant message", m)
	}
	prompt, _, err := chat.RenderTokens(tok, t.Messages[:m], t.Tools, true)
	if err != nil {
		return err
	}
	full, mask, err := chat.RenderTokens(tok, t.Messages[:m+1], t.Tools, false)
	if err != nil {
		return err
	}
	if len(full) < len(prompt) || !slices.Equal(full[:len(prompt)], prompt) {
		return fmt.Errorf("the template renders the conversation differently once the reply is added")
	}
	// The reply is the assistant-masked run after the prompt: its content
	// and the end-of-turn token the model sampled to stop.
	end := len(prompt)
	for end < len(full) && mask[end] {
		end++
	}
	ids := full[len(prompt):end]
	if len(ids) == 0 {
		return fmt.Errorf("the template renders the reply as no tokens")
	}
	if tr.StopReason == "length" && len(ids) > 0 {
		// A truncated reply never sampled the end-of-turn token the
		// template adds.
		ids = ids[:len(ids)-1]
	}
	claimed := len(tr.LogProbs)
	if claimed == 0 {
		return fmt.Errorf("the server returned neither token ids nor log-probs, so its tokens cannot be checked")
	}
	if len(ids) != claimed {
		return fmt.Errorf("retokenising the reply gives %d tokens, the server sampled %d", len(ids), claimed)
	}
	tr.PromptTokenIDs, tr.TokenIDs = prompt, slices.Clone(ids)
	return nil
}
