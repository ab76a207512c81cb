// Package tokenizertest finds the real Qwen tokenizer fixture and the
// reference outputs that scripts/tokenizer/fetch.sh builds, for tests in any
// package. It does not fetch anything itself: tests never touch the network.
package tokenizertest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// EnvDir overrides where the fixture is looked for.
const EnvDir = "RLHOST_QWEN_TOKENIZER"

// EnvRequire, when "1", turns a missing fixture into a test failure (CI sets
// it after running the fetch script).
const EnvRequire = "RLHOST_REQUIRE_FIXTURES"

// FetchCommand is what a developer runs to get the fixture.
const FetchCommand = "bash scripts/tokenizer/fetch.sh"

// ModuleRoot walks up from the working directory to the directory holding
// go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("tokenizertest: getwd: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("tokenizertest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Dir returns the directory holding tokenizer.json, tokenizer_config.json and
// ref/. When it is missing the test is skipped loudly, or fails when
// RLHOST_REQUIRE_FIXTURES=1.
func Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvDir)
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".cache", "qwen-tokenizer")
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "ref/summary.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			msg := fmt.Sprintf("QWEN TOKENIZER FIXTURE MISSING (%s): run `%s` (or set %s). "+
				"Tests against the real tokenizer did NOT run.", filepath.Join(dir, f), FetchCommand, EnvDir)
			if os.Getenv(EnvRequire) == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return dir
}

// ReadJSONL decodes every line of dir/ref/name into a T.
func ReadJSONL[T any](t testing.TB, dir, name string) []T {
	t.Helper()
	path := filepath.Join(dir, "ref", name)
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open reference %s: %v", path, err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return out
}

// Summary is ref/summary.json as written by scripts/tokenizer/reference.mjs.
type Summary struct {
	CorpusSHA256       map[string]string `json:"corpus_sha256"`
	Documents          int               `json:"documents"`
	SplitCases         int               `json:"split_cases"`
	ChatCases          int               `json:"chat_cases"`
	NaiveJSEncodeDiffs int               `json:"naive_js_encode_diffs"`
	NaiveJSSplitDiffs  int               `json:"naive_js_split_diffs"`
	JSCorpusTokens     int               `json:"js_corpus_tokens"`
	JSTokensPerSec     float64           `json:"js_tokens_per_sec"`
	Node               string            `json:"node"`
}

// ReadSummary loads dir/ref/summary.json.
func ReadSummary(t testing.TB, dir string) Summary {
	t.Helper()
	path := filepath.Join(dir, "ref", "summary.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var s Summary
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return s
}
