// Package modelcmd implements `rlhost model ...`: init (write a randomly
// initialised model in Hugging Face layout), score (per-token log-probs of
// a text or token sequence), generate (sample a continuation), merge
// (fold a PEFT LoRA adapter into its base model) and serve (the embedded
// server on loopback).
//
// It deliberately holds no numerics: it parses flags and wires the
// tokenizer, trainer/model and trainer/generate together. The host's main
// calls Main with the arguments after "model".
package modelcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/rlhost/rlhost/core/cliflag"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/generate"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

const usage = `Usage: rlhost model <command> [flags]

Commands:
  init      write a randomly initialised model in Hugging Face layout
  score     print the log-prob of each token given the tokens before it
  generate  sample a continuation of a prompt
  merge     fold a LoRA adapter (PEFT layout) into its base model
  serve     serve a model over OpenAI's chat completions on loopback

Run "rlhost model <command> --help" for a command's flags.
`

// errUsage marks errors that are the user's invocation, reported with exit 2.
var errUsage = errors.New("usage")

// errFlags is a flag error that parse has already explained to the user.
var errFlags = errors.New("bad flags")

// Main runs one model subcommand and returns the process exit code:
// 0 on success, 2 for usage errors, 1 for anything else.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage) // asked for: not an error
		return 0
	}
	var err error
	switch args[0] {
	case "init":
		err = runInit(args[1:], stdout, stderr)
	case "score":
		err = runScore(args[1:], stdout, stderr)
	case "generate":
		err = runGenerate(ctx, args[1:], stdout, stderr)
	case "merge":
		err = runMerge(args[1:], stdout, stderr)
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "rlhost model: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.Is(err, errFlags): // already printed, with hints
		return 2
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "rlhost model %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "rlhost model %s: %v\n", args[0], err)
		return 1
	}
}

func flagSet(name, synopsis string, stdout, stderr io.Writer) *pflag.FlagSet {
	return cliflag.New("rlhost model "+name, "Usage: rlhost model "+synopsis+"\n", stdout, stderr)
}

func parse(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		fmt.Fprintln(fs.Output(), cliflag.Message(fs, err))
		return errFlags
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	return nil
}

func runInit(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("init", "init (--config FILE | --preset NAME) --out DIR [flags]", stdout, stderr)
	cfgPath := fs.String("config", "", "Hugging Face config.json to take the model shape from")
	preset := fs.String("preset", "", "named shape: "+strings.Join(hfconfig.PresetNames(), ", "))
	out := fs.String("out", "", "directory to write the model to (created)")
	seed := fs.Uint64("seed", 0, "random seed for the initial weights")
	std := fs.Float64("init-std", 0.02, "standard deviation of the initial weights (transformers' initializer_range)")
	tok := fs.String("tokenizer", "", "tokenizer.json to copy next to the model (tokenizer_config.json beside it is copied too)")
	dtype := fs.String("dtype", "f32", "weight dtype to write: f32 or bf16")
	if err := parse(fs, args); err != nil {
		return err
	}
	if (*cfgPath == "") == (*preset == "") || *out == "" {
		return fmt.Errorf("%w: need exactly one of --config and --preset, and --out", errUsage)
	}
	dt, err := parseDtype(*dtype)
	if err != nil {
		return err
	}
	var cfg *hfconfig.Config
	if *cfgPath != "" {
		cfg, err = hfconfig.Load(*cfgPath)
	} else {
		cfg, err = hfconfig.Preset(*preset)
	}
	if err != nil {
		return err
	}
	if *tok != "" {
		// A model that cannot embed its tokenizer's ids is useless: widen the
		// vocabulary to cover them (and stop on the tokenizer's EOS).
		t, err := tokenizer.Load(*tok)
		if err != nil {
			return fmt.Errorf("load tokenizer: %w", err)
		}
		if cfg.VocabSize < t.VocabSize() {
			fmt.Fprintf(stderr, "note: vocab_size %d widened to %d to cover the tokenizer\n", cfg.VocabSize, t.VocabSize())
			cfg.VocabSize = t.VocabSize()
		}
		cfg.EOSTokenIDs = []int{t.EOS()}
	}
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		return err
	}
	defer be.Close()
	m, err := model.New(be, cfg)
	if err != nil {
		return err
	}
	m.Init(*seed, *std)
	if err := m.Save(*out, dt); err != nil {
		return err
	}
	if *tok != "" {
		if err := model.CopyFile(*tok, filepath.Join(*out, "tokenizer.json")); err != nil {
			return fmt.Errorf("copy tokenizer: %w", err)
		}
		tc := filepath.Join(filepath.Dir(*tok), "tokenizer_config.json")
		if err := model.CopyFile(tc, filepath.Join(*out, "tokenizer_config.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("copy tokenizer config: %w", err)
		}
	}
	fmt.Fprintf(stdout, "wrote %s: %d parameters, %s\n", *out, cfg.NumParams(), dt)
	return nil
}

func parseDtype(s string) (safetensors.DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32":
		return safetensors.F32, nil
	case "bf16", "bfloat16":
		return safetensors.BF16, nil
	}
	return "", fmt.Errorf("%w: --dtype %q (want f32 or bf16)", errUsage, s)
}

func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%w: token id %q: %v", errUsage, f, err)
		}
		ids = append(ids, v)
	}
	return ids, nil
}

// loadModel loads dir onto a CPU backend the caller must Close.
func loadModel(dir string, threads int) (*model.Model, *cpu.Device[float32], error) {
	be, err := cpu.New(cpu.Options{Workers: threads})
	if err != nil {
		return nil, nil, err
	}
	m, err := model.Load(be, dir)
	if err != nil {
		be.Close()
		return nil, nil, err
	}
	return m, be, nil
}

// ScoreOutput is score's --json output: LogProbs[i] is the log-prob of
// Tokens[i+1] given Tokens[:i+1].
type ScoreOutput struct {
	Tokens   []int     `json:"tokens"`
	LogProbs []float32 `json:"logprobs"`
	Sum      float64   `json:"sum"`
}

func runScore(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("score", "score --model DIR (--token-ids 1,2,3 | --text T) [flags]", stdout, stderr)
	dir := fs.String("model", "", "model directory (Hugging Face layout)")
	idsFlag := fs.String("token-ids", "", "comma-separated token ids to score")
	text := fs.String("text", "", "text to tokenize (with the model directory's tokenizer.json) and score")
	temp := fs.Float64("temperature", 1, "score log softmax(logits/temperature)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	threads := fs.Int("threads", 0, "worker threads (0 = GOMAXPROCS)")
	adapter := fs.String("adapter", "", "LoRA adapter directory (PEFT layout) to apply to the model")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" || (*idsFlag == "") == (*text == "") {
		return fmt.Errorf("%w: need --model and exactly one of --token-ids and --text", errUsage)
	}
	if !(*temp > 0) {
		return fmt.Errorf("%w: --temperature must be positive", errUsage)
	}
	var tok *tokenizer.Tokenizer
	var ids []int
	var err error
	if *text != "" {
		if tok, err = tokenizer.LoadDir(*dir); err != nil {
			return err
		}
		ids = tok.Encode(*text)
	} else if ids, err = parseIDs(*idsFlag); err != nil {
		return err
	}
	if len(ids) < 2 {
		return fmt.Errorf("%w: need at least 2 tokens to score, got %d", errUsage, len(ids))
	}
	m, be, err := loadModel(*dir, *threads)
	if err != nil {
		return err
	}
	defer be.Close()
	T := len(ids)
	r, err := m.NewRun(1, T)
	if err != nil {
		return err
	}
	if *adapter != "" {
		a, err := lora.Load(be, m.Cfg, *adapter)
		if err != nil {
			return err
		}
		if err := r.SetAdapter(a); err != nil {
			return err
		}
	}
	in, tg := make([]int32, T), make([]int32, T)
	for i, v := range ids {
		in[i] = int32(v)
		tg[i] = -1
		if i+1 < T {
			tg[i] = int32(ids[i+1])
		}
	}
	if err := r.Forward(in, []int{T}); err != nil {
		return err
	}
	lp := make([]float32, T)
	if err := r.LogProbs(tg, float32(*temp), lp); err != nil {
		return err
	}
	out := ScoreOutput{Tokens: ids, LogProbs: lp[:T-1]}
	for _, v := range out.LogProbs {
		out.Sum += float64(v)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	fmt.Fprintf(stdout, "%4s %8s %12s  %s\n", "pos", "token", "logprob", "text")
	for t := 1; t < T; t++ {
		piece := ""
		if tok != nil {
			piece = strconv.Quote(tok.Decode(ids[t : t+1]))
		}
		fmt.Fprintf(stdout, "%4d %8d %12.6f  %s\n", t, ids[t], lp[t-1], piece)
	}
	fmt.Fprintf(stdout, "sum %.6f over %d tokens\n", out.Sum, T-1)
	return nil
}

// GenerateOutput is generate's --json output.
type GenerateOutput struct {
	PromptTokens []int     `json:"prompt_tokens"`
	Tokens       []int     `json:"tokens"`
	LogProbs     []float32 `json:"logprobs"`
	Text         string    `json:"text,omitempty"`
	Finish       string    `json:"finish_reason"`
}

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("generate", "generate --model DIR (--prompt T | --messages FILE | --prompt-ids 1,2,3) [flags]", stdout, stderr)
	dir := fs.String("model", "", "model directory (Hugging Face layout)")
	prompt := fs.String("prompt", "", "prompt text, tokenized as is (no chat template)")
	messages := fs.String("messages", "", "JSON file with an OpenAI-style messages array, rendered with the chat template")
	promptIDs := fs.String("prompt-ids", "", "comma-separated prompt token ids (no tokenizer needed)")
	maxTokens := fs.Int("max-tokens", 64, "maximum new tokens")
	temp := fs.Float64("temperature", 1, "sampling temperature; 0 is greedy")
	topP := fs.Float64("top-p", 1, "nucleus sampling mass (1 = off)")
	topK := fs.Int("top-k", 0, "keep the k most likely tokens (0 = off)")
	seed := fs.Uint64("seed", 0, "random seed")
	stopIDs := fs.String("stop-ids", "", "comma-separated extra stop token ids (EOS and <|im_end|> always stop)")
	asJSON := fs.Bool("json", false, "print JSON with tokens and log-probs")
	threads := fs.Int("threads", 0, "worker threads (0 = GOMAXPROCS)")
	adapter := fs.String("adapter", "", "LoRA adapter directory (PEFT layout) to apply to the model")
	if err := parse(fs, args); err != nil {
		return err
	}
	n := 0
	for _, s := range []string{*prompt, *messages, *promptIDs} {
		if s != "" {
			n++
		}
	}
	if *dir == "" || n != 1 {
		return fmt.Errorf("%w: need --model and exactly one of --prompt, --messages and --prompt-ids", errUsage)
	}
	m, be, err := loadModel(*dir, *threads)
	if err != nil {
		return err
	}
	defer be.Close()
	if *adapter != "" {
		a, err := lora.Load(be, m.Cfg, *adapter)
		if err != nil {
			return err
		}
		if err := m.SetAdapter(a); err != nil { // the generation cache is made after this
			return err
		}
	}
	var tok *tokenizer.Tokenizer
	if *promptIDs == "" {
		if tok, err = tokenizer.LoadDir(*dir); err != nil {
			return err
		}
	}
	var ids []int
	switch {
	case *promptIDs != "":
		if ids, err = parseIDs(*promptIDs); err != nil {
			return err
		}
	case *prompt != "":
		ids = tok.Encode(*prompt)
	default:
		text, err := renderMessages(*messages)
		if err != nil {
			return err
		}
		ids = tok.Encode(text)
	}
	stops := append([]int{}, m.Cfg.EOSTokenIDs...)
	if tok != nil {
		if e := tok.EOS(); e >= 0 {
			stops = append(stops, e)
		}
		if id, ok := tok.TokenID("<|im_end|>"); ok {
			stops = append(stops, id)
		}
	}
	extra, err := parseIDs(*stopIDs)
	if err != nil {
		return err
	}
	stops = append(stops, extra...)
	res, err := generate.Generate(ctx, m, [][]int{ids}, generate.Options{
		MaxTokens: *maxTokens, Temperature: *temp, TopP: *topP, TopK: *topK, Seed: *seed, StopIDs: stops,
	})
	if err != nil {
		return err
	}
	out := GenerateOutput{PromptTokens: ids, Tokens: res[0].Tokens, LogProbs: res[0].LogProbs, Finish: res[0].Finish}
	if tok != nil {
		out.Text = tok.Decode(res[0].Tokens)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	if tok != nil {
		fmt.Fprintln(stdout, out.Text)
	} else {
		fmt.Fprintln(stdout, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(out.Tokens)), ","), "[]"))
	}
	fmt.Fprintf(stderr, "%d tokens, finish %s\n", len(out.Tokens), out.Finish)
	return nil
}

func runMerge(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("merge", "merge --base DIR --adapter DIR --out DIR [flags]", stdout, stderr)
	base := fs.String("base", "", "base model directory (Hugging Face layout)")
	adapter := fs.String("adapter", "", "LoRA adapter directory (adapter_config.json and adapter_model.safetensors)")
	out := fs.String("out", "", "directory to write the merged model to (created)")
	dtype := fs.String("dtype", "f32", "weight dtype to write: f32 or bf16")
	threads := fs.Int("threads", 0, "worker threads (0 = GOMAXPROCS)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *base == "" || *adapter == "" || *out == "" {
		return fmt.Errorf("%w: need --base, --adapter and --out", errUsage)
	}
	if filepath.Clean(*out) == filepath.Clean(*base) {
		return fmt.Errorf("%w: --out must differ from --base (the base is left as it is)", errUsage)
	}
	dt, err := parseDtype(*dtype)
	if err != nil {
		return err
	}
	m, be, err := loadModel(*base, *threads)
	if err != nil {
		return err
	}
	defer be.Close()
	a, err := lora.Load(be, m.Cfg, *adapter)
	if err != nil {
		return err
	}
	if err := lora.Merge(m, a); err != nil {
		return err
	}
	if err := m.Save(*out, dt); err != nil {
		return err
	}
	mods := make([]string, len(a.Cfg.Targets))
	for i, t := range a.Cfg.Targets {
		mods[i] = t.String()
	}
	fmt.Fprintf(stdout, "wrote %s: %s merged with the rank-%d adapter on %s, %s\n", *out, *base, a.Cfg.Rank, strings.Join(mods, ","), dt)
	return nil
}
