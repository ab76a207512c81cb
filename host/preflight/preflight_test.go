package preflight

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/policy"
	"github.com/rlhost/rlhost/host/policy/fakeopenai"
)

func ptr[T any](v T) *T { return &v }

const job = `run {}
env "e" {}

policy "vllm" {
  provider = "openai"
  model    = "m"
}
`

func TestCheckPolicy(t *testing.T) {
	f, diags := config.Parse("job.hcl", []byte(job), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("x")))
	defer srv.Close()
	srv.SetModels("m")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/v1"
	ln.Close()

	for _, tc := range []struct {
		name, url, want string
	}{
		{"up", srv.URL, ""},
		{"down", down, `policy "vllm" (job.hcl:4): GET ` + down + `/models: connection refused: nothing listens at `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.New(policy.Config{Name: "vllm", Provider: "openai", BaseURL: ptr(tc.url), Model: ptr("m"), MaxRetries: ptr(0)}, f.Dir)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			err = Check(context.Background(), f, p, nil, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Check = %v; want one line starting %q", err, tc.want)
			}
		})
	}
}

// A policy without a server (replay) and no backend: nothing to check.
func TestCheckNothing(t *testing.T) {
	f, _ := config.Parse("job.hcl", []byte(job), nil)
	if err := Check(context.Background(), f, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
}
