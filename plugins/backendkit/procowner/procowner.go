// Package procowner names the process that owns a backend's sandboxes (host,
// pid and the process's start time) and tells whether that process is gone,
// so a backend can find the sandboxes of a host that died without cleaning
// up. The start time guards against a recycled pid.
//
// It only answers for processes on this host; an owner elsewhere is never
// reported dead. It stores owners as labels (Labels, FromLabels) or as one
// crash-record file per process (Records); what a record lists, and how a
// backend deletes what a dead owner left, is the backend's.
package procowner

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Owner is one process on one host.
type Owner struct {
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Start string `json:"start,omitempty"` // "<boot id prefix>/<start ticks>"; "" when unknown
}

// Current is the calling process.
func Current() Owner {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return Owner{Host: host, PID: pid, Start: ProcessStart(pid)}
}

func (o Owner) String() string { return fmt.Sprintf("pid %d on %s", o.PID, o.Host) }

// Dead reports whether o ran on host and is gone: no such pid, a zombie
// (an init that does not reap, as in some containers, leaves those), or the
// pid now belongs to a process that started at another time (or boot).
func (o Owner) Dead(host string) bool {
	if o.Host != host || o.PID <= 0 {
		return false
	}
	if err := syscall.Kill(o.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return true
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", o.PID)); err == nil {
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
				return true
			}
		}
	}
	if o.Start == "" {
		return false
	}
	now := ProcessStart(o.PID)
	return now != "" && now != o.Start
}

// Running says whether pid is still the process that started at start (a
// ProcessStart token): false once it exited, or its pid was reused, or the
// machine rebooted.
func Running(pid int, start string) bool {
	return pid > 0 && start != "" && ProcessStart(pid) == start
}

// ProcessStart identifies when pid started on this boot, or "" when that
// cannot be read.
func ProcessStart(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	ticks, ok := statStart(string(stat))
	if !ok {
		return ""
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	b := strings.TrimSpace(string(boot))
	if len(b) > 8 {
		b = b[:8]
	}
	return b + "/" + ticks
}

// statStart returns field 22 (starttime) of /proc/PID/stat. The command name
// in field 2 may hold spaces and parentheses, so fields count from the last ')'.
func statStart(stat string) (string, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 20 {
		return "", false
	}
	if _, err := strconv.ParseUint(f[19], 10, 64); err != nil {
		return "", false
	}
	return f[19], true
}
