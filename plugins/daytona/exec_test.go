package daytona

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
)

// hostile are arguments a naive quoting would break or execute.
var hostile = []string{
	"$(touch pwned)", "`touch pwned2`", "a'b", `"dq"`, `back\slash`, "semi;colon && touch pwned3",
	"new\nline", "tab\tx", "*", "~", "$HOME", "", "  spaces  ", "-n", "--", "ünïcødé",
	"\x01\x02\x7f\xff", `'"'"'`, "'", `"`, "|", ">out", "<in", "&", "#comment", "\\'", "${IFS}",
}

func TestHostileArgv(t *testing.T) {
	t.Parallel()
	for _, mode := range []fakedaytona.ExecMode{fakedaytona.ExecShell, fakedaytona.ExecArgv} {
		t.Run(string(mode), func(t *testing.T) {
			srv := newFake(t, fakedaytona.Options{ExecMode: mode})
			b, d := configure(t, srv, t.TempDir(), core.SandboxSpec{}, nil)
			if d.HasErrors() {
				t.Fatal(d.Err())
			}
			defer b.Shutdown(context.Background())
			info, err := b.Create(context.Background(), core.SandboxSpec{})
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"HOSTILE": "$(touch pwned4)'\"`x`\n"}
			res, err := b.Exec(context.Background(), info.ID, core.ExecRequest{
				Command: append([]string{"printf", `%s\0`}, append(hostile, "env:")...),
				Env:     env,
			})
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(res.Stdout, "\x00"), "\x00")
			want := append(append([]string(nil), hostile...), "env:")
			if len(got) != len(want) {
				t.Fatalf("got %d args %q, want %d", len(got), got, len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("arg %d = %q, want %q", i, got[i], want[i])
				}
			}
			res, err = b.Exec(context.Background(), info.ID, core.ExecRequest{Command: []string{"sh", "-c", `printf %s "$HOSTILE"`}, Env: env})
			if err != nil || res.Stdout != env["HOSTILE"] {
				t.Errorf("env value: %q, %v", res.Stdout, err)
			}
			files, err := b.ListFiles(context.Background(), info.ID, ".")
			if err != nil || len(files) != 0 {
				t.Errorf("an argument was executed; workspace holds %+v (%v)", files, err)
			}
		})
	}
}

func TestExecRejectsUnpassable(t *testing.T) {
	t.Parallel()
	for _, sc := range []execScript{
		{},
		{argv: []string{""}},
		{argv: []string{"echo", "a\x00b"}},
		{argv: []string{"true"}, env: map[string]string{"A-B": "x"}},
		{argv: []string{"true"}, env: map[string]string{"A": "x\x00"}},
	} {
		if err := sc.validate(); err == nil {
			t.Errorf("%+v validated", sc)
		}
	}
}

// FuzzShQuote checks that a real sh reads back exactly what was quoted.
func FuzzShQuote(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			return
		}
		out, err := exec.Command("/bin/sh", "-c", "printf %s "+sandboxplugin.ShellQuote(s)).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		if string(out) != s {
			t.Fatalf("quoted %q read back as %q", s, out)
		}
	})
}

// FuzzSplitInline checks the outer command against the old daemon's
// tokenizer: whatever the script, it must come out as sh, -c, one word.
func FuzzSplitInline(f *testing.F) {
	f.Add("echo hi")
	f.Add("'\"$(x)`\n")
	f.Fuzz(func(t *testing.T, script string) {
		cmd := inlineCommand(script)
		words := strings.Fields(strings.NewReplacer(`"`, "", `'`, "").Replace(cmd))
		if words[0] != "sh" || words[1] != "-c" || words[2] != "eval" {
			t.Fatalf("command %q", cmd)
		}
		b64 := base64.StdEncoding.EncodeToString([]byte(script))
		if !strings.Contains(cmd, " "+b64+" ") {
			t.Fatalf("payload not carried verbatim")
		}
	})
}

func TestParseFrame(t *testing.T) {
	t.Parallel()
	n := "rlhostabc"
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name, out      string
		ok             bool
		rc             int
		stdout, stderr string
	}{
		{"plain", n + "|0|" + enc("hi\n") + "|" + enc("err") + "|" + n + "\n", true, 0, "hi\n", "err"},
		{"empty streams", n + "|7|||" + n + "\n", true, 7, "", ""},
		{"wrapped base64", n + "|0|" + enc(strings.Repeat("x", 60))[:40] + "\n" + enc(strings.Repeat("x", 60))[40:] + "\n|" + enc("e") + "\n|" + n + "\n", true, 0, strings.Repeat("x", 60), "e"},
		{"noise before", "sh: warning\n" + n + "|1|" + enc("x") + "||" + n + "\n", true, 1, "x", ""},
		{"fake frame before real", "rlhostzzz|0|||rlhostzzz\n" + n + "|2|||" + n, true, 2, "", ""},
		{"no frame", "boom", false, 0, "", ""},
		{"unterminated", n + "|0|||", false, 0, "", ""},
		{"bad rc", n + "|x|||" + n, false, 0, "", ""},
		{"rc out of range", n + "|300|||" + n, false, 0, "", ""},
		{"bad base64", n + "|0|!!!||" + n, false, 0, "", ""},
		{"extra field", n + "|0||||" + n, false, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr, err := parseFrame(tt.out, n)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok && (fr.exitCode != tt.rc || string(fr.stdout) != tt.stdout || string(fr.stderr) != tt.stderr) {
				t.Errorf("frame %+v", fr)
			}
		})
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add("rlhostn|0|aGk=||rlhostn\n", []byte("out"), []byte("err"), uint8(3))
	f.Add("junk", []byte{}, []byte{0xff}, uint8(0))
	f.Fuzz(func(t *testing.T, noise string, so, se []byte, rc uint8) {
		const n = "rlhostfuzznonce"
		parseFrame(noise, n) // must not panic
		if strings.Contains(noise, n) {
			return
		}
		out := noise + n + "|" + strconv.Itoa(int(rc)) + "|" + base64.StdEncoding.EncodeToString(so) + "|" +
			base64.StdEncoding.EncodeToString(se) + "|" + n + "\n"
		fr, err := parseFrame(out, n)
		if err != nil {
			t.Fatalf("parse %q: %v", out, err)
		}
		if fr.exitCode != int(rc) || !bytes.Equal(fr.stdout, so) || !bytes.Equal(fr.stderr, se) {
			t.Fatalf("round trip: %+v", fr)
		}
	})
}

func FuzzParseModeString(f *testing.F) {
	for _, s := range []string{"-rw-r--r--", "drwxr-xr-x", "dtrwxrwxrwx", "Lrwxrwxrwx", "", "x"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, dir bool) {
		m := parseModeString(s, dir)
		if m&^uint32(os.ModeDir) > 0o777 || (m&uint32(os.ModeDir) != 0) != dir {
			t.Fatalf("%q dir=%v: mode %o", s, dir, m)
		}
	})
}

func TestParseModeString(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]uint32{"-rw-r--r--": 0o644, "-rwxr-x---": 0o750, "dtrwxrwxrwx": 0o777, "--": 0} {
		if got := parseModeString(s, false); got != want {
			t.Errorf("%q: %o, want %o", s, got, want)
		}
	}
}
