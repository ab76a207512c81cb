package local

import (
	"strconv"
	"strings"
	"testing"
)

// The event files as kernels write them: v1's memory.oom_control, v2's
// memory.events, and pids.events of both.
func TestKeyValue(t *testing.T) {
	for _, tc := range []struct {
		name, file, key string
		want            uint64
	}{
		{"v1 oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill", 3},
		{"v1 oom_control, no oom_kill line (before 4.13)", "oom_kill_disable 0\nunder_oom 0\n", "oom_kill", 0},
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n", "oom_kill", 2},
		{"a key that prefixes another", "oom_kill_disable 1\noom_kill 7\n", "oom_kill", 7},
		{"pids.events", "max 41\n", "max", 41},
		{"v2 pids.events with max.imposed", "max 0\nmax.imposed 5\n", "max", 0},
		{"no final newline", "max 9", "max", 9},
		{"large", "max 18446744073709551615\n", "max", 1<<64 - 1},
		{"garbage value", "max x\n", "max", 0},
		{"overflow", "max 18446744073709551616\n", "max", 1<<64 - 1},
		{"empty", "", "max", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keyValue([]byte(tc.file), tc.key); got != tc.want {
				t.Errorf("keyValue(%q, %q) = %d, want %d", tc.file, tc.key, got, tc.want)
			}
		})
	}
}

// keyValue agrees with the obvious line-by-line reading on any input and
// any key a kernel uses (one word).
func FuzzKeyValue(f *testing.F) {
	f.Add([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), "oom_kill")
	f.Add([]byte("max 41\n"), "max")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		if strings.ContainsAny(key, " \n") {
			t.Skip("kernels name their counters with one word")
		}
		var want uint64
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == key {
				want, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				break
			}
		}
		if got := keyValue(b, key); got != want {
			t.Errorf("keyValue(%q, %q) = %d, want %d", b, key, got, want)
		}
	})
}
