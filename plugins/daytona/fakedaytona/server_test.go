package fakedaytona

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/daytonaio/daytona/libs/sdk-go/pkg/daytona"
	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/options"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/types"
)

func start(t *testing.T, opts Options) (*Server, *sdk.Client) {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := sdk.NewClientWithConfig(&types.DaytonaConfig{APIKey: s.APIKey, APIUrl: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// TestSDKRoundTrip drives the fake with the unmodified SDK: create and wait
// for start (polling), exec, upload, download, list, stop, delete.
func TestSDKRoundTrip(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the SDK's DownloadFile leaves a temp file behind
	s, c := start(t, Options{StartPolls: 2})
	ctx := context.Background()
	sb, err := c.Create(ctx, types.ImageParams{
		SandboxBaseParams: types.SandboxBaseParams{Name: "box", Labels: map[string]string{"a": "1"}, EnvVars: map[string]string{"X": "y"}},
		Image:             "alpine:3",
		Resources:         &types.Resources{CPU: 2, Memory: 4},
	}, options.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Count("GET", "/api/sandbox/"+sb.ID, 200); got < 2 {
		t.Errorf("SDK polled %d times, want at least 2", got)
	}
	fs, _ := s.Sandbox("box")
	if fs.CPU != 2 || fs.Memory != 4 || fs.Dockerfile != "FROM alpine:3" || fs.Labels["a"] != "1" {
		t.Errorf("server saw %+v", fs)
	}
	res, err := sb.Process.ExecuteCommand(ctx, `echo "$X"; exit 4`)
	if err != nil || res.ExitCode != 4 || res.Result != "y\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if err := sb.FileSystem.UploadFile(ctx, []byte("data"), "/tmp/d/f.txt"); err != nil {
		t.Fatal(err)
	}
	got, err := sb.FileSystem.DownloadFile(ctx, "/tmp/d/f.txt", nil)
	if err != nil || string(got) != "data" {
		t.Fatalf("download %q %v", got, err)
	}
	rc, err := sb.FileSystem.DownloadFileStream(ctx, "/tmp/d/missing")
	if err == nil {
		rc.Close()
		t.Error("streamed a missing file")
	}
	list, err := sb.FileSystem.ListFiles(ctx, "/tmp/d")
	if err != nil || len(list) != 1 || list[0].Name != "f.txt" {
		t.Fatalf("list %+v %v", list, err)
	}
	page, err := c.List(ctx, map[string]string{"a": "1"}, nil, nil)
	if err != nil || page.Total != 1 {
		t.Fatalf("list sandboxes %+v %v", page, err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if len(s.Sandboxes()) != 0 {
		t.Error("sandbox survived delete")
	}
	var nf *sdkerrors.DaytonaNotFoundError
	if _, err := c.Get(ctx, "box"); !errors.As(err, &nf) {
		t.Errorf("get deleted: %v", err)
	}
}

func TestFaults(t *testing.T) {
	s, c := start(t, Options{StartPolls: -1})
	ctx := context.Background()
	s.RateLimitCreates(1, 2*time.Second)
	_, err := c.Create(ctx, types.SnapshotParams{})
	var rl *sdkerrors.DaytonaRateLimitError
	if !errors.As(err, &rl) || rl.Headers.Get("Retry-After") != "2" {
		t.Errorf("rate limit: %v", err)
	}
	s.FailCreates(1, 400)
	if _, err := c.Create(ctx, types.SnapshotParams{}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("failed create: %v", err)
	}
	sb, err := c.Create(ctx, types.SnapshotParams{})
	if err != nil {
		t.Fatal(err)
	}
	s.FailDeletes(1, 0)
	if err := sb.Delete(ctx); err == nil {
		t.Error("delete fault not injected")
	}
	if err := sb.Delete(ctx); err != nil {
		t.Errorf("delete after fault: %v", err)
	}
	s.SetAPIKey("new")
	if _, err := c.List(ctx, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("old key accepted: %v", err)
	}
}

func TestSplitCommand(t *testing.T) {
	tests := map[string][]string{
		"echo hi":                  {"echo", "hi"},
		`echo "a b" 'c d'`:         {"echo", "a b", "c d"},
		`sh -c 'echo "x"'`:         {"sh", "-c", `echo "x"`},
		`a'b'"c"`:                  {"abc"},
		"  ":                       nil,
		"x ''":                     {"x"},
		`'it'"'"'s'`:               {"it's"},
		"tab\tstays":               {"tab\tstays"},
		`sh -c 'eval "$(printf)"'`: {"sh", "-c", `eval "$(printf)"`},
	}
	for in, want := range tests {
		if got := splitCommand(in); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func FuzzSplitCommand(f *testing.F) {
	f.Add("a 'b c' \"d\"")
	f.Add(`'''"`)
	f.Fuzz(func(t *testing.T, s string) {
		for _, w := range splitCommand(s) {
			if w == "" {
				t.Fatalf("%q: empty word", s)
			}
		}
	})
}
