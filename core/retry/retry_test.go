package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const limit = time.Minute
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{" 3 ", 3 * time.Second, true},
		{"0", 0, true},
		{"1.5", 1500 * time.Millisecond, true},
		{".5", 500 * time.Millisecond, true},
		{"2.", 2 * time.Second, true},
		{"3600", limit, true},
		{"99999999999999999999999999", limit, true},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1e3", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"0x10", 0, false},
		{"1.2.3", 0, false},
		{".", 0, false},
		{"", 0, false},
		{"soon", 0, false},
		{now.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{now.Add(time.Hour).Format(http.TimeFormat), limit, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{now.Add(20 * time.Second).Format(time.RFC850), 20 * time.Second, true},
		{now.Add(30 * time.Second).Format(time.ANSIC), 30 * time.Second, true},
	}
	for _, tt := range tests {
		got, ok := After(tt.v, now, limit)
		if got != tt.want || ok != tt.ok {
			t.Errorf("After(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzAfter(f *testing.F) {
	for _, s := range []string{"1", "1.25", "120", "Wed, 21 Oct 2015 07:28:00 GMT", "-5", "1e9", "99999999999999999999", "NaN"} {
		f.Add(s)
	}
	const limit = 5 * time.Minute
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := After(v, time.Now(), limit)
		if d < 0 || d > limit || (!ok && d != 0) {
			t.Fatalf("After(%q) = %v, %v", v, d, ok)
		}
	})
}

func TestCeiling(t *testing.T) {
	tests := []struct {
		attempt   int
		base, lim time.Duration
		want      time.Duration
	}{
		{0, 100 * time.Millisecond, time.Second, 100 * time.Millisecond},
		{1, 100 * time.Millisecond, time.Second, 200 * time.Millisecond},
		{3, 100 * time.Millisecond, time.Second, 800 * time.Millisecond},
		{4, 100 * time.Millisecond, time.Second, time.Second},
		{1000, 100 * time.Millisecond, time.Second, time.Second},
		{0, 2 * time.Second, time.Second, time.Second},
	}
	for _, tt := range tests {
		if got := Ceiling(tt.attempt, tt.base, tt.lim); got != tt.want {
			t.Errorf("Ceiling(%d, %v, %v) = %v, want %v", tt.attempt, tt.base, tt.lim, got, tt.want)
		}
	}
}

func TestJitterWithinBounds(t *testing.T) {
	for _, d := range []time.Duration{-1, 0, 1, time.Millisecond, time.Hour} {
		for range 100 {
			if j := Jitter(d); j < 0 || j > max(d, 0) {
				t.Fatalf("Jitter(%v) = %v", d, j)
			}
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled context: %v", err)
	}
	if err := Sleep(context.Background(), time.Microsecond); err != nil {
		t.Errorf("Sleep: %v", err)
	}
}

// Unreachable tells "nothing is there" from failures worth another try,
// through the wrapping an HTTP client adds.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := http.Get("http://" + addr + "/v1/models")
	if refused == nil {
		t.Fatalf("GET %s succeeded with nothing listening", addr)
	}
	dns := &url.Error{Op: "Get", URL: "https://api.example.invalid/x?y=z", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "api.example.invalid", IsNotFound: true}}}
	dnsTemporary := &net.DNSError{Err: "server misbehaving", Name: "api.example.invalid", IsTemporary: true}
	noRoute := &url.Error{Op: "Get", URL: "http://10.1.2.3/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 80}, Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}}
	for _, tc := range []struct {
		name  string
		err   error
		ok    bool
		cause string
	}{
		{"refused", refused, true, "connection refused: nothing listens at " + addr},
		{"refused, wrapped again", fmt.Errorf("list models: %w", refused), true, "connection refused: nothing listens at " + addr},
		{"no such host", dns, true, "host api.example.invalid not found (DNS lookup failed)"},
		{"no route", noRoute, true, "no route to the host at 10.1.2.3:80"},
		{"DNS server failure", dnsTemporary, false, ""},
		{"reset mid-answer", &url.Error{Op: "Get", URL: "http://x/", Err: syscall.ECONNRESET}, false, ""},
		{"EOF", io.ErrUnexpectedEOF, false, ""},
		{"deadline", context.DeadlineExceeded, false, ""},
		{"nil", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cause, ok := Unreachable(tc.err)
			if ok != tc.ok || cause != tc.cause {
				t.Errorf("Unreachable(%v) = %q, %v; want %q, %v", tc.err, cause, ok, tc.cause, tc.ok)
			}
			if ok && strings.Contains(cause, "?y=z") {
				t.Errorf("the cause repeats the URL: %q", cause)
			}
		})
	}
}
