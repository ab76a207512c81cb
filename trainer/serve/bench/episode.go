package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rlhost/rlhost/trainer/serve"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// episodeTurns is how many policy turns the replayed episode has.
const episodeTurns = 8

// The episode: an MBPP-style task with three sandbox tools in the system
// prompt; each turn the model replies (sampled, 32 tokens) and the
// environment's replayed test report follows as the next user message.
// The texts are written for this benchmark.
var (
	episodeSystem = "You are a careful Python programmer working in a sandbox. Use the tools to write solution.py, run the tests, read what failed and fix it. Answer with the whole file when you are done."
	episodeTask   = "Write a function `common_items(a, b)` that returns the items present in both tuples, in the order they appear in the first one, without repeats.\n\nYour code must pass these tests:\nassert common_items((3, 4, 5, 6), (5, 7, 4, 10)) == [4, 5]\nassert common_items((1, 2, 3, 4), (5, 4, 3, 7)) == [3, 4]\nassert common_items((11, 12, 14, 13), (17, 15, 14, 13)) == [14, 13]"
	episodeTools  = []map[string]any{
		tool("bash", "Run a bash command in the workspace and return its exit code, stdout and stderr.", map[string]any{"command": "The command to run."}),
		tool("read_file", "Read a text file in the workspace.", map[string]any{"path": "The file's path."}),
		tool("write_file", "Create or overwrite a file in the workspace.", map[string]any{"path": "The file's path.", "content": "The whole new content."}),
	}
)

func tool(name, desc string, params map[string]any) map[string]any {
	props := map[string]any{}
	var req []string
	for p, d := range params {
		props[p] = map[string]any{"type": "string", "description": d}
		req = append(req, p)
	}
	slices.Sort(req)
	return map[string]any{"type": "function", "function": map[string]any{"name": name, "description": desc,
		"parameters": map[string]any{"type": "object", "properties": props, "required": req}}}
}

// report is the replayed environment message after turn t.
func report(t int) string {
	return fmt.Sprintf("Exit code 1 after running `python -m pytest -q test_solution.py` (attempt %d of %d).\n"+
		"F.F\n___ test_first ___\n    def test_first():\n>       assert common_items((3, 4, 5, 6), (5, 7, 4, 10)) == [4, 5]\n"+
		"E       AssertionError: assert [5, 4] == [4, 5]\nE         At index 0 diff: 5 != 4\n"+
		"test_solution.py:4: AssertionError\n___ test_third ___\nE       NameError: name 'commom_items' is not defined\n"+
		"2 failed, 1 passed in 0.03s\nFix solution.py and run the tests again.", t+1, episodeTurns)
}

// benchEpisode replays the episode rounds times through a server with the
// prefix cache and one without (same model, never computing at once),
// alternating which goes first, and prints one row for each.
func benchEpisode(tok *tokenizer.Tokenizer, preset string, rounds int) error {
	m, closeBE, label, err := benchModel(tok, preset)
	if err != nil {
		return err
	}
	defer closeBE()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type side struct {
		name  string
		base  string
		srv   *serve.Server
		walls []float64
		stats serve.Stats // of the last round
	}
	var sides []*side
	for _, off := range []bool{false, true} {
		s, err := serve.New(m, tok, serve.Options{ModelName: "bench", MaxBatch: 4, MaxSeqLen: 2048, NoPrefixCache: off})
		if err != nil {
			return err
		}
		defer s.Close()
		base, err := s.Listen(ctx, "127.0.0.1:0")
		if err != nil {
			return err
		}
		name := "on"
		if off {
			name = "off"
		}
		sides = append(sides, &side{name: name, base: base, srv: s})
	}
	var texts [2][]string
	for r := range rounds {
		for k := range 2 {
			i := (k + r) % 2
			sd := sides[i]
			before := sd.srv.Stats()
			start := time.Now()
			replies, err := runEpisode(ctx, sd.base, r)
			if err != nil {
				return err
			}
			sd.walls = append(sd.walls, time.Since(start).Seconds())
			after := sd.srv.Stats()
			sd.stats = serve.Stats{PromptTokens: after.PromptTokens - before.PromptTokens, CachedTokens: after.CachedTokens - before.CachedTokens}
			texts[i] = replies
		}
		if !slices.Equal(texts[0], texts[1]) {
			return fmt.Errorf("round %d: the servers with and without the prefix cache replied differently", r)
		}
	}
	without := median(sides[1].walls)
	for _, sd := range sides {
		st := sd.stats
		fmt.Printf("| %s | %s | %d | %d | %d | %.2f | %s | %.2fx |\n", label, sd.name, st.PromptTokens, st.PromptTokens-st.CachedTokens,
			st.CachedTokens, median(sd.walls), seconds(sd.walls), without/median(sd.walls))
	}
	return nil
}

// runEpisode plays the episode's turns against base with seed round and
// returns the replies.
func runEpisode(ctx context.Context, base string, round int) ([]string, error) {
	msgs := []map[string]any{{"role": "system", "content": episodeSystem}, {"role": "user", "content": episodeTask}}
	var replies []string
	for t := range episodeTurns {
		body, _ := json.Marshal(map[string]any{"model": "bench", "messages": msgs, "tools": episodeTools,
			"max_tokens": 32, "temperature": 1, "seed": 1000 + round})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("turn %d: HTTP %d %s %v", t, resp.StatusCode, data, err)
		}
		var r struct {
			Choices []struct {
				Message struct {
					Content *string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &r); err != nil || len(r.Choices) == 0 {
			return nil, fmt.Errorf("turn %d: %v: %s", t, err, data)
		}
		reply := ""
		if c := r.Choices[0].Message.Content; c != nil {
			reply = *c
		}
		replies = append(replies, reply)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": reply}, map[string]any{"role": "user", "content": report(t)})
	}
	return replies, nil
}

func seconds(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}
