package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	openai "github.com/sashabaranov/go-openai"
)

// Token ids travel outside the OpenAI schema, as vLLM sends them: the
// request carries "return_token_ids": true and the response a top-level
// "prompt_token_ids" and a "token_ids" per choice. go-openai drops unknown
// fields, so the HTTP layer under it adds the flag and reads the ids.

// tokenSlot is the context key of a request's *tokenExtras.
type tokenSlot struct{}

// tokenExtras holds the ids of one response.
type tokenExtras struct {
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		Index    int   `json:"index"`
		TokenIDs []int `json:"token_ids"`
	} `json:"choices"`
}

// askForTokenIDs adds "return_token_ids": true to a request body.
func askForTokenIDs(body []byte) ([]byte, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	req["return_token_ids"] = json.RawMessage("true")
	return json.Marshal(req)
}

// capture reads the response body for the ids and puts the same bytes back
// for go-openai.
func (x *tokenExtras) capture(resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	// A body that is not JSON is go-openai's to report.
	_ = json.Unmarshal(body, x)
	return nil
}

// attach copies the captured ids and the logprobs go-openai parsed onto
// the choices. A server that ignores return_token_ids leaves them empty;
// training then refuses the trajectory with a clear error rather than
// retokenising silently.
func (x *tokenExtras) attach(choices []Choice, raw []openai.ChatCompletionChoice) error {
	ids := map[int][]int{}
	for _, c := range x.Choices {
		ids[c.Index] = c.TokenIDs
	}
	for i := range choices {
		c := &choices[i]
		c.PromptTokenIDs = x.PromptTokenIDs
		c.TokenIDs = ids[raw[i].Index]
		if lp := raw[i].LogProbs; lp != nil {
			c.LogProbs = make([]float32, len(lp.Content))
			for j, t := range lp.Content {
				c.LogProbs[j] = float32(t.LogProb)
			}
		}
		if c.TokenIDs != nil && c.LogProbs != nil && len(c.LogProbs) != len(c.TokenIDs) {
			return fmt.Errorf("server returned %d token ids but %d logprobs for choice %d", len(c.TokenIDs), len(c.LogProbs), raw[i].Index)
		}
		c.CompletionTokens = max(len(c.TokenIDs), len(c.LogProbs))
	}
	return nil
}
