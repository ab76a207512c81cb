package fakedaytona

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/daytonaio/daytona/libs/sdk-go/pkg/options"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/types"

	"github.com/rlhost/rlhost/plugins/fakelatency"
)

// With a latency model, a sandbox starts, a command runs and a file
// arrives no sooner than the model says; the SDK waits it out.
func TestLatencyModel(t *testing.T) {
	lat := fakelatency.Model{
		Create: fakelatency.Latency{Base: 300 * time.Millisecond, Jitter: 50 * time.Millisecond, Dist: fakelatency.Uniform},
		Exec:   fakelatency.Latency{Base: 200 * time.Millisecond},
		Files:  fakelatency.Latency{Base: 100 * time.Millisecond, Jitter: 20 * time.Millisecond, Dist: fakelatency.Exponential},
		Seed:   3,
	}
	s, c := start(t, Options{Latency: lat})
	ctx := context.Background()
	began := time.Now()
	sb, err := c.Create(ctx, types.ImageParams{Image: "alpine:3"}, options.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Delete(ctx)
	if took := time.Since(began); took < lat.Create.Base {
		t.Errorf("the sandbox started after %s, before its create latency %s", took, lat.Create.Base)
	}
	began = time.Now()
	if res, err := sb.Process.ExecuteCommand(ctx, "echo hi"); err != nil || res.Result != "hi\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if took := time.Since(began); took < lat.Exec.Base {
		t.Errorf("exec answered after %s, before its latency %s", took, lat.Exec.Base)
	}
	began = time.Now()
	if err := sb.FileSystem.UploadFile(ctx, []byte("x"), "/tmp/f"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < lat.Files.Base {
		t.Errorf("upload answered after %s, before its latency %s", took, lat.Files.Base)
	}
	if n := s.Count("GET", "/api/sandbox/"+sb.ID, 200); n < 2 {
		t.Errorf("the SDK polled %d times while the sandbox was creating", n)
	}
}

// A sandbox whose create latency has not passed stays "creating" however
// often it is polled, even with StartPolls < 0.
func TestCreateLatencyHoldsTheState(t *testing.T) {
	s, _ := start(t, Options{StartPolls: -1, Latency: fakelatency.Model{Create: fakelatency.Latency{Base: time.Hour}}})
	call := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return out
	}
	id, _ := call("POST", "/sandbox", `{}`)["id"].(string)
	if id == "" {
		t.Fatal("create returned no id")
	}
	for range 5 {
		if st := call("GET", "/sandbox/"+id, "")["state"]; st != "creating" {
			t.Fatalf("state %v, want creating for an hour", st)
		}
	}
}
