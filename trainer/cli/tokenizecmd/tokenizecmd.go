// Package tokenizecmd implements `rlhost tokenize`: encode text to token ids
// (or decode ids to text) with a Hugging Face tokenizer.json, for checking
// prompts and debugging tokenization from the shell. It only parses flags and
// prints; the work is done by package tokenizer.
package tokenizecmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/rlhost/rlhost/core/cliflag"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

const usage = `Usage: rlhost tokenize --tokenizer FILE|DIR --text TEXT [--json] [--decode]

Encode TEXT with a byte-level BPE tokenizer (Qwen2/2.5/3 tokenizer.json) and
print the token ids, space-separated. Special tokens written in TEXT, such as
<|im_start|>, are encoded as single tokens.

With --decode, TEXT is a list of ids separated by commas and/or spaces, and
the decoded text is printed.

--tokenizer takes a tokenizer.json file, or a directory holding one (and
optionally tokenizer_config.json, for the EOS and padding tokens).

Examples:
  rlhost tokenize --tokenizer .cache/qwen-tokenizer --text 'Hello world'
  rlhost tokenize --tokenizer .cache/qwen-tokenizer --text 'Hello world' --json
  rlhost tokenize --tokenizer .cache/qwen-tokenizer --decode --text '9707,1879'
`

// Main runs the command with args (without the "tokenize" word) and returns
// the process exit code: 0 on success, 2 for usage errors, 1 otherwise.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cliflag.New("rlhost tokenize", usage, stdout, stderr)
	tokPath := fs.String("tokenizer", "", "tokenizer.json file or a directory containing it (required)")
	text := fs.String("text", "", "text to encode, or ids to decode with --decode (required)")
	asJSON := fs.Bool("json", false, `print {"ids":[...],"tokens":[...]} (with --decode: {"text":"..."})`)
	decode := fs.Bool("decode", false, "decode the ids in --text instead of encoding")
	if done, code := cliflag.Parse(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tokenize: unexpected arguments %q (quote the text and pass it with --text)\n", fs.Args())
		return 2
	}
	if *tokPath == "" || !fs.Changed("text") {
		fmt.Fprintln(stderr, "tokenize: --tokenizer and --text are required (see --help)")
		return 2
	}
	if err := ctx.Err(); err != nil {
		fmt.Fprintf(stderr, "tokenize: %v\n", err)
		return 1
	}
	var ids []int
	if *decode { // parse the ids before the (slow) tokenizer load
		var err error
		if ids, err = parseIDs(*text); err != nil {
			fmt.Fprintf(stderr, "tokenize: %v\n", err)
			return 2
		}
	}
	tok, err := load(*tokPath)
	if err != nil {
		fmt.Fprintf(stderr, "tokenize: %v\n", err)
		return 1
	}
	if *decode {
		err = runDecode(tok, ids, *asJSON, stdout)
	} else {
		err = runEncode(tok, *text, *asJSON, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tokenize: %v\n", err)
		return 1
	}
	return 0
}

func load(path string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	if st.IsDir() {
		return tokenizer.LoadDir(path)
	}
	return tokenizer.Load(path)
}

func runEncode(tok *tokenizer.Tokenizer, text string, asJSON bool, w io.Writer) error {
	ids := tok.Encode(text)
	if !asJSON {
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i] = strconv.Itoa(id)
		}
		_, err := fmt.Fprintln(w, strings.Join(strs, " "))
		return err
	}
	out := struct {
		IDs    []int    `json:"ids"`
		Tokens []string `json:"tokens"`
	}{IDs: ids, Tokens: make([]string, len(ids))}
	for i, id := range ids {
		out.Tokens[i], _ = tok.IDToken(id)
	}
	return writeJSON(w, out)
}

// parseIDs reads ids separated by commas and/or whitespace.
func parseIDs(list string) ([]int, error) {
	fields := strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	ids := make([]int, len(fields))
	for i, f := range fields {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("--text: id %d %q is not an integer", i, f)
		}
		ids[i] = id
	}
	return ids, nil
}

func runDecode(tok *tokenizer.Tokenizer, ids []int, asJSON bool, w io.Writer) error {
	for _, id := range ids {
		if _, ok := tok.IDToken(id); !ok {
			return fmt.Errorf("--text: id %d is not in the vocabulary (size %d)", id, tok.VocabSize())
		}
	}
	text := tok.Decode(ids)
	if asJSON {
		return writeJSON(w, struct {
			Text string `json:"text"`
		}{text})
	}
	_, err := fmt.Fprintln(w, text)
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // keep <|im_start|> readable
	return enc.Encode(v)
}
