package coding

import (
	"strings"
	"testing"
)

var defaultOrder = []string{ExtractFenced, ExtractAnswer, ExtractRaw}

func TestExtract(t *testing.T) {
	tests := []struct {
		name       string
		text       string
		order      []string
		wantCode   string
		wantMethod string
	}{
		{"python fence", "Here:\n```python\ndef f(x):\n    return x\n```\nDone.", defaultOrder, "def f(x):\n    return x", ExtractFenced},
		{"py tag and CRLF", "```py\r\nx = 1\r\n```\r\n", defaultOrder, "x = 1", ExtractFenced},
		{"bare fence", "```\nx = 2\n```", defaultOrder, "x = 2", ExtractFenced},
		{"python wins over bare", "```\nbare\n```\n```python\npy\n```", defaultOrder, "py", ExtractFenced},
		{"last python block", "```python\nfirst\n```\ntext\n```python\nsecond\n```", defaultOrder, "second", ExtractFenced},
		{"other language ignored", "```text\nnot code\n```\n```python\ncode\n```", defaultOrder, "code", ExtractFenced},
		{"only other language falls to raw", "```bash\nls\n```", defaultOrder, "```bash\nls\n```", ExtractRaw},
		{"unclosed fence", "```python\ndef f():\n    return 1", defaultOrder, "def f():\n    return 1", ExtractFenced},
		{"longer fence keeps inner backticks", "````python\ns = '```'\n```\n````", defaultOrder, "s = '```'\n```", ExtractFenced},
		{"indented fence", "  ```python\n  x = 3\n  ```", defaultOrder, "  x = 3", ExtractFenced},
		{"tag with attributes", "```Python title=a.py\nx = 4\n```", defaultOrder, "x = 4", ExtractFenced},
		{"empty fence skipped", "```python\n\n```\n<answer>y = 1</answer>", defaultOrder, "y = 1", ExtractAnswer},
		{"answer tag", "think...\n<answer>\ndef f():\n    return 2\n</answer>", defaultOrder, "def f():\n    return 2", ExtractAnswer},
		{"answer with fence inside", "<answer>\n```python\nz = 1\n```\n</answer>", []string{ExtractAnswer}, "z = 1", ExtractAnswer},
		{"last answer", "<answer>a = 1</answer> <answer>b = 2</answer>", defaultOrder, "b = 2", ExtractAnswer},
		{"unclosed answer", "<answer>\nc = 3\n", defaultOrder, "c = 3", ExtractAnswer},
		{"answer before fenced when ordered", "<answer>a = 1</answer>\n```python\nb = 2\n```", []string{ExtractAnswer, ExtractFenced}, "a = 1", ExtractAnswer},
		{"raw", "\n\ndef f():\n    return 3\n\n", defaultOrder, "def f():\n    return 3", ExtractRaw},
		{"raw keeps first indentation", "\n   x = 1\n", defaultOrder, "   x = 1", ExtractRaw},
		{"nothing without raw", "just prose", []string{ExtractFenced, ExtractAnswer}, "", ""},
		{"blank", " \n\t\n", defaultOrder, "", ""},
		{"empty", "", defaultOrder, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, method := extract(tc.text, tc.order)
			if code != tc.wantCode || method != tc.wantMethod {
				t.Errorf("extract(%q) = (%q, %q), want (%q, %q)", tc.text, code, method, tc.wantCode, tc.wantMethod)
			}
		})
	}
}

// FuzzExtract checks the extractor's invariants on any input: it does not
// panic, what it returns is a substring of the input (so the code run is
// always something the model wrote), it is non-blank exactly when a method
// is reported, and it is idempotent for raw extraction.
func FuzzExtract(f *testing.F) {
	for _, s := range []string{
		"```python\nx=1\n```", "<answer>y</answer>", "```", "````\n```\n````", "<answer>", "```python",
		"a\n```\nb\n```\nc", "<answer>```python\nq\n```</answer>", "\r\n```py\r\nz\r\n```\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, order := range [][]string{defaultOrder, {ExtractAnswer}, {ExtractFenced}, {ExtractRaw}} {
			code, method := extract(text, order)
			if !strings.Contains(text, code) {
				t.Fatalf("extract(%q, %v) = %q, not a substring", text, order, code)
			}
			if (method == "") != (strings.TrimSpace(code) == "") {
				t.Fatalf("extract(%q, %v) = (%q, %q): method and code disagree", text, order, code, method)
			}
		}
		raw := trimBlankLines(text)
		if trimBlankLines(raw) != raw {
			t.Fatalf("trimBlankLines not idempotent on %q", text)
		}
	})
}
