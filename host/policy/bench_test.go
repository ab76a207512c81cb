package policy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/host/policy/fakeopenai"
)

const benchBody = `{"model":"fake-model","messages":[{"role":"system","content":"You are a careful programmer."},{"role":"user","content":"Write add(a, b)."}],"stream":false}`

// BenchmarkRawHTTPRoundTrip is the baseline for BenchmarkOpenAIComplete: the
// same request to the same fake server with net/http alone.
func BenchmarkRawHTTPRoundTrip(b *testing.B) {
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("def add(a, b): return a + b")))
	defer srv.Close()
	c := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer c.CloseIdleConnections()
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/chat/completions", strings.NewReader(benchBody))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkOpenAIComplete measures the client's own overhead (conversion,
// go-openai encoding and decoding, retry bookkeeping) over a local round trip.
func BenchmarkOpenAIComplete(b *testing.B) {
	srv := fakeopenai.New(fakeopenai.Always(fakeopenai.Text("def add(a, b): return a + b")))
	defer srv.Close()
	url := srv.URL
	p, err := New(Config{Name: "bench", Provider: "openai", BaseURL: &url, Model: ptr("fake-model")}, "")
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	req := Request{Messages: conversation[:2]}
	for b.Loop() {
		if _, err := p.Complete(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
