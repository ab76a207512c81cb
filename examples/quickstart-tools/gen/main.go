// Command gen writes the data of the multi-turn quickstart
// (examples/quickstart-tools.hcl): MBPP-format tasks whose answer sits in
// a file of the sandbox, the warm-up transcripts, and a tokenizer trained
// on them. The output is committed; rerun it after changing the family:
//
//	go run ./examples/quickstart-tools/gen -out examples/quickstart-tools
//
// Every task asks the same thing ("Write f(x) as spec.txt describes.") and
// puts a different spec.txt in the workspace ("f(x) returns x squared.").
// The agent has read_file and write_file, and its episode ends when it
// replies without a tool call: solution.py is then tested once.
//
// The warm-up shows two ways of working. For each task, two transcripts
// read spec.txt first, then write the function it names, then say
// "Done."; six write a function straight away (each function of the
// family once) and say "Done.". A model warmed up on them reads first
// about a quarter of the time (and is then mostly right) and otherwise
// guesses (right one time in six). GRPO rewards reading, a decision of the
// first turn whose payoff comes two turns later, through tokens the
// environment wrote.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/envs/mbpp"
	"github.com/rlhost/rlhost/trainer/chat"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// The env block of quickstart-tools.hcl must offer exactly this system
// prompt and these tools, or the warm-up teaches another conversation than
// the one the episodes hold (gen_test.go checks the job file).
const (
	System   = "You have read_file and write_file. Write solution.py, then reply Done."
	Prompt   = "Write f(x) as spec.txt describes."
	Spec     = "spec.txt"
	Solution = "solution.py"
	Done     = "Done."
)

// Tools are the tools the env offers.
var Tools = []string{mbpp.ToolReadFile, mbpp.ToolWriteFile}

// fn is one task: what spec.txt says f returns, and that expression.
type fn struct{ says, expr string }

var fns = []fn{
	{"x plus one", "x + 1"},
	{"x minus one", "x - 1"},
	{"x doubled", "2 * x"},
	{"x squared", "x * x"},
	{"x negated", "-x"},
	{"x cubed", "x * x * x"},
}

// Inputs of the tests: none of them gives two functions of the family the
// same value, so a wrong function fails every test.
var inputs = []int{3, -4, 7}

func spec(f fn) string { return fmt.Sprintf("f(x) returns %s.\n", f.says) }
func code(f fn) string { return fmt.Sprintf("def f(x):\n    return %s\n", f.expr) }

// task is one MBPP-format record with the files its sandbox starts with.
type task struct {
	TaskID   int               `json:"task_id"`
	Text     string            `json:"text"`
	Code     string            `json:"code"`
	TestList []string          `json:"test_list"`
	Files    map[string]string `json:"files"`
}

func eval(f fn, x int) int {
	switch f.expr {
	case "x + 1":
		return x + 1
	case "x - 1":
		return x - 1
	case "2 * x":
		return 2 * x
	case "x * x":
		return x * x
	case "-x":
		return -x
	}
	return x * x * x
}

func main() {
	out := flag.String("out", "examples/quickstart-tools", "directory to write tasks.jsonl, warmup.jsonl and tokenizer.json to")
	reads := flag.Int("reads", 2, "warm-up transcripts per task that read spec.txt first (each task also has one guess of every function of the family)")
	vocab := flag.Int("vocab", 1024, "largest tokenizer vocabulary (merges stop earlier once no pair repeats)")
	flag.Parse()
	tools := mbpp.ToolSpecs(Tools)
	header := systemTurn(tools)

	var tasks, warmup, corpus []string
	for i, f := range fns {
		t := task{TaskID: i + 1, Text: Prompt, Code: code(f), Files: map[string]string{Spec: spec(f)}}
		for _, x := range inputs {
			t.TestList = append(t.TestList, fmt.Sprintf("assert f(%d) == %d", x, eval(f, x)))
		}
		tasks = append(tasks, marshal(t))
		// Each task's transcripts: the reads, then one guess of each
		// function (one of which is right by chance).
		var written []fn
		for range *reads {
			written = append(written, f)
		}
		written = append(written, fns...)
		for k, w := range written {
			msgs := []core.Message{{Role: core.RoleSystem, Content: System}, {Role: core.RoleUser, Content: Prompt}}
			if k < *reads {
				msgs = append(msgs, callTool("call_1", mbpp.ToolReadFile, map[string]string{"path": Spec}),
					core.Message{Role: core.RoleTool, ToolCallID: "call_1", Content: spec(f)})
			}
			msgs = append(msgs, callTool("call_2", mbpp.ToolWriteFile, map[string]string{"path": Solution, "content": code(w)}),
				core.Message{Role: core.RoleTool, ToolCallID: "call_2", Content: fmt.Sprintf("Wrote %d bytes to %s", len(code(w)), Solution)},
				core.Message{Role: core.RoleAssistant, Content: Done})
			warmup = append(warmup, marshal(map[string]any{"messages": msgs, "tools": tools}))
			rendered, err := chat.Render(msgs, tools, false)
			if err != nil {
				log.Fatal(err)
			}
			corpus = append(corpus, strings.ReplaceAll(rendered, header, ""))
		}
	}
	// The system turn (the system prompt and the template's block of tool
	// signatures) is the same in every episode: one added token, so that a
	// sequence is about 110 tokens rather than 400, and BPE's merges go to
	// the text that differs.
	tok, err := tokenizer.Train(corpus, *vocab, append(slices.Clone(tokenizer.ChatMLSpecials), header))
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
	fmt.Printf("wrote %d tasks, %d warm-up transcripts and a tokenizer of up to %d tokens to %s\n", len(tasks), len(warmup), *vocab, *out)
}

// systemTurn is the text of the system turn the chat template writes for
// System and tools, between "<|im_start|>system\n" and "<|im_end|>".
func systemTurn(tools []core.ToolSpec) string {
	r, err := chat.Render([]core.Message{{Role: core.RoleSystem, Content: System}}, tools, false)
	if err != nil {
		log.Fatal(err)
	}
	body, ok := strings.CutPrefix(r, "<|im_start|>system\n")
	if !ok {
		log.Fatalf("unexpected system turn %q", r)
	}
	body, _, _ = strings.Cut(body, "<|im_end|>")
	return body
}

// callTool is an assistant turn that calls one tool, its arguments in
// the order the tool's schema lists them (path before content).
func callTool(id, name string, args map[string]string) core.Message {
	raw := "{"
	for _, k := range []string{"path", "content"} {
		if v, ok := args[k]; ok {
			if len(raw) > 1 {
				raw += ", "
			}
			raw += marshal(k) + ": " + marshal(v)
		}
	}
	raw += "}"
	return core.Message{Role: core.RoleAssistant, ToolCalls: []core.ToolCall{{ID: id, Type: "function",
		Function: core.FunctionCall{Name: name, Arguments: raw}}}}
}

func marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		log.Fatal(err)
	}
	return string(b)
}
