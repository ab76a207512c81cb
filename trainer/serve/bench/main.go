// Command bench measures the embedded policy server (trainer/serve) and
// prints Markdown tables for BENCHMARKS.md: aggregate generated tokens
// per second at 1, 4 and 16 concurrent chat requests through go-openai over
// loopback HTTP, next to the same-run yardstick of trainer/generate
// decoding the same model at batch 1 and 16 without a server; and an
// 8-turn tool-use episode replayed through the server with and without
// its prefix cache (prompt tokens computed, wall time per episode).
//
// Models are random (hfconfig presets widened to the Qwen tokenizer's
// vocabulary, as `rlhost model init --tokenizer` makes them); it checks no
// outputs, the tests do that.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/generate"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/serve"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

func main() {
	tokDir := flag.String("tokenizer", os.Getenv("RLHOST_QWEN_TOKENIZER"), "directory holding tokenizer.json (scripts/tokenizer/fetch.sh)")
	presets := flag.String("presets", "10m:64:3,qwen2.5-0.5b:32:3", "comma-separated preset:tokens-per-request:rounds for the throughput table (empty: none)")
	episodes := flag.String("episode", "10m:3,qwen2.5-0.5b:1", "comma-separated preset:rounds for the multi-turn episode table (empty: none)")
	profile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*tokDir, *presets, *episodes); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(tokDir, presets, episodes string) error {
	if tokDir == "" {
		tokDir = ".cache/qwen-tokenizer"
	}
	tok, err := tokenizer.LoadDir(tokDir)
	if err != nil {
		return fmt.Errorf("load tokenizer (run scripts/tokenizer/fetch.sh): %w", err)
	}
	fmt.Printf("Machine: %s, GOMAXPROCS=%d, %s/%s, %s\n", cpuName(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Printf("Command: go run ./trainer/serve/bench %s\n", strings.Join(os.Args[1:], " "))
	fmt.Println("Yardstick: trainer/generate on the same model in the same run (no HTTP, one fixed batch).")
	fmt.Println()
	if presets != "" {
		fmt.Println("| model | setting | tokens/request | sequences | generated tokens | wall (s) | aggregate tok/s (median round) | vs 1 concurrent / batch 1 | vs generate at the same batch | tokens per CPU-second | vs 1 concurrent / batch 1 |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	}
	for _, spec := range strings.Split(presets, ",") {
		if spec == "" {
			continue
		}
		f := strings.Split(spec, ":")
		var tokens, rounds int
		if len(f) != 3 {
			return fmt.Errorf("preset spec %q: want name:tokens:rounds", spec)
		}
		if _, err := fmt.Sscan(f[1], &tokens); err != nil || tokens <= 0 {
			return fmt.Errorf("preset spec %q: bad token count", spec)
		}
		if _, err := fmt.Sscan(f[2], &rounds); err != nil || rounds <= 0 {
			return fmt.Errorf("preset spec %q: bad round count", spec)
		}
		if err := benchPreset(tok, f[0], tokens, rounds); err != nil {
			return fmt.Errorf("%s: %w", f[0], err)
		}
	}
	if episodes != "" {
		fmt.Println()
		fmt.Println("| model | prefix cache | prompt tokens (8 turns) | prompt tokens computed | supplied by the cache | wall per episode (s, median) | per round (s) | vs without |")
		fmt.Println("|---|---|---|---|---|---|---|---|")
	}
	for _, spec := range strings.Split(episodes, ",") {
		if spec == "" {
			continue
		}
		name, r, ok := strings.Cut(spec, ":")
		var rounds int
		if _, err := fmt.Sscan(r, &rounds); !ok || err != nil || rounds <= 0 {
			return fmt.Errorf("episode spec %q: want name:rounds", spec)
		}
		if err := benchEpisode(tok, name, rounds); err != nil {
			return fmt.Errorf("%s episode: %w", name, err)
		}
	}
	return nil
}

// benchModel is preset with random weights, widened to tok's vocabulary.
func benchModel(tok *tokenizer.Tokenizer, preset string) (*model.Model, func(), string, error) {
	cfg, err := hfconfig.Preset(preset)
	if err != nil {
		return nil, nil, "", err
	}
	cfg.VocabSize = max(cfg.VocabSize, tok.VocabSize())
	cfg.EOSTokenIDs = []int{tok.EOS()}
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		return nil, nil, "", err
	}
	m, err := model.New(be, cfg)
	if err != nil {
		be.Close()
		return nil, nil, "", err
	}
	m.Init(1, 0.02)
	return m, be.Close, fmt.Sprintf("%s (%.0fM params, vocab %d)", preset, float64(cfg.NumParams())/1e6, cfg.VocabSize), nil
}

func benchPreset(tok *tokenizer.Tokenizer, preset string, tokens, rounds int) error {
	m, closeBE, label, err := benchModel(tok, preset)
	if err != nil {
		return err
	}
	defer closeBE()
	s, err := serve.New(m, tok, serve.Options{ModelName: "bench", MaxBatch: 16, MaxSeqLen: 256})
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, err := s.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	oc := openai.DefaultConfig("unused")
	oc.BaseURL = base
	client := openai.NewClientWithConfig(oc)
	// The yardstick generates from the very prompts the server renders
	// for the requests, so the two do the same work but for the server's
	// own: HTTP, JSON, the chat template, detokenising, scheduling.
	prompts := make([][]int, 16)
	for i := range prompts {
		if prompts[i], _, err = chat.RenderTokens(tok, []core.Message{{Role: core.RoleUser, Content: requestText(i)}}, nil, true); err != nil {
			return err
		}
	}
	type setting struct {
		name   string
		n      int  // sequences at once
		server bool // through the server, else trainer/generate
		rates  []float64
		tokens int
		wall   float64
		cpu    float64
	}
	settings := []*setting{{name: "generate, batch 1", n: 1}, {name: "generate, batch 16", n: 16},
		{name: "server, 1 concurrent", n: 1, server: true}, {name: "server, 4 concurrent", n: 4, server: true}, {name: "server, 16 concurrent", n: 16, server: true}}
	// Rounds take every setting in turn, so that drifting machine load
	// hits them alike; each reports its median round.
	for range rounds {
		for _, st := range settings {
			cpu0, start := cpuSeconds(), time.Now()
			var total int
			if st.server {
				total, _, err = burst(ctx, client, st.n, tokens)
			} else {
				total, err = generateTokens(s, m, prompts[:st.n], tokens)
			}
			if err != nil {
				return err
			}
			wall := time.Since(start).Seconds()
			st.cpu += cpuSeconds() - cpu0
			st.rates = append(st.rates, float64(total)/wall)
			st.tokens += total
			st.wall += wall
		}
	}
	ref := map[string]*setting{}
	for _, st := range settings {
		first := settings[0]
		if st.server {
			first = settings[2]
		}
		vsGen := "-"
		if g, ok := ref[fmt.Sprint(false, st.n)]; ok && st.server {
			vsGen = fmt.Sprintf("%.2fx", median(st.rates)/median(g.rates))
		}
		ref[fmt.Sprint(st.server, st.n)] = st
		rate, perCPU := median(st.rates), float64(st.tokens)/st.cpu
		fmt.Printf("| %s | %s | %d | %d × %d rounds | %d | %.2f | %.1f | %.1fx | %s | %.1f | %.1fx |\n",
			label, st.name, tokens, st.n, rounds, st.tokens, st.wall, rate, rate/median(first.rates), vsGen,
			perCPU, perCPU/(float64(first.tokens)/first.cpu))
	}
	return nil
}

// requestText is request i's user message.
func requestText(i int) string { return fmt.Sprintf("Request %d: write a short Python function.", i) }

// generateTokens runs trainer/generate on prompts with the server paused
// (its engine shares the model) and returns the tokens generated.
func generateTokens(s *serve.Server, m *model.Model, prompts [][]int, tokens int) (int, error) {
	n := 0
	err := s.Update(context.Background(), func() error {
		res, err := generate.Generate(context.Background(), m, prompts, generate.Options{MaxTokens: tokens, Temperature: 1, Seed: 1})
		for _, r := range res {
			n += len(r.Tokens)
		}
		return err
	})
	return n, err
}

// burst sends c concurrent requests of tokens each and returns the tokens
// generated and the wall time.
func burst(ctx context.Context, client *openai.Client, c, tokens int) (int, float64, error) {
	var mu sync.Mutex
	total := 0
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c {
		wg.Go(func() {
			seed := i
			resp, err := client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
				Model: "bench", MaxTokens: tokens, Temperature: 1, Seed: &seed,
				Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: requestText(i)}},
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if err == nil {
				total += resp.Usage.CompletionTokens
			}
		})
	}
	wg.Wait()
	return total, time.Since(start).Seconds(), firstErr
}

// cpuSeconds is the process's user+system CPU time: on a shared machine
// tokens per CPU-second show the work batching saves even when the wall
// clock mostly measures other processes.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown CPU"
}
