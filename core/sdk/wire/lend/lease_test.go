package lend

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A lease's token never reaches a log line through the Lease's formatting.
func TestLeaseFormatsWithoutItsToken(t *testing.T) {
	ls := NewLease("/tmp/rlhost-backend-1/sandbox.sock", []byte("secret-token"))
	// As it is, and inside a struct that holds it unexported (fmt calls no
	// method there) or exported.
	held := struct {
		id    string
		lease Lease
		Lease Lease
	}{"sb-1", ls, ls}
	leaks := func(got string) bool {
		return strings.Contains(got, "secret") || strings.Contains(got, "115 101 99") || strings.Contains(got, "736563726574")
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		for _, v := range []any{ls, held} {
			if got := fmt.Sprintf(verb, v); leaks(got) {
				t.Errorf("%s: %s", verb, got)
			}
		}
	}
	js, err := json.Marshal(held)
	if err != nil || leaks(string(js)) || strings.Contains(string(js), "c2VjcmV0") {
		t.Errorf("JSON: %s, %v", js, err)
	}
}
