package serve

import (
	"context"
	"testing"

	"github.com/sashabaranov/go-openai"
)

func TestPlantedCompletion(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	chain := plant(t, m, tok, "Planted answer text")
	_, c, _ := startServer(t, m, tok, Options{MaxBatch: 4, MaxSeqLen: 256})
	resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Model: testModelName, Messages: userMsg("hi"), Temperature: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "Planted answer text" {
		t.Fatalf("content %q", got)
	}
	if resp.Choices[0].FinishReason != openai.FinishReasonStop || resp.Usage.CompletionTokens != len(chain) {
		t.Fatalf("finish %q, usage %+v, chain %d", resp.Choices[0].FinishReason, resp.Usage, len(chain))
	}
}
