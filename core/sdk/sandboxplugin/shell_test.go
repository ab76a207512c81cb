package sandboxplugin

import (
	"os/exec"
	"strings"
	"testing"
)

func TestCheckArgv(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		env  map[string]string
		ok   bool
	}{
		{"plain", []string{"echo", "hi"}, map[string]string{"A_1": "x"}, true},
		{"empty argv", nil, nil, false},
		{"empty program", []string{""}, nil, false},
		{"NUL in an argument", []string{"echo", "a\x00b"}, nil, false},
		{"bad name", []string{"true"}, map[string]string{"A-B": "x"}, false},
		{"name starts with a digit", []string{"true"}, map[string]string{"1A": "x"}, false},
		{"NUL in a value", []string{"true"}, map[string]string{"A": "x\x00"}, false},
		{"quotes and newlines are fine", []string{"printf", "'\"\n$x"}, map[string]string{"A": "'\n"}, true},
	}
	for _, tt := range tests {
		if err := CheckArgv(tt.argv, tt.env); (err == nil) != tt.ok {
			t.Errorf("%s: CheckArgv = %v", tt.name, err)
		}
	}
}

// FuzzShellQuote checks that sh reads a quoted string back byte for byte.
func FuzzShellQuote(f *testing.F) {
	for _, s := range []string{"", "plain", "it's", `'"'"'`, "$HOME `id` \\n", "\xff\xfe", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			return // no shell can carry a NUL byte; CheckArgv refuses it
		}
		out, err := exec.Command("/bin/sh", "-c", "printf %s "+ShellQuote(s)).Output()
		if err != nil {
			t.Fatalf("sh on %q: %v", s, err)
		}
		if string(out) != s {
			t.Fatalf("ShellQuote(%q) came back as %q", s, out)
		}
	})
}

func TestShellExports(t *testing.T) {
	env := map[string]string{"B": "it's", "A": "$HOME\n", "C": ""}
	script := ShellExports(env) + `printf '%s|%s|%s' "$A" "$B" "$C"`
	out, err := exec.Command("/bin/sh", "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "$HOME\n|it's|" {
		t.Errorf("exports read back as %q", out)
	}
	if ShellExports(env) != ShellExports(map[string]string{"C": "", "A": "$HOME\n", "B": "it's"}) {
		t.Error("the same env rendered two ways")
	}
	if ShellExports(nil) != "" {
		t.Error("no env rendered something")
	}
}
