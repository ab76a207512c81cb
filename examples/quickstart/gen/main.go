// Command gen writes the quickstart's data: the task family, the warm-up
// transcripts and a tokenizer trained on them. The output is committed, so
// the quickstart needs nothing but this repository; rerun it after changing
// the family:
//
//	go run ./examples/quickstart/gen -out examples/quickstart
//
// The family: six one-line functions of x ("Write f(x) that returns x
// squared.", doubled, plus one, ...). Every warm-up transcript means the
// right thing, but only a quarter of them write it in a way that passes the
// tests: the others print instead of returning, or return the expression
// as a string. A model warmed up on them answers in all three styles, and
// the sandbox scores them differently (0 for wrong values, 1 when every
// test passes, -1 for code that does not run), which leaves GRPO something
// to learn: which way of answering the tests reward. Both wrong styles
// score the same, so a group without a right answer carries no gradient
// and cannot pull the policy towards one of them.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// System is the system prompt of every quickstart episode; a short one
// keeps the chat template from adding its long default.
const System = "Answer with Python code only."

// fn is one task: what the prompt says f returns, and that expression in
// code.
type fn struct{ id, says, expr string }

var fns = []fn{
	{"plus_one", "x plus one", "x + 1"},
	{"minus_one", "x minus one", "x - 1"},
	{"doubled", "x doubled", "2 * x"},
	{"squared", "x squared", "x * x"},
	{"negated", "x negated", "-x"},
	{"cubed", "x cubed", "x * x * x"},
}

type task struct {
	ID        string   `json:"id"`
	Prompt    string   `json:"prompt"`
	FuncName  string   `json:"func_name"`
	Tests     []string `json:"tests"`
	Reference string   `json:"reference"`
}

func prompt(f fn) string { return fmt.Sprintf("Write f(x) that returns %s.", f.says) }
func answer(f fn) string { return fmt.Sprintf("def f(x):\n    return %s", f.expr) }

// styles write a task's meaning in ways that do not pass its tests.
var styles = []func(f fn) string{
	func(f fn) string { return fmt.Sprintf("def f(x):\n    print(%s)", f.expr) },
	func(f fn) string { return fmt.Sprintf("def f(x):\n    return \"%s\"", f.expr) },
}

func main() {
	out := flag.String("out", "examples/quickstart", "directory to write tasks.jsonl, warmup.jsonl and tokenizer.json to")
	perTask := flag.Int("per-task", 48, "warm-up transcripts per task")
	right := flag.Float64("right", 0.25, "fraction of warm-up transcripts whose code runs")
	vocab := flag.Int("vocab", 384, "tokenizer vocabulary size")
	flag.Parse()
	rng := rand.New(rand.NewPCG(1, 2))

	var tasks, warmup []string
	var corpus []string
	for _, f := range fns {
		t := task{ID: f.id, Prompt: prompt(f), FuncName: "f",
			Tests: []string{"0", "1", "2", "-3", "5", "10"}, Reference: answer(f) + "\n"}
		b, err := json.Marshal(t)
		if err != nil {
			log.Fatal(err)
		}
		tasks = append(tasks, string(b))
		for range *perTask {
			text := answer(f)
			if rng.Float64() >= *right {
				text = styles[rng.IntN(len(styles))](f)
			}
			msgs := []core.Message{
				{Role: core.RoleSystem, Content: System},
				{Role: core.RoleUser, Content: t.Prompt},
				{Role: core.RoleAssistant, Content: text},
			}
			b, err := json.Marshal(map[string]any{"messages": msgs})
			if err != nil {
				log.Fatal(err)
			}
			warmup = append(warmup, string(b))
			rendered, err := chat.Render(msgs, nil, false)
			if err != nil {
				log.Fatal(err)
			}
			corpus = append(corpus, rendered)
		}
	}
	tok, err := tokenizer.Train(corpus, *vocab, tokenizer.ChatMLSpecials)
	if err != nil {
		log.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(*out, name), data, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	lines := func(ls []string) []byte {
		var b []byte
		for _, l := range ls {
			b = append(b, l...)
			b = append(b, '\n')
		}
		return b
	}
	write("tasks.jsonl", lines(tasks))
	write("warmup.jsonl", lines(warmup))
	write("tokenizer.json", append(tok, '\n'))
	write("tokenizer_config.json", append(tokenizer.TrainedConfigJSON(tokenizer.ChatMLSpecials), '\n'))
	fmt.Printf("wrote %d tasks, %d warm-up transcripts and a %d-token tokenizer to %s\n", len(tasks), len(warmup), *vocab, *out)
}
