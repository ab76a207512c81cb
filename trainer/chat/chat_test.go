package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/tokenizer"
	"github.com/rlhost/rlhost/trainer/tokenizer/tokenizertest"
)

// chatCase is one conversation of testdata/cases.json. Expected, where
// present, was written by hand from Qwen2.5-Instruct's chat_template; the
// reference script also renders every comparable case with the template
// shipped in the npm tokenizer package (see docs/tokenizer.md).
type chatCase struct {
	Name                string          `json:"name"`
	Messages            []core.Message  `json:"messages"`
	Tools               []core.ToolSpec `json:"tools"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Expected            *string         `json:"expected"`
}

type refChat struct {
	Name       string `json:"name"`
	Comparable bool   `json:"comparable"`
	Rendered   string `json:"rendered"`
	IDs        []int  `json:"ids"`
}

func loadCases(t *testing.T) []chatCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []chatCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatalf("parse cases.json: %v", err)
	}
	return cases
}

func TestRenderHandWritten(t *testing.T) {
	n := 0
	for _, c := range loadCases(t) {
		if c.Expected == nil {
			continue
		}
		n++
		got, err := Render(c.Messages, c.Tools, c.AddGenerationPrompt)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if got != *c.Expected {
			t.Errorf("%s:\n got %q\nwant %q", c.Name, got, *c.Expected)
		}
	}
	if n < 8 {
		t.Fatalf("only %d hand-written expectations", n)
	}
}

// qwenShared is loaded once per test binary; parsing tokenizer.json is slow.
var qwenShared struct {
	once sync.Once
	tok  *tokenizer.Tokenizer
	err  error
}

func loadQwen(t *testing.T) (*tokenizer.Tokenizer, string) {
	t.Helper()
	dir := tokenizertest.Dir(t)
	qwenShared.once.Do(func() { qwenShared.tok, qwenShared.err = tokenizer.LoadDir(dir) })
	if qwenShared.err != nil {
		t.Fatalf("LoadDir(%s): %v", dir, qwenShared.err)
	}
	return qwenShared.tok, dir
}

func referenceChats(t *testing.T) (*tokenizer.Tokenizer, map[string]refChat) {
	t.Helper()
	tok, dir := loadQwen(t)
	refs := map[string]refChat{}
	for _, r := range tokenizertest.ReadJSONL[refChat](t, dir, "chat.jsonl") {
		refs[r.Name] = r
	}
	return tok, refs
}

// TestRenderMatchesJinja compares with @huggingface/jinja rendering the
// template from the npm package, for every case where that template and
// Qwen2.5's produce the same text, and checks the token ids and mask.
func TestRenderMatchesJinja(t *testing.T) {
	tok, refs := referenceChats(t)
	compared := 0
	for _, c := range loadCases(t) {
		ref, ok := refs[c.Name]
		if !ok {
			t.Fatalf("%s: not in the reference output: run %s", c.Name, tokenizertest.FetchCommand)
		}
		if !ref.Comparable {
			continue
		}
		compared++
		got, err := Render(c.Messages, c.Tools, c.AddGenerationPrompt)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if got != ref.Rendered {
			t.Errorf("%s: differs from the Jinja rendering\n got %q\nwant %q", c.Name, got, ref.Rendered)
			continue
		}
		ids, mask, err := RenderTokens(tok, c.Messages, c.Tools, c.AddGenerationPrompt)
		if err != nil {
			t.Fatalf("%s: RenderTokens: %v", c.Name, err)
		}
		if !slices.Equal(ids, ref.IDs) {
			t.Errorf("%s: ids differ from the JS tokenizer on the rendered text", c.Name)
		}
		checkMask(t, c.Name, tok, c.Messages, ids, mask)
	}
	if compared < 8 {
		t.Fatalf("only %d cases compared with the Jinja rendering", compared)
	}
	t.Logf("%d conversations identical to the Jinja rendering and JS token ids", compared)
}

// checkMask verifies the mask from first principles: masked tokens form one
// run per assistant message, each run decodes to text that ends with
// <|im_end|> and directly follows "<|im_start|>assistant\n".
func checkMask(t *testing.T, name string, tok *tokenizer.Tokenizer, msgs []core.Message, ids []int, mask []bool) {
	t.Helper()
	if len(mask) != len(ids) {
		t.Fatalf("%s: %d mask entries for %d ids", name, len(mask), len(ids))
	}
	var runs []string
	for i := 0; i < len(ids); {
		if !mask[i] {
			i++
			continue
		}
		j := i
		for j < len(ids) && mask[j] {
			j++
		}
		if before := tok.Decode(ids[:i]); !strings.HasSuffix(before, "<|im_start|>assistant\n") {
			t.Errorf("%s: masked run at token %d does not follow an assistant header: ...%q", name, i, before[max(0, len(before)-30):])
		}
		runs = append(runs, tok.Decode(ids[i:j]))
		i = j
	}
	var want []core.Message
	for _, m := range msgs {
		if m.Role == core.RoleAssistant {
			want = append(want, m)
		}
	}
	if len(runs) != len(want) {
		t.Fatalf("%s: %d masked runs for %d assistant messages", name, len(runs), len(want))
	}
	for k, r := range runs {
		if !strings.HasSuffix(r, "<|im_end|>") || !strings.HasPrefix(r, want[k].Content) {
			t.Errorf("%s: masked run %d = %q, want assistant content %q ... <|im_end|>", name, k, r, want[k].Content)
		}
	}
}

func TestRenderTokensRefusesCrossBoundaryTokens(t *testing.T) {
	tok, _ := loadQwen(t)
	msgs := []core.Message{{Role: core.RoleUser, Content: "hi"}, {Role: core.RoleAssistant, Content: "\n\nHello"}}
	if _, _, err := RenderTokens(tok, msgs, nil, false); err == nil || !strings.Contains(err.Error(), "boundary") {
		t.Fatalf("RenderTokens with content starting with a blank line: err = %v, want a boundary error", err)
	}
	// Leading spaces without a newline are fine: "\n" stays its own token.
	msgs[1].Content = "   Hello"
	ids, mask, err := RenderTokens(tok, msgs, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	checkMask(t, "leading spaces", tok, msgs, ids, mask)
}

// Two tool calls in one turn give two tool responses in a row; the pieces
// of one owner are tokenized together, so a token that spans them (">\n"
// between "</tool_response>" and "\n<tool_response>", which the
// multi-turn quickstart's tokenizer has) is no boundary error.
func TestRenderTokensConsecutiveToolResponses(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join("..", "..", "examples", "quickstart-tools", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(id, path string) core.ToolCall {
		return core.ToolCall{ID: id, Type: "function", Function: core.FunctionCall{Name: "read_file", Arguments: `{"path": "` + path + `"}`}}
	}
	msgs := []core.Message{
		{Role: core.RoleUser, Content: "Read both."},
		{Role: core.RoleAssistant, ToolCalls: []core.ToolCall{call("a", "x.txt"), call("b", "y.txt")}},
		{Role: core.RoleTool, ToolCallID: "a", Content: "one"},
		{Role: core.RoleTool, ToolCallID: "b", Content: "two"},
		{Role: core.RoleAssistant, Content: "Done."},
	}
	ids, mask, err := RenderTokens(tok, msgs, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	checkMask(t, "two tool responses", tok, msgs, ids, mask)
}

func TestRenderErrors(t *testing.T) {
	_, err := Render([]core.Message{{Role: "narrator", Content: "x"}}, nil, false)
	if err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("unknown role: err = %v", err)
	}
	bad := []core.ToolSpec{{Type: "function", Function: core.FunctionSpec{Name: "f", Parameters: json.RawMessage(`{"a":`)}}}
	if _, err := Render(nil, bad, false); err == nil {
		t.Fatal("tool with invalid parameters JSON rendered without error")
	}
}

func TestArgumentsRendering(t *testing.T) {
	tests := []struct{ args, want string }{
		{`{"a": 1}`, `{"a": 1}`},
		{`{"b":2,"a":[1,{"c":null}]}`, `{"b": 2, "a": [1, {"c": null}]}`}, // order kept, not sorted
		{``, `{}`},
		{`{"s":"é\u00e9\n\u0007<>&"}`, `{"s": "éé\n\u0007<>&"}`},             // no ASCII-escaping, no HTML-escaping
		{`{"x": 1.50, "y": -0, "z": 1e3}`, `{"x": 1.50, "y": -0, "z": 1e3}`}, // numbers verbatim
		{`not json`, `"not json"`},                                           // what the template does with a string
	}
	for _, tt := range tests {
		got, err := argumentsJSON(tt.args)
		if err != nil || got != tt.want {
			t.Errorf("argumentsJSON(%q) = %q, %v; want %q", tt.args, got, err, tt.want)
		}
	}
}
