package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/generate"
	"github.com/rlhost/rlhost/trainer/model"
)

// rawResponse is a non-streamed response with the vLLM extensions.
type rawResponse struct {
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content   *string         `json:"content"`
			ToolCalls []core.ToolCall `json:"tool_calls"`
		} `json:"message"`
		Logprobs *struct {
			Content []struct {
				Token       string  `json:"token"`
				Logprob     float64 `json:"logprob"`
				Bytes       []int   `json:"bytes"`
				TopLogprobs []struct {
					Token   string  `json:"token"`
					Logprob float64 `json:"logprob"`
				} `json:"top_logprobs"`
			} `json:"content"`
		} `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
		TokenIDs     []int  `json:"token_ids"`
	} `json:"choices"`
	Usage             core.Usage `json:"usage"`
	PromptTokenIDs    []int      `json:"prompt_token_ids"`
	SystemFingerprint string     `json:"system_fingerprint"`
}

// post sends body to /chat/completions and returns the status and body.
func post(t *testing.T, ctx context.Context, base string, body any) (int, []byte) {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func postOK(t *testing.T, base string, body map[string]any) rawResponse {
	t.Helper()
	status, out := post(t, context.Background(), base, body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, out)
	}
	var r rawResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return r
}

func req(extra map[string]any) map[string]any {
	r := map[string]any{"model": testModelName, "messages": []map[string]any{{"role": "user", "content": "Say something."}}}
	for k, v := range extra {
		r[k] = v
	}
	return r
}

func TestPlantedOutputsThroughGoOpenAI(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	const text = "Planted answer text"
	chain := plant(t, m, tok, text)
	_, c, _ := startServer(t, m, tok, Options{MaxBatch: 4, MaxSeqLen: 256})
	ctx := context.Background()
	// until is how many tokens are sampled before the text holds stop.
	until := func(stop string) int {
		for k := range chain {
			if strings.Contains(tok.Decode(chain[:k+1]), stop) {
				return k + 1
			}
		}
		t.Fatalf("%q not in the planted text", stop)
		return 0
	}
	cases := []struct {
		name      string
		req       openai.ChatCompletionRequest
		content   string
		finish    openai.FinishReason
		tokens    int // completion tokens per choice
		nChoices  int
		wantProbs bool
	}{
		{"plain", openai.ChatCompletionRequest{}, text, openai.FinishReasonStop, len(chain), 1, false},
		{"stop string cut from content", openai.ChatCompletionRequest{Stop: []string{" answer"}}, "Planted", openai.FinishReasonStop, until(" answer"), 1, false},
		{"earliest of two stops", openai.ChatCompletionRequest{Stop: []string{"text", "ed an"}}, "Plant", openai.FinishReasonStop, until("ed an"), 1, false},
		{"max_tokens", openai.ChatCompletionRequest{MaxTokens: 2}, tok.Decode(chain[:2]), openai.FinishReasonLength, 2, 1, false},
		{"max_completion_tokens", openai.ChatCompletionRequest{MaxCompletionTokens: 1}, tok.Decode(chain[:1]), openai.FinishReasonLength, 1, 1, false},
		{"n=3 with logprobs", openai.ChatCompletionRequest{N: 3, LogProbs: true, TopLogProbs: 2}, text, openai.FinishReasonStop, len(chain), 3, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req
			r.Model, r.Messages = testModelName, userMsg("hi")
			resp, err := c.CreateChatCompletion(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Choices) != tc.nChoices {
				t.Fatalf("%d choices, want %d", len(resp.Choices), tc.nChoices)
			}
			for i, ch := range resp.Choices {
				if ch.Index != i || ch.Message.Content != tc.content || ch.FinishReason != tc.finish {
					t.Fatalf("choice %d: index %d content %q finish %q, want %q %q", i, ch.Index, ch.Message.Content, ch.FinishReason, tc.content, tc.finish)
				}
				if tc.wantProbs {
					lp := ch.LogProbs.Content
					if len(lp) != tc.tokens || lp[0].Token != tok.Decode(chain[:1]) || len(lp[0].TopLogProbs) != 2 {
						t.Fatalf("logprobs %+v", lp)
					}
					// The planted successor has probability ~1.
					if lp[0].LogProb > 0 || lp[0].LogProb < -1e-3 || lp[0].TopLogProbs[0].Token != lp[0].Token {
						t.Fatalf("planted token logprob %g, top %+v", lp[0].LogProb, lp[0].TopLogProbs)
					}
				} else if ch.LogProbs != nil {
					t.Fatalf("logprobs returned unasked: %+v", ch.LogProbs)
				}
			}
			prompt, _, err := chat.RenderTokens(tok, []core.Message{{Role: core.RoleUser, Content: "hi"}}, nil, true)
			if err != nil {
				t.Fatal(err)
			}
			want := openai.Usage{PromptTokens: len(prompt), CompletionTokens: tc.tokens * tc.nChoices, TotalTokens: len(prompt) + tc.tokens*tc.nChoices}
			if resp.Usage.PromptTokens != want.PromptTokens || resp.Usage.CompletionTokens != want.CompletionTokens || resp.Usage.TotalTokens != want.TotalTokens {
				t.Fatalf("usage %+v, want %+v", resp.Usage, want)
			}
		})
	}
}

func TestToolCalls(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	const planted = `Sure<tool_call>{"name":"add","arguments":{"x":3}}</tool_call>`
	plant(t, m, tok, planted)
	_, c, base := startServer(t, m, tok, Options{MaxBatch: 4, MaxSeqLen: 512})
	tools := []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
		Name: "add", Description: "adds", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"}}}`)}}}
	// A multi-turn conversation: an earlier call and its result.
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You add."},
		{Role: openai.ChatMessageRoleUser, Content: "add 1"},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: "c0", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "add", Arguments: `{"x":1}`}}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "c0", Content: "1"},
		{Role: openai.ChatMessageRoleUser, Content: "now 3"},
	}
	ctx := context.Background()
	resp, err := c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: testModelName, Messages: msgs, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.FinishReason != openai.FinishReasonToolCalls || ch.Message.Content != "Sure" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("choice %+v", ch)
	}
	call := ch.Message.ToolCalls[0]
	if call.Function.Name != "add" || call.Function.Arguments != `{"x":3}` || call.Type != openai.ToolTypeFunction || call.ID == "" {
		t.Fatalf("call %+v", call)
	}
	// Streamed, the call arrives whole in the last delta.
	st, err := c.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: testModelName, Messages: msgs, Tools: tools, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	var content strings.Builder
	var calls []openai.ToolCall
	var finish openai.FinishReason
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunk.Choices {
			content.WriteString(c.Delta.Content)
			calls = append(calls, c.Delta.ToolCalls...)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	st.Close()
	if content.String() != "Sure" || len(calls) != 1 || calls[0].Function.Arguments != `{"x":3}` || finish != openai.FinishReasonToolCalls {
		t.Fatalf("stream: content %q calls %+v finish %q", content.String(), calls, finish)
	}
	// tool_choice "none": no tools in the prompt, the text comes back as is.
	r := postOK(t, base, req(map[string]any{"tools": tools, "tool_choice": "none"}))
	if got := *r.Choices[0].Message.Content; got != planted || r.Choices[0].FinishReason != "stop" || len(r.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("tool_choice none: %q %q %+v", got, r.Choices[0].FinishReason, r.Choices[0].Message.ToolCalls)
	}
	// The tools are rendered into the prompt only when offered.
	with := postOK(t, base, req(map[string]any{"tools": tools, "return_token_ids": true}))
	if len(with.PromptTokenIDs) <= len(postOK(t, base, req(map[string]any{"return_token_ids": true})).PromptTokenIDs) {
		t.Fatal("tools did not lengthen the prompt")
	}
}

// return_token_ids gives the exact sampled ids, which decode to the text;
// logprobs are log softmax(logits/T) of a full forward over the same ids.
func TestTokenIDsAndLogprobsMatchFullForward(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	s, _, base := startServer(t, m, tok, Options{MaxBatch: 4, MaxSeqLen: 256})
	const temp = 0.8
	r := postOK(t, base, req(map[string]any{"return_token_ids": true, "logprobs": true, "top_logprobs": 3,
		"temperature": temp, "seed": 11, "max_tokens": 12, "n": 2}))
	want, _, err := chat.RenderTokens(tok, []core.Message{{Role: core.RoleUser, Content: "Say something."}}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.PromptTokenIDs, want) {
		t.Fatalf("prompt_token_ids %v, want %v", r.PromptTokenIDs, want)
	}
	if slices.Equal(r.Choices[0].TokenIDs, r.Choices[1].TokenIDs) {
		t.Fatal("two choices sampled identical tokens")
	}
	for _, ch := range r.Choices {
		ids := ch.TokenIDs
		if ch.FinishReason == "stop" { // the stop token is not in the text
			ids = ids[:len(ids)-1]
		}
		// Random tokens may split a character: JSON carries each byte of
		// invalid UTF-8 as U+FFFD.
		if got := jsonText(tok.Decode(ids)); got != *ch.Message.Content {
			t.Fatalf("token ids decode to %q, content %q", got, *ch.Message.Content)
		}
		if len(ch.Logprobs.Content) != len(ch.TokenIDs) {
			t.Fatalf("%d logprobs for %d tokens", len(ch.Logprobs.Content), len(ch.TokenIDs))
		}
		ref := fullLogProbs(t, s, m, r.PromptTokenIDs, ch.TokenIDs, temp)
		for i, lp := range ch.Logprobs.Content {
			if math.Abs(lp.Logprob-float64(ref[i])) > 1e-3 {
				t.Fatalf("token %d: logprob %g, full forward %g", i, lp.Logprob, ref[i])
			}
			if lp.Token != jsonText(tok.Decode(ch.TokenIDs[i:i+1])) || len(lp.TopLogprobs) != 3 {
				t.Fatalf("token %d: %+v", i, lp)
			}
			top := lp.TopLogprobs
			if top[0].Logprob < top[1].Logprob || top[1].Logprob < top[2].Logprob || lp.Logprob > top[0].Logprob+1e-6 {
				t.Fatalf("token %d: top_logprobs not ordered or below the sampled token: %+v", i, lp)
			}
		}
	}
}

// fullLogProbs runs the model over prompt+completion without a cache (inside
// Update, so the engine is not using the backend) and returns the log-probs
// of the completion tokens at temperature temp.
func fullLogProbs(t *testing.T, s *Server, m *model.Model, prompt, completion []int, temp float32) []float32 {
	t.Helper()
	var out []float32
	err := s.Update(context.Background(), func() error {
		seq := append(slices.Clone(prompt), completion...)
		n := len(seq)
		run, err := m.NewRun(1, n)
		if err != nil {
			return err
		}
		ids, tgt := make([]int32, n), make([]int32, n)
		for i, v := range seq {
			ids[i] = int32(v)
			tgt[i] = -1
			if i+1 < n {
				tgt[i] = int32(seq[i+1])
			}
		}
		if err := run.Forward(ids, []int{n}); err != nil {
			return err
		}
		lp := make([]float32, n)
		if err := run.LogProbs(tgt, temp, lp); err != nil {
			return err
		}
		out = lp[len(prompt)-1 : n-1]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A seeded request samples the same tokens alone, next to other traffic,
// and as choice 0 of an n>1 request (whose prompt is prefilled once and
// copied); greedy output equals trainer/generate's.
func TestBatchedEqualsUnbatched(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	s, _, base := startServer(t, m, tok, Options{MaxBatch: 8, MaxSeqLen: 256})
	body := req(map[string]any{"seed": 3, "max_tokens": 10, "return_token_ids": true, "logprobs": true})
	alone := postOK(t, base, body)

	var wg sync.WaitGroup
	var busy rawResponse
	for i := range 5 {
		wg.Go(func() {
			postOK(t, base, req(map[string]any{"max_tokens": 14, "n": 1,
				"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("other traffic %d %s", i, strings.Repeat("x", i*7))}}}))
		})
	}
	wg.Go(func() { busy = postOK(t, base, body) })
	wg.Wait()
	nBody := req(map[string]any{"seed": 3, "max_tokens": 10, "return_token_ids": true, "logprobs": true, "n": 3})
	group := postOK(t, base, nBody)
	for name, r := range map[string]rawResponse{"with other traffic": busy, "as choice 0 of n=3": group} {
		if !slices.Equal(r.Choices[0].TokenIDs, alone.Choices[0].TokenIDs) {
			t.Fatalf("%s: tokens %v, alone %v", name, r.Choices[0].TokenIDs, alone.Choices[0].TokenIDs)
		}
		for i, lp := range r.Choices[0].Logprobs.Content {
			if lp.Logprob != alone.Choices[0].Logprobs.Content[i].Logprob {
				t.Fatalf("%s: token %d logprob %v, alone %v", name, i, lp.Logprob, alone.Choices[0].Logprobs.Content[i].Logprob)
			}
		}
	}

	// Greedy (temperature 0) through the server equals generate.Generate,
	// for several prompts in one batch.
	prompts := []string{"a", "bb bb", "a longer prompt than the others"}
	got := make([]rawResponse, len(prompts))
	for i, p := range prompts {
		wg.Go(func() {
			got[i] = postOK(t, base, req(map[string]any{"temperature": 0, "max_tokens": 8, "return_token_ids": true,
				"messages": []map[string]any{{"role": "user", "content": p}}}))
		})
	}
	wg.Wait()
	var ref []generate.Result
	err := s.Update(context.Background(), func() error {
		var ps [][]int
		for _, g := range got {
			ps = append(ps, g.PromptTokenIDs)
		}
		var err error
		ref, err = generate.Generate(context.Background(), m, ps, generate.Options{MaxTokens: 8, StopIDs: []int{tok.EOS()}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if !slices.Equal(got[i].Choices[0].TokenIDs, ref[i].Tokens) {
			t.Fatalf("prompt %d: server greedy %v, generate %v", i, got[i].Choices[0].TokenIDs, ref[i].Tokens)
		}
	}
	if slices.Equal(ref[0].Tokens, ref[1].Tokens) {
		t.Fatal("different prompts gave the same greedy output: the check is vacuous")
	}
}

// Sampling with a seed gives the same tokens and log-probs, bit for bit,
// whether a request runs alone (batch 1) or as one of 16 at once, whose
// prompts differ in length and whose sequences end at different times.
func TestSeededSamplingIndependentOfLoad(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	_, _, base := startServer(t, m, tok, Options{MaxBatch: 16, MaxSeqLen: 256, NoPrefixCache: true})
	body := func(i int) map[string]any {
		return req(map[string]any{"seed": 40 + i, "max_tokens": 6 + i%5, "logprobs": true, "return_token_ids": true,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("request %d %s", i, strings.Repeat("y", 3*i))}}})
	}
	alone := make([]rawResponse, 16)
	for i := range alone {
		alone[i] = postOK(t, base, body(i))
	}
	together := make([]rawResponse, 16)
	var wg sync.WaitGroup
	for i := range together {
		wg.Go(func() { together[i] = postOK(t, base, body(i)) })
	}
	wg.Wait()
	for i := range alone {
		a, b := alone[i].Choices[0], together[i].Choices[0]
		if !slices.Equal(a.TokenIDs, b.TokenIDs) {
			t.Fatalf("request %d: alone %v, among 16 %v", i, a.TokenIDs, b.TokenIDs)
		}
		for k := range a.Logprobs.Content {
			if a.Logprobs.Content[k].Logprob != b.Logprobs.Content[k].Logprob {
				t.Fatalf("request %d token %d: log-prob alone %v, among 16 %v", i, k, a.Logprobs.Content[k].Logprob, b.Logprobs.Content[k].Logprob)
			}
		}
	}
	if slices.Equal(alone[0].Choices[0].TokenIDs, alone[1].Choices[0].TokenIDs) {
		t.Fatal("two requests sampled the same tokens: the comparison is weak")
	}
}

func TestStreamingMatchesNonStreaming(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	_, c, _ := startServer(t, m, tok, Options{MaxBatch: 4, MaxSeqLen: 256})
	seed := 21
	r := openai.ChatCompletionRequest{Model: testModelName, Messages: userMsg("stream please"), MaxTokens: 16, Seed: &seed, N: 2, LogProbs: true}
	ctx := context.Background()
	whole, err := c.CreateChatCompletion(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	r.Stream, r.StreamOptions = true, &openai.StreamOptions{IncludeUsage: true}
	st, err := c.CreateChatCompletionStream(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	content := make([]strings.Builder, 2)
	finish := make([]openai.FinishReason, 2)
	tokens := make([]int, 2)
	var usage *openai.Usage
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if chunk.Usage != nil {
			usage = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			content[ch.Index].WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finish[ch.Index] = ch.FinishReason
			}
			if ch.Logprobs != nil {
				tokens[ch.Index] += len(ch.Logprobs.Content)
			}
		}
	}
	for i, ch := range whole.Choices {
		if content[i].String() != ch.Message.Content || finish[i] != ch.FinishReason || tokens[i] != len(ch.LogProbs.Content) {
			t.Fatalf("choice %d: stream %q %q %d tokens, whole %q %q %d", i, content[i].String(), finish[i], tokens[i],
				ch.Message.Content, ch.FinishReason, len(ch.LogProbs.Content))
		}
	}
	if usage == nil || *usage != whole.Usage {
		t.Fatalf("stream usage %+v, whole %+v", usage, whole.Usage)
	}
}

// A stop string is held back while it is still forming, so no streamed
// delta ever shows part of it.
func TestStreamHoldsBackStopPrefix(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	plant(t, m, tok, "alpha beta gamma delta")
	_, c, _ := startServer(t, m, tok, Options{MaxBatch: 2, MaxSeqLen: 256})
	st, err := c.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model: testModelName, Messages: userMsg("x"), Stream: true, Stop: []string{" gamma d"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var got strings.Builder
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chunk.Choices {
			got.WriteString(ch.Delta.Content)
		}
	}
	if got.String() != "alpha beta" {
		t.Fatalf("streamed %q, want %q", got.String(), "alpha beta")
	}
}

func TestConcurrentRequests(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	s, c, _ := startServer(t, m, tok, Options{MaxBatch: 4, MaxSeqLen: 256})
	const N = 12
	errs := make(chan error, N)
	var wg sync.WaitGroup
	for i := range N {
		wg.Go(func() {
			n := 1 + i%3
			resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
				Model: testModelName, Messages: userMsg(fmt.Sprintf("request %d", i)), MaxTokens: 5 + i, N: n})
			if err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
				return
			}
			sum := resp.Usage.CompletionTokens
			if len(resp.Choices) != n || sum < n || sum > n*(5+i) {
				errs <- fmt.Errorf("request %d: %d choices, %d tokens", i, len(resp.Choices), sum)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if r := s.Running(); r != 0 {
		t.Fatalf("%d sequences still hold slots", r)
	}
}

// A client that goes away mid-generation frees its slots: afterwards a
// request needing every slot still runs.
func TestCancelledRequestFreesSlots(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	s, c, _ := startServer(t, m, tok, Options{MaxBatch: 3, MaxSeqLen: 512})
	for _, stream := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		seed := 8 // a seed whose samples do not end early
		r := openai.ChatCompletionRequest{Model: testModelName, Messages: userMsg("long"), MaxTokens: 450, N: 2, Stream: stream, Seed: &seed}
		if stream {
			st, err := c.CreateChatCompletionStream(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			for range 4 {
				if _, err := st.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			st.Close()
		} else {
			go func() { _, err := c.CreateChatCompletion(ctx, r); done <- err }()
			for s.Running() == 0 {
				waitABit()
			}
			cancel()
			if err := <-done; err == nil {
				t.Fatal("cancelled request succeeded")
			}
		}
		for s.Running() != 0 {
			waitABit()
		}
		resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model: testModelName, Messages: userMsg("after"), MaxTokens: 3, N: 3})
		if err != nil || len(resp.Choices) != 3 {
			t.Fatalf("after cancel: %v %+v", err, resp)
		}
	}
	s.eng.mu.Lock()
	q := len(s.eng.queue)
	s.eng.mu.Unlock()
	if q != 0 || s.Running() != 0 {
		t.Fatalf("engine holds %d queued jobs and %d sequences", q, s.Running())
	}
}

// A request without "model" (or with an empty one) gets the served model,
// as on vLLM.
func TestRequestWithoutModel(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	_, _, base := startServer(t, m, tok, Options{MaxBatch: 2, MaxSeqLen: 128})
	for _, body := range []map[string]any{
		{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 3},
		{"model": "", "messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 3},
	} {
		var r struct {
			Model   string `json:"model"`
			Choices []any  `json:"choices"`
		}
		status, out := post(t, context.Background(), base, body)
		if err := json.Unmarshal(out, &r); status != http.StatusOK || err != nil || r.Model != testModelName || len(r.Choices) != 1 {
			t.Fatalf("%v: status %d, %s", body, status, out)
		}
	}
}

func TestMalformedRequests(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	_, c, base := startServer(t, m, tok, Options{MaxBatch: 2, MaxSeqLen: 128, ReturnTokenIDs: true})
	ctx := context.Background()
	cases := []struct {
		name   string
		body   any
		status int
		msg    string
		param  string // the field named in the error; "" for null
	}{
		{"not JSON", `{"model": `, 400, "not valid JSON", ""},
		{"wrong type", `{"model": "rlhost-test", "messages": "hi"}`, 400, "not valid JSON", ""},
		{"unknown model", req(map[string]any{"model": "gpt-4"}), 404, "does not exist", "model"},
		{"no messages", req(map[string]any{"messages": []any{}}), 400, "at least one message", "messages"},
		{"bad role", req(map[string]any{"messages": []map[string]any{{"role": "robot", "content": "x"}}}), 400, "role", "messages"},
		{"image part", req(map[string]any{"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "image_url"}}}}}), 400, "only text parts", "messages"},
		{"n too large", req(map[string]any{"n": 3}), 400, "n=3", "n"},
		{"negative temperature", req(map[string]any{"temperature": -1}), 400, "temperature", "temperature"},
		{"top_p zero", req(map[string]any{"top_p": 0}), 400, "top_p", "top_p"},
		{"top_k", req(map[string]any{"top_k": -5}), 400, "top_k", "top_k"},
		{"max_tokens zero", req(map[string]any{"max_tokens": 0}), 400, "max_tokens", "max_tokens"},
		{"max_completion_tokens zero", req(map[string]any{"max_completion_tokens": 0}), 400, "max_completion_tokens", "max_completion_tokens"},
		{"stop number", req(map[string]any{"stop": 5}), 400, "stop", "stop"},
		{"bad tool", req(map[string]any{"tools": []map[string]any{{"type": "retrieval"}}}), 400, "tools[0]", "tools"},
		{"tool_choice required", req(map[string]any{"tool_choice": "required"}), 400, "tool_choice", "tool_choice"},
		{"top_logprobs without logprobs", req(map[string]any{"top_logprobs": 2}), 400, "logprobs", "top_logprobs"},
		{"context overflow", req(map[string]any{"max_tokens": 120}), 400, "maximum context length", "messages"},
		{"long prompt", req(map[string]any{"messages": []map[string]any{{"role": "user", "content": strings.Repeat("word ", 200)}}}), 400, "maximum context length", "messages"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, out := post(t, ctx, base, tc.body)
			var e struct {
				Error apiError `json:"error"`
			}
			if err := json.Unmarshal(out, &e); err != nil {
				t.Fatalf("error body %s: %v", out, err)
			}
			if status != tc.status || !strings.Contains(e.Error.Message, tc.msg) || e.Error.Type == "" {
				t.Fatalf("status %d, error %+v; want %d containing %q", status, e.Error, tc.status, tc.msg)
			}
			if got := e.Error.Param; (tc.param == "") != (got == nil) || got != nil && *got != tc.param {
				t.Fatalf("param %v, want %q", got, tc.param)
			}
		})
	}
	// go-openai maps the overflow to an APIError the host classifies.
	_, err := c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: testModelName, Messages: userMsg("x"), MaxTokens: 500})
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 400 || !strings.Contains(apiErr.Message, "maximum context length") {
		t.Fatalf("overflow via go-openai: %v", err)
	}
	// The server is still up.
	resp, err := http.Get(strings.TrimSuffix(base, "/v1") + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", err, resp)
	}
	resp.Body.Close()
	models, err := c.ListModels(ctx)
	if err != nil || len(models.Models) != 1 || models.Models[0].ID != testModelName {
		t.Fatalf("models: %v %+v", err, models)
	}
	if _, err := c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: testModelName, Messages: userMsg("x"), MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	// This server returns token ids without being asked.
	if plain := postOK(t, base, req(map[string]any{"max_tokens": 2, "seed": 1})); len(plain.Choices[0].TokenIDs) != 2 || len(plain.PromptTokenIDs) == 0 {
		t.Fatalf("ReturnTokenIDs option: %+v", plain)
	}
}

// Update waits for generation in flight, holds requests that arrive
// meanwhile, and those then see the new weights.
func TestUpdateIsAtomic(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	s, _, base := startServer(t, m, tok, Options{MaxBatch: 4, MaxSeqLen: 256})
	const text = "new weights speak"
	var before rawResponse
	var beforeDone sync.WaitGroup
	finished := make(chan struct{})
	beforeDone.Go(func() {
		defer close(finished)
		before = postOK(t, base, req(map[string]any{"max_tokens": 60, "n": 2, "seed": 2}))
	})
	// Update while it generates (or, on a starved machine, after).
	for running := false; !running; {
		select {
		case <-finished:
			running = true
		default:
			running = s.Running() > 0
			waitABit()
		}
	}
	var during rawResponse
	var duringDone sync.WaitGroup
	var duringFinished bool
	err := s.Update(context.Background(), func() error {
		// The request in flight has finished generating (its response may
		// still be on the wire).
		if s.Running() != 0 {
			return fmt.Errorf("update runs with %d sequences in flight", s.Running())
		}
		duringDone.Go(func() { during = postOK(t, base, req(map[string]any{"max_tokens": 30})) })
		for {
			s.eng.mu.Lock()
			q := len(s.eng.queue)
			s.eng.mu.Unlock()
			if q == 1 {
				break
			}
			waitABit()
		}
		duringFinished = during.Choices != nil
		plant(t, m, tok, text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	beforeDone.Wait()
	duringDone.Wait()
	if duringFinished {
		t.Fatal("a request sent during Update finished before fn returned")
	}
	for _, ch := range before.Choices {
		if ch.FinishReason == "length" && len(tok.Encode(*ch.Message.Content)) == 0 {
			t.Fatalf("request in flight was cut short: %+v", ch)
		}
	}
	if *during.Choices[0].Message.Content != text || *before.Choices[0].Message.Content == text {
		t.Fatalf("before: %q, during: %q", *before.Choices[0].Message.Content, *during.Choices[0].Message.Content)
	}
	if before.SystemFingerprint != "rlhost-weights-0" || during.SystemFingerprint != "rlhost-weights-1" || s.WeightsVersion() != 1 {
		t.Fatalf("fingerprints %q %q, version %d", before.SystemFingerprint, during.SystemFingerprint, s.WeightsVersion())
	}
	// An Update whose context ends before the engine is idle does not run fn.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := s.Update(ctx, func() error { ran = true; return nil }); err == nil && !ran {
		t.Fatal("cancelled update returned nil without running")
	}
	postOK(t, base, req(map[string]any{"max_tokens": 2}))
}

// A conversation in which a turn shares a token with the header before it
// (an earlier reply that starts with a blank line, as a model may write
// one) is served: the prompt is the rendered text tokenized as a whole.
func TestServesReplyStartingWithBlankLine(t *testing.T) {
	tok := qwenTokenizer(t)
	m := testModel(t, tok)
	_, _, base := startServer(t, m, tok, Options{MaxBatch: 2, MaxSeqLen: 256})
	msgs := []core.Message{{Role: core.RoleUser, Content: "hi"}, {Role: core.RoleAssistant, Content: "\n\nHello"}, {Role: core.RoleUser, Content: "again"}}
	if _, _, err := chat.RenderTokens(tok, msgs, nil, true); err == nil {
		t.Fatal("the conversation no longer shares a token across a turn boundary; the test needs another")
	}
	r := postOK(t, base, req(map[string]any{"return_token_ids": true, "max_tokens": 2, "messages": msgs}))
	text, err := chat.Render(msgs, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := tok.Encode(text); !slices.Equal(r.PromptTokenIDs, want) {
		t.Fatalf("prompt_token_ids %v, want the whole prompt's %v", r.PromptTokenIDs, want)
	}
}

// jsonText is s as a JSON string carries it.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	_ = json.Unmarshal(b, &s)
	return s
}
