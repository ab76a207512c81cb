package rlhostpb

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rlhost/rlhost/core"
)

func TestInvalidUTF8Survives(t *testing.T) {
	fs := FromFiles([]core.FileInfo{{Path: "a\xff.txt"}})
	if _, err := proto.Marshal(fs); err != nil {
		t.Fatalf("a file name with invalid UTF-8 breaks the listing: %v", err)
	}
	in := core.ExecRequest{Command: []string{"echo", "\xff"}, Env: map[string]string{"A": "\xff"}, Dir: "/w\xff"}
	b, err := proto.Marshal(FromExecRequest("id", in))
	if err != nil {
		t.Fatalf("exec request with invalid UTF-8: %v", err)
	}
	var back ExecRequest
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got := ToExecRequest(&back)
	if got.Command[1] != "\xff" || got.Env["A"] != "\xff" || got.Dir != "/w\xff" {
		t.Errorf("argv, env or dir bytes changed: %+v", got)
	}
}
