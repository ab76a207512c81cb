package confine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
)

func TestRel(t *testing.T) {
	cases := []struct {
		in, want string
		bad      bool
	}{
		{"", ".", false},
		{"a/b", "a/b", false},
		{"a/../b", "b", false},
		{"..foo", "..foo", false},
		{"/workspace", ".", false},
		{"/workspace/x/y", "x/y", false},
		{"/workspace/../etc/passwd", "", true},
		{"/workspacex/y", "", true},
		{"/etc/shadow", "", true},
		{"..", "", true},
		{"../x", "", true},
		{"a/../../x", "", true},
		{"a\x00b", "", true},
	}
	for _, c := range cases {
		got, err := Rel("/workspace", c.in)
		if c.bad {
			if !errors.Is(err, core.ErrInvalidPath) {
				t.Errorf("Rel(%q) = %q, %v; want ErrInvalidPath", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Rel(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func FuzzRel(f *testing.F) {
	for _, s := range []string{"", "a", "../a", "/workspace/../x", "a/./b/../..", "/workspace//a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := Rel("/workspace", p)
		if err != nil {
			return
		}
		if strings.HasPrefix(rel, "/") || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("Rel(%q) = %q escapes", p, rel)
		}
	})
}

func TestEscapes(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	mustSymlink(t, secret, filepath.Join(ws, "abs-link"))
	mustSymlink(t, "../../../../../../"+secret, filepath.Join(ws, "rel-link"))
	mustSymlink(t, outside, filepath.Join(ws, "dir-link"))
	mustSymlink(t, "/proc/self/root/etc/passwd", filepath.Join(ws, "magic-link"))
	if err := os.WriteFile(filepath.Join(ws, "ok"), []byte("fine"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "ok", filepath.Join(ws, "inner-link"))
	if err := mkfifo(filepath.Join(ws, "fifo")); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ws, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	for _, p := range []string{"abs-link", "rel-link", "dir-link/secret", "magic-link", "../" + filepath.Base(outside) + "/secret", secret, "fifo"} {
		if b, err := r.ReadFile(p, 1<<20); err == nil {
			t.Errorf("ReadFile(%q) = %q; want an error", p, b)
		}
		if err := r.WriteFile(p, []byte("pwned"), 0o644, 1<<20); err == nil {
			t.Errorf("WriteFile(%q) succeeded; want an error", p)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "host secret" {
		t.Fatalf("host file changed: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("files appeared outside: %v", ents)
	}
	if b, err := r.ReadFile("inner-link", 100); err != nil || string(b) != "fine" {
		t.Fatalf("inner symlink: %q %v", b, err)
	}
	if _, err := r.ReadFile("ok", 2); !errors.Is(err, core.ErrTooLarge) {
		t.Fatalf("read cap: %v", err)
	}
	if err := r.WriteFile("big", make([]byte, 10), 0o644, 5); !errors.Is(err, core.ErrTooLarge) {
		t.Fatalf("write cap: %v", err)
	}
	if _, err := r.ReadFile("missing", 10); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

func TestWriteReadList(t *testing.T) {
	ws := t.TempDir()
	r, err := Open(ws, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.WriteFile("/workspace/a/b/c.txt", []byte("hello"), 0o4755, 100); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(ws, "a/b/c.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSetuid != 0 || st.Mode().Perm() != 0o755 {
		t.Fatalf("mode = %v; want 0755 without setuid", st.Mode())
	}
	got, err := r.ReadFile("a/b/c.txt", 100)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read back %q %v", got, err)
	}
	ents, err := r.List("a/b", 10)
	if err != nil || len(ents) != 1 || ents[0].Path != "/workspace/a/b/c.txt" || ents[0].Size != 5 {
		t.Fatalf("list = %+v %v", ents, err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
