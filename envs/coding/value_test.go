package coding

import (
	"encoding/json"
	"testing"
)

func mustValue(t *testing.T, s string) value {
	t.Helper()
	v, err := parseValue(json.RawMessage(s))
	if err != nil {
		t.Fatalf("parseValue(%s): %v", s, err)
	}
	return v
}

func TestValueEqual(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{`["none"]`, `["none"]`, true},
		{`["int","3"]`, `["int","3"]`, true},
		{`["int","3"]`, `["int","4"]`, false},
		{`["int","123456789012345678901234567890"]`, `["int","123456789012345678901234567890"]`, true},
		{`["int","123456789012345678901234567890"]`, `["int","123456789012345678901234567891"]`, false},
		{`["int","3"]`, `["float","3.0"]`, true},
		{`["float","0.1"]`, `["float","0.10000000000000002"]`, true},
		{`["float","0.1"]`, `["float","0.1001"]`, false},
		{`["float","nan"]`, `["float","nan"]`, false},
		{`["float","inf"]`, `["float","inf"]`, true},
		{`["float","inf"]`, `["float","-inf"]`, false},
		{`["bool",true]`, `["int","1"]`, false},
		{`["bool",true]`, `["bool",true]`, true},
		{`["str","a"]`, `["str","a"]`, true},
		{`["str","a"]`, `["bytes","61"]`, false},
		{`["list",[["int","1"],["int","2"]]]`, `["list",[["int","1"],["int","2"]]]`, true},
		{`["list",[["int","1"],["int","2"]]]`, `["list",[["int","2"],["int","1"]]]`, false},
		{`["list",[["int","1"]]]`, `["tuple",[["int","1"]]]`, false},
		{`["list",[]]`, `["list",[["int","1"]]]`, false},
		{`["set",[["int","1"]]]`, `["set",[["int","1"]]]`, true},
		{`["dict",[[["str","a"],["int","1"]]]]`, `["dict",[[["str","a"],["int","1"]]]]`, true},
		{`["dict",[[["str","a"],["int","1"]]]]`, `["dict",[[["str","a"],["int","2"]]]]`, false},
		{`["unsupported","A"]`, `["unsupported","A"]`, false},
	}
	for _, tc := range tests {
		a, b := mustValue(t, tc.a), mustValue(t, tc.b)
		if got := equal(a, b); got != tc.want {
			t.Errorf("equal(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := equal(b, a); got != tc.want {
			t.Errorf("equal(%s, %s) = %v, want %v (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestParseValueRejects(t *testing.T) {
	for _, s := range []string{
		``, `null`, `[]`, `{}`, `[1]`, `["none", 1]`, `["int"]`, `["int", 3]`, `["int","3x"]`,
		`["float","x"]`, `["bool","true"]`, `["list",{}]`, `["list",[1]]`, `["dict",[[["none"]]]]`,
		`["object","x"]`, `["str","a","b"]`,
	} {
		if _, err := parseValue(json.RawMessage(s)); err == nil {
			t.Errorf("parseValue(%s) succeeded, want an error", s)
		}
	}
	deep := `["none"]`
	for range maxValueDepth + 2 {
		deep = `["list",[` + deep + `]]`
	}
	if _, err := parseValue(json.RawMessage(deep)); err == nil {
		t.Errorf("parseValue of a value nested %d deep succeeded", maxValueDepth+2)
	}
}

// FuzzParseValue checks that decoding never panics and that every value
// that decodes (other than floats, which include nan) equals itself.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{
		`["none"]`, `["int","-12"]`, `["float","1e308"]`, `["str","x"]`, `["list",[["int","1"]]]`,
		`["dict",[[["str","k"],["set",[]]]]]`, `["unsupported","A"]`, `["float","nan"]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseValue(json.RawMessage(s))
		if err != nil {
			return
		}
		if !hasFloatOrUnsupported(v) && !equal(v, v) {
			t.Fatalf("decoded value %s does not equal itself", s)
		}
	})
}

func hasFloatOrUnsupported(v value) bool {
	if v.kind == "float" || v.kind == "unsupported" {
		return true
	}
	for _, x := range v.items {
		if hasFloatOrUnsupported(x) {
			return true
		}
	}
	return false
}
