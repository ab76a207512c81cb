package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
)

var testSpec = Spec{
	Attributes: []Attribute{
		StringList("words", "one task per word").WithDefault([]string{"hello"}),
		Number("max_turns", "turns").WithDefault(3),
		String("key", "secret").MarkSensitive(),
		Bool("strict", "").MarkRequired(),
		StringMap("env", ""),
	},
	Blocks: []Block{
		SingleBlock("grader", "", Spec{Attributes: []Attribute{String("cmd", "").WithDefault("pytest")}}),
		ListBlock("tool", "", Spec{Attributes: []Attribute{String("name", "").MarkRequired(), Number("timeout", "").WithDefault(5)}}),
	},
}

func TestConstructors(t *testing.T) {
	a := testSpec.Attributes
	if a[0].Type != cty.List(cty.String) || string(a[0].Default) != `["hello"]` || a[0].Description != "one task per word" {
		t.Errorf("StringList: %+v", a[0])
	}
	if a[1].Type != cty.Number || string(a[1].Default) != "3" {
		t.Errorf("Number: %+v", a[1])
	}
	if !a[2].Sensitive || a[2].Required || a[3].Type != cty.Bool || !a[3].Required || a[4].Type != cty.Map(cty.String) {
		t.Errorf("String/Bool/StringMap: %+v", a[2:])
	}
	if b := testSpec.Blocks; b[0].Nesting != NestingSingle || b[1].Nesting != NestingList {
		t.Errorf("blocks: %+v", b)
	}
	// A schema built with constructors survives the JSON the plugin
	// protocol carries it in.
	js, err := json.Marshal(testSpec)
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := json.Unmarshal(js, &back); err != nil || !reflect.DeepEqual(back, testSpec) {
		t.Errorf("round trip: %v\n%+v\n%+v", err, back, testSpec)
	}
}

func TestComplete(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, err string
	}{
		{name: "defaults", in: `{"strict": true}`,
			want: `{"env":null,"grader":null,"key":null,"max_turns":3,"strict":true,"tool":[],"words":["hello"]}`},
		{name: "given values win and convert", in: `{"strict": "true", "max_turns": "7", "words": ["a","b"], "grader": {}, "tool": [{"name": "sh"}]}`,
			want: `{"env":null,"grader":{"cmd":"pytest"},"key":null,"max_turns":7,"strict":true,"tool":[{"name":"sh","timeout":5}],"words":["a","b"]}`},
		{name: "required", in: `{}`, err: "strict: required"},
		{name: "required in a block", in: `{"strict": true, "tool": [{}]}`, err: "tool[0].name: required"},
		{name: "unknown", in: `{"strict": true, "wrds": []}`, err: "unknown settings: wrds"},
		{name: "wrong type", in: `{"strict": true, "max_turns": "many"}`, err: `max_turns: "many" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := testSpec.Complete([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s, %v\nwant %s", got, err, tc.want)
			}
		})
	}
}

func FuzzComplete(f *testing.F) {
	f.Add(`{"strict": true, "tool": [{"name": "x"}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		out, err := testSpec.Complete([]byte(in))
		if err != nil {
			return
		}
		// A completed object is complete: completing it again changes nothing.
		again, err := testSpec.Complete(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not idempotent: %s -> %s (%v)", out, again, err)
		}
	})
}

// Diagnostics folded into an error come back out of it, paths intact,
// through any wrapping; a wrapped cause stays reachable.
func TestDiagnosticsThroughErrors(t *testing.T) {
	cause := errors.New("no such file")
	ds := Diagnostics{
		Errorf([]string{"limits", "memory"}, "too small", "%d bytes", 5),
		Errorf([]string{"file"}, "", "open x: %w", cause),
		Warnf(nil, "just so you know", "a warning"),
	}
	err := fmt.Errorf("policy %q: %w", "p", ds.Err())
	if want := `policy "p": limits.memory: too small: 5 bytes; file: open x: no such file`; err.Error() != want {
		t.Errorf("text = %q\nwant   %q", err, want)
	}
	if !errors.Is(err, cause) {
		t.Error("the %w cause is lost")
	}
	back := FromError(err)
	if len(back) != 3 || strings.Join(back[0].Path, ".") != "limits.memory" || back[2].Severity != Warning {
		t.Errorf("FromError = %+v", back)
	}
	plain := FromError(cause)
	if len(plain) != 1 || plain[0].Path != nil || plain[0].Detail != "no such file" || !plain.HasErrors() {
		t.Errorf("FromError(plain) = %+v", plain)
	}
	if (Diagnostics{Warnf(nil, "w", "")}).Err() != nil || FromError(nil) != nil {
		t.Error("warnings alone, or no error, must give nil")
	}
}
