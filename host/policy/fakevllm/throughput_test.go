package fakevllm

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
)

// The throughput model on a clock the test moves: each case submits
// requests at given times and checks when each one ends, against the
// rates worked out by hand in the comments.
func TestThroughputModel(t *testing.T) {
	type arrival struct {
		at      float64
		prompt  int
		lengths []int
		cancel  float64 // > 0: the client goes away then
	}
	for _, tc := range []struct {
		name string
		tp   Throughput
		reqs []arrival
		want []float64 // end times; -1 for a request cancelled first
	}{
		{
			// 1000 prompt tokens at 10000/s, then 100 tokens alone at
			// 1000/(1+9) = 100/s.
			name: "prefill then decode",
			tp:   Throughput{PeakDecode: 1000, HalfBatch: 9, Prefill: 10000},
			reqs: []arrival{{at: 0, prompt: 1000, lengths: []int{100}}},
			want: []float64{1.1},
		},
		{
			// Two sequences share 1000·2/(2+8) = 200/s, 100/s each: the
			// short one ends at 1 s; the other then has 100 tokens left at
			// 1000/9/s alone.
			name: "batch shares the rate",
			tp:   Throughput{PeakDecode: 1000, HalfBatch: 8},
			reqs: []arrival{{at: 0, lengths: []int{100}}, {at: 0, lengths: []int{200}}},
			want: []float64{1, 1 + 100/(1000.0/9)},
		},
		{
			// A batch of one: the second request waits for the first.
			name: "queue beyond the batch",
			tp:   Throughput{PeakDecode: 1000, HalfBatch: 9, MaxBatch: 1},
			reqs: []arrival{{at: 0, lengths: []int{100}}, {at: 0.5, lengths: []int{100}}},
			want: []float64{1, 2},
		},
		{
			// n = 3 choices: three sequences at 1000/(3+7) = 100/s, then
			// two at 1000/9, then one at 125: the request ends with its
			// longest sequence.
			name: "several choices",
			tp:   Throughput{PeakDecode: 1000, HalfBatch: 7},
			reqs: []arrival{{at: 0, lengths: []int{10, 20, 30}}},
			want: []float64{0.1 + 10/(1000.0/9) + 10/125.0},
		},
		{
			// Two at 100/s each until the second leaves at 0.5 s; the
			// first then has 50 tokens left at 1000/9/s.
			name: "a cancelled request frees its share",
			tp:   Throughput{PeakDecode: 1000, HalfBatch: 8},
			reqs: []arrival{{at: 0, lengths: []int{100}}, {at: 0, lengths: []int{100}, cancel: 0.5}},
			want: []float64{0.5 + 50/(1000.0/9), -1},
		},
		{
			// Prompts in their prefill share the prefill rate: two of 500
			// tokens at 1000/s take 1 s together.
			name: "prefills share their rate",
			tp:   Throughput{PeakDecode: 1000, HalfBatch: 9, Prefill: 1000},
			reqs: []arrival{{at: 0, prompt: 500, lengths: []int{0}}, {at: 0, prompt: 500, lengths: []int{0}}},
			want: []float64{1, 1},
		},
		{
			// Without rates the answers are instant.
			name: "no model",
			reqs: []arrival{{at: 2, prompt: 1000, lengths: []int{100}}},
			want: []float64{2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(tc.tp)
			jobs := make([]*job, len(tc.reqs))
			// Play the arrivals and cancellations in time order.
			type event struct {
				at     float64
				i      int
				cancel bool
			}
			var events []event
			for i, r := range tc.reqs {
				events = append(events, event{r.at, i, false})
				if r.cancel > 0 {
					events = append(events, event{r.cancel, i, true})
				}
			}
			for k := range events {
				for m := k + 1; m < len(events); m++ {
					if events[m].at < events[k].at {
						events[k], events[m] = events[m], events[k]
					}
				}
			}
			for _, ev := range events {
				r := tc.reqs[ev.i]
				if ev.cancel {
					e.leaveEarly(jobs[ev.i], ev.at)
					continue
				}
				jobs[ev.i] = e.enter(work{prompt: r.prompt, lengths: r.lengths}, ev.at)
			}
			e.advance(100)
			for i, j := range jobs {
				got := j.endedAt
				if tc.reqs[i].cancel > 0 && j.endedAt == 0 {
					got = -1
				}
				if !j.ended || math.Abs(got-tc.want[i]) > 1e-9 {
					t.Errorf("request %d ended %v at %v, want at %v", i, j.ended, got, tc.want[i])
				}
			}
			if s := e.statsAt(100); s.Running != 0 || s.Waiting != 0 {
				t.Errorf("left running %d, waiting %d", s.Running, s.Waiting)
			}
		})
	}
}

// Busy time counts the time with a request in flight, and Sub gives an
// interval's share of it.
func TestThroughputBusyTime(t *testing.T) {
	e := newEngine(Throughput{PeakDecode: 100, HalfBatch: 0})
	e.enter(work{lengths: []int{100}}, 0) // 0 to 1 s
	mid := e.statsAt(1.5)
	e.enter(work{lengths: []int{100}}, 2) // 2 to 3 s
	s := e.statsAt(2.5)
	if s.BusySeconds != 1.5 || s.WallSeconds != 2.5 {
		t.Errorf("at 2.5 s: busy %v of %v, want 1.5 of 2.5", s.BusySeconds, s.WallSeconds)
	}
	end := e.statsAt(4)
	if end.Requests != 2 || end.CompletionTokens != 200 || end.Sequences != 2 {
		t.Errorf("stats %+v", end)
	}
	if got := end.Sub(mid); got.BusySeconds != 1 || got.WallSeconds != 2.5 || got.BusyFraction() != 0.4 || got.Requests != 1 {
		t.Errorf("interval %+v (busy fraction %v), want 1 s busy of 2.5 s, one request", got, got.BusyFraction())
	}
}

// A multi-turn conversation on one server: each turn's prompt is cached
// up to the reply before it, so only the new messages are prefilled.
func TestPrefixCache(t *testing.T) {
	tools := []core.ToolSpec{{Type: "function", Function: core.FunctionSpec{Name: "write_file"}}}
	turn1 := []core.Message{{Role: core.RoleSystem, Content: "be brief"}, {Role: core.RoleUser, Content: "add two numbers"}}
	reply := core.Message{Role: core.RoleAssistant, Content: "writing", ToolCalls: []core.ToolCall{{ID: "c1", Type: "function", Function: core.FunctionCall{Name: "write_file", Arguments: `{"path":"a.py"}`}}}}
	turn2 := append(append([]core.Message(nil), turn1...), reply, core.Message{Role: core.RoleTool, ToolCallID: "c1", Content: "ok"})
	c := newPrefixCache(16)
	p1 := renderPrompt(turn1, tools)
	if got := c.cached(p1.boundaries); got != 0 {
		t.Errorf("first prompt: %d tokens cached, want 0", got)
	}
	c.add(p1.after(reply))
	p2 := renderPrompt(turn2, tools)
	want := p2.boundaries[len(p2.boundaries)-2].tokens // everything up to the tool message
	if got := c.cached(p2.boundaries); got != want || got <= len(p1.ids)-2 {
		t.Errorf("second prompt: %d of %d tokens cached, want %d", got, len(p2.ids), want)
	}
	if other := renderPrompt([]core.Message{{Role: core.RoleUser, Content: "something else"}}, nil); c.cached(other.boundaries) != 0 {
		t.Error("an unrelated prompt hit the cache")
	}
	// Prompt ids grow turn by turn, as a tokenizer's do.
	if !slices.Equal(p2.ids[:len(p1.ids)-2], p1.ids[:len(p1.ids)-2]) {
		t.Error("the second prompt's ids do not start with the first's")
	}
}

// Over HTTP: the scripted MBPP agent plays a whole episode with tool
// calls, token ids and log-probs, and the answers wait for the simulated
// GPU; the stats route says what the server did.
func TestAgentOverHTTP(t *testing.T) {
	agent := MBPPAgent{Solutions: map[string]string{"Add two numbers.": "def add(a, b):\n    return a + b\n"}, WrongFirst: 1, ThinkTokens: 40}
	// One sequence alone decodes 10000/(1+19) = 500 tokens/s.
	s := New(Options{BaseModel: "base", Agent: agent.Reply, Throughput: &Throughput{PeakDecode: 10000, HalfBatch: 19, Prefill: 1e6, PrefixCache: true}})
	defer s.Close()
	system := core.Message{Role: core.RoleSystem, Content: "Write your solution to /workspace/solution.py. It is imported as a module."}
	user := core.Message{Role: core.RoleUser, Content: "Add two numbers.\n\nYour code should pass these tests:\n\nassert add(1, 2) == 3"}
	tools := []core.ToolSpec{{Type: "function", Function: core.FunctionSpec{Name: "write_file"}}, {Type: "function", Function: core.FunctionSpec{Name: "bash"}}}
	msgs := []core.Message{system, user}
	var wrote []string
	decoding := 0.0
	for turn, want := range []string{"write_file", "done", "write_file", "done"} {
		start := time.Now()
		resp := chat(t, s.URL(), msgs, tools)
		ch := resp.Choices[0]
		need := time.Duration(float64(len(ch.TokenIDs)) / 500 * float64(time.Second))
		if took := time.Since(start); took < need {
			t.Errorf("turn %d answered after %s, before its %s of decoding", turn, took, need)
		}
		decoding += need.Seconds()
		if len(ch.TokenIDs) == 0 || len(ch.TokenIDs) != len(ch.Logprobs.Content) || len(resp.PromptTokenIDs) == 0 {
			t.Fatalf("turn %d: %d token ids, %d log-probs, %d prompt ids", turn, len(ch.TokenIDs), len(ch.Logprobs.Content), len(resp.PromptTokenIDs))
		}
		m := ch.Message
		m.Role = core.RoleAssistant
		msgs = append(msgs, m)
		switch want {
		case "write_file":
			if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "write_file" || ch.FinishReason != "tool_calls" {
				t.Fatalf("turn %d: %+v, want a write_file call", turn, m)
			}
			var args map[string]string
			json.Unmarshal([]byte(m.ToolCalls[0].Function.Arguments), &args)
			if args["path"] != "/workspace/solution.py" {
				t.Errorf("turn %d writes %q", turn, args["path"])
			}
			wrote = append(wrote, args["content"])
			msgs = append(msgs, core.Message{Role: core.RoleTool, ToolCallID: m.ToolCalls[0].ID, Content: "wrote it"})
		case "done":
			if len(m.ToolCalls) != 0 || ch.FinishReason != "stop" {
				t.Fatalf("turn %d: %+v, want the end of the turn", turn, m)
			}
			msgs = append(msgs, core.Message{Role: core.RoleUser, Content: "Your solution failed the tests (attempt 1 of 3; 2 left)."})
		}
	}
	if len(wrote) != 2 || !strings.Contains(wrote[0], "return None") || wrote[1] != "def add(a, b):\n    return a + b\n" {
		t.Errorf("wrote %q, want a wrong attempt and then the solution", wrote)
	}
	st := httpStats(t, s.URL())
	if st.Requests != 4 || st.CompletionTokens == 0 || st.CachedTokens == 0 || st.BusySeconds < decoding*0.999 || st.BusyFraction() > 1 {
		t.Errorf("stats %+v", st)
	}
}

// Many clients at once cost the server one timer, and every answer
// comes back: the batch is shared, not serialised.
func TestThroughputManyClients(t *testing.T) {
	s := New(Options{BaseModel: "base", Throughput: &Throughput{PeakDecode: 8000, HalfBatch: 0, MaxBatch: 64},
		Respond: func(string, int) Completion {
			return Completion{Text: "x", PromptTokenIDs: []int{1}, TokenIDs: make([]int, 20), LogProbs: make([]float32, 20)}
		}})
	defer s.Close()
	// 200 requests of 20 tokens at 8000 tokens/s in all: 0.5 s of work.
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Go(func() {
			resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model": "base", "messages": [{"role": "user", "content": "hi"}]}`))
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := s.Stats()
	if st.Requests != 200 || st.CompletionTokens != 4000 || st.MaxRunning != 64 || st.BusySeconds < 0.4999 {
		t.Errorf("stats %+v: want 200 requests, 4000 tokens, a full batch of 64, at least 0.5 s busy", st)
	}
}

type chatResponse struct {
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		Message      core.Message `json:"message"`
		FinishReason string       `json:"finish_reason"`
		TokenIDs     []int        `json:"token_ids"`
		Logprobs     struct {
			Content []struct {
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

func chat(t *testing.T, url string, msgs []core.Message, tools []core.ToolSpec) chatResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "base", "messages": msgs, "tools": tools, "return_token_ids": true, "logprobs": true, "seed": 7})
	status, text := post(t, url+"/v1/chat/completions", "application/json", string(body))
	if status != 200 {
		t.Fatalf("HTTP %d %s", status, text)
	}
	var r chatResponse
	if err := json.Unmarshal([]byte(text), &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("%v: %s", err, text)
	}
	return r
}

func httpStats(t *testing.T, url string) Stats {
	t.Helper()
	resp, err := http.Get(url + StatsRoute)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}
