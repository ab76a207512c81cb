package tokenizecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/tokenizer/tokenizertest"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"--help"}, 0, "Usage: rlhost tokenize"},
		{"no flags", nil, 2, "required"},
		{"no text", []string{"--tokenizer", "x"}, 2, "required"},
		{"unknown flag", []string{"--bogus"}, 2, "unknown flag: --bogus\nRun 'rlhost tokenize --help'"},
		{"close flag", []string{"--tokeniser", "x"}, 2, "did you mean --tokenizer?"},
		{"positional", []string{"--tokenizer", "x", "--text", "a", "b"}, 2, "unexpected arguments"},
		{"missing file", []string{"--tokenizer", filepath.Join(t.TempDir(), "nope.json"), "--text", "a"}, 1, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tt.args...)
			got := stderr
			if tt.code == 0 { // help that was asked for goes to stdout
				got = stdout
			}
			if code != tt.code || !strings.Contains(got, tt.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, stdout, stderr, tt.code, tt.want)
			}
		})
	}
}

func TestEncodeDecodeQwen(t *testing.T) {
	dir := tokenizertest.Dir(t)
	file := filepath.Join(dir, "tokenizer.json")

	code, out, stderr := run(t, "--tokenizer", dir, "--text", "Hello world<|im_end|>")
	if code != 0 || out != "9707 1879 151645\n" {
		t.Fatalf("encode: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	code, out, stderr = run(t, "--tokenizer", file, "--text", "Hello world", "--json")
	var got struct {
		IDs    []int    `json:"ids"`
		Tokens []string `json:"tokens"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("encode --json: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if len(got.IDs) != 2 || got.IDs[0] != 9707 || got.Tokens[1] != "Ġworld" {
		t.Fatalf("encode --json = %+v", got)
	}

	code, out, stderr = run(t, "--tokenizer", dir, "--decode", "--text", "9707, 1879 151645")
	if code != 0 || out != "Hello world<|im_end|>\n" {
		t.Fatalf("decode: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	code, _, stderr = run(t, "--tokenizer", dir, "--decode", "--text", "1,x")
	if code != 2 || !strings.Contains(stderr, "not an integer") {
		t.Fatalf("decode bad id: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = run(t, "--tokenizer", dir, "--decode", "--text", "99999999")
	if code != 1 || !strings.Contains(stderr, "not in the vocabulary") {
		t.Fatalf("decode out-of-range id: exit %d, stderr %q", code, stderr)
	}
}
