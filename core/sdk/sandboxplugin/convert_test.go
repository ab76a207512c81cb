package sandboxplugin

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rlhost/rlhost/core"
)

func TestInvalidUTF8Survives(t *testing.T) {
	info := fromSandboxInfo(core.SandboxInfo{ID: "x", Labels: map[string]string{"k": "v\xfe"}})
	if _, err := proto.Marshal(info); err != nil {
		t.Fatalf("labels with invalid UTF-8: %v", err)
	}
}
