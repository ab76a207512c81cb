package jsonl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestEach(t *testing.T) {
	var got []string
	err := Each(strings.NewReader("{\"a\":1}\n\n  \n {\"a\":2} \r\n"), "", 1<<10, func(n int, line []byte) error {
		got = append(got, fmt.Sprint(n, string(line)))
		return nil
	})
	if err != nil || strings.Join(got, "|") != `1{"a":1}|4{"a":2}` {
		t.Errorf("lines %q, err %v", got, err)
	}
	boom := errors.New("boom")
	err = Each(strings.NewReader("x\n\ny\n"), "", 1<<10, func(_ int, line []byte) error {
		if string(line) == "y" {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "line 3: ") {
		t.Errorf("error %v: want line 3 wrapping boom", err)
	}
	err = Each(strings.NewReader("ok\n\nbad\n"), "f.jsonl", 1<<10, func(_ int, line []byte) error {
		if string(line) == "bad" {
			return boom
		}
		return nil
	})
	if err == nil || err.Error() != "f.jsonl:3: boom" {
		t.Errorf("named error %v: want f.jsonl:3: boom", err)
	}
	err = Each(strings.NewReader(strings.Repeat("x", 100)+"\n"), "", 10, func(int, []byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "longer than 10 bytes") {
		t.Errorf("long line: %v", err)
	}
}

func TestDecodeStrict(t *testing.T) {
	var v struct{ A int }
	for line, bad := range map[string]string{
		`{"A":1}`:         "",
		`{"A":1,"B":2}`:   "unknown field",
		`{"A":1} {"A":2}`: "trailing data",
		`{"A":`:           "EOF",
	} {
		err := DecodeStrict([]byte(line), &v)
		if (bad == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), bad)) {
			t.Errorf("DecodeStrict(%s) = %v; want %q", line, err, bad)
		}
	}
}

func FuzzEach(f *testing.F) {
	f.Add("{}\n\n{\"a\":[1,2]}\n", 64)
	f.Add("x", 1)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 1 || max > 1<<16 {
			return
		}
		n := 0
		_ = Each(strings.NewReader(s), "", max, func(_ int, line []byte) error {
			if len(line) == 0 || len(line) > max {
				t.Fatalf("line of %d bytes with max %d", len(line), max)
			}
			n++
			return nil
		})
		if n > strings.Count(s, "\n")+1 {
			t.Fatalf("%d lines from %d newlines", n, strings.Count(s, "\n"))
		}
	})
}
