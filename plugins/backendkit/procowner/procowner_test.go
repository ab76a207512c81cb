package procowner

import (
	"os"
	"os/exec"
	"testing"
)

func TestStatStart(t *testing.T) {
	for _, tc := range []struct {
		stat, want string
		ok         bool
	}{
		{"1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42 100 200", "42", true},
		{"7 (a) b (c)) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 99 100", "99", true},
		{"7 (short) S 0 1", "", false},
		{"no paren", "", false},
		{"1 (x) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 nan 1", "", false},
	} {
		got, ok := statStart(tc.stat)
		if got != tc.want || ok != tc.ok {
			t.Errorf("statStart(%q) = %q, %v; want %q, %v", tc.stat, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDead(t *testing.T) {
	me := Current()
	if me.Start == "" {
		t.Fatal("no start time for the current process")
	}
	if me.Dead(me.Host) {
		t.Error("the current process reads as dead")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := Owner{Host: me.Host, PID: cmd.Process.Pid}
	if !gone.Dead(me.Host) {
		t.Error("an exited child reads as alive")
	}
	if gone.Dead("elsewhere") {
		t.Error("an owner on another host reads as dead")
	}
	recycled := Owner{Host: me.Host, PID: os.Getpid(), Start: "00000000/1"}
	if !recycled.Dead(me.Host) {
		t.Error("a recycled pid reads as alive")
	}
}
