package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/host/policy/fakevllm"
)

// peftDir writes the files a PEFT adapter directory starts with, of rank r.
func peftDir(t *testing.T, r int) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{"peft_type": "LORA", "r": %d, "lora_alpha": %d, "target_modules": ["q_proj", "v_proj"]}`, r, 2*r)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newTestVLLM starts a fake vLLM that answers "ok", and a vllm policy
// against it.
func newTestVLLM(t *testing.T, opts fakevllm.Options) (*VLLM, *fakevllm.Server, *sleepLog) {
	t.Helper()
	if opts.BaseModel == "" {
		opts.BaseModel = "Qwen/Qwen2.5-0.5B-Instruct"
	}
	fv := fakevllm.New(opts)
	t.Cleanup(fv.Close)
	p, err := New(Config{Name: "vl", Provider: "vllm", BaseURL: ptr(fv.URL() + "/v1"), Model: ptr(opts.BaseModel),
		MaxRetries: ptr(4), BackoffBase: ptr("1ms"), BackoffMax: ptr("4ms"), Timeout: ptr("30s")}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	v := p.(*VLLM)
	sl := &sleepLog{}
	v.sleep = sl.sleep
	return v, fv, sl
}

var hello = Request{Messages: []core.Message{{Role: core.RoleUser, Content: "hi"}}, TaskID: "t"}

func TestVLLMSwitchAdapter(t *testing.T) {
	ctx := context.Background()
	v, fv, _ := newTestVLLM(t, fakevllm.Options{AllowRuntimeLoRA: true})
	if err := v.CheckAdapterAPI(ctx); err != nil {
		t.Fatalf("CheckAdapterAPI: %v", err)
	}
	if err := v.Check(ctx, nil); err != nil {
		t.Fatalf("Check: %v", err)
	}
	resp, err := v.Complete(ctx, hello)
	if err != nil {
		t.Fatal(err)
	}
	// Always asked for: the sampled ids, the prompt's and their log-probs.
	if c := resp.Choices[0]; !slices.Equal(c.TokenIDs, []int{1}) || !slices.Equal(c.PromptTokenIDs, []int{1, 2, 3}) || len(c.LogProbs) != 1 {
		t.Errorf("choice carries ids %v, prompt ids %v, log-probs %v; want [1], [1 2 3] and one log-prob", c.TokenIDs, c.PromptTokenIDs, c.LogProbs)
	}
	for _, step := range []string{"run-step-1", "run-step-2", "run-step-3"} {
		if err := v.SwitchAdapter(ctx, step, peftDir(t, 8), 1); err != nil {
			t.Fatalf("switch to %s: %v", step, err)
		}
		if _, err := v.Complete(ctx, hello); err != nil {
			t.Fatalf("complete with %s: %v", step, err)
		}
	}
	want := []string{"Qwen/Qwen2.5-0.5B-Instruct", "run-step-1", "run-step-2", "run-step-3"}
	if got := fv.Models(); !slices.Equal(got, want) {
		t.Errorf("requests named %v, want %v", got, want)
	}
	if got, want := fv.Unloads(), []string{"run-step-1", "run-step-2"}; !slices.Equal(got, want) {
		t.Errorf("unloaded %v, want %v", got, want)
	}
	if got := fv.Loaded(); !slices.Equal(got, []string{"run-step-3"}) {
		t.Errorf("loaded now %v, want only run-step-3", got)
	}
	// The server's model check still passes with an adapter in use: the
	// base model is what the block names.
	if err := v.Check(ctx, nil); err != nil {
		t.Fatalf("Check with an adapter: %v", err)
	}
}

func TestVLLMAdapterErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts fakevllm.Options
		run  func(v *VLLM) error
		is   error
		says []string
	}{
		{"runtime updating off", fakevllm.Options{}, func(v *VLLM) error { return v.CheckAdapterAPI(ctx) },
			ErrRuntimeLoRADisabled, []string{"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True", "/v1/unload_lora_adapter"}},
		{"runtime updating off, load", fakevllm.Options{}, func(v *VLLM) error { return v.SwitchAdapter(ctx, "a", peftDir(t, 8), 1) },
			ErrRuntimeLoRADisabled, []string{"/v1/load_lora_adapter"}},
		{"rank above max_lora_rank", fakevllm.Options{AllowRuntimeLoRA: true, MaxLoRARank: 8},
			func(v *VLLM) error { return v.SwitchAdapter(ctx, "big", peftDir(t, 32), 1) },
			ErrAdapterRefused, []string{`"big"`, "HTTP 500", "max_lora_rank 8"}},
		{"no adapter at the path", fakevllm.Options{AllowRuntimeLoRA: true},
			func(v *VLLM) error { return v.SwitchAdapter(ctx, "gone", "/nonexistent/adapter", 1) },
			ErrAdapterRefused, []string{"HTTP 404", "No adapter found for /nonexistent/adapter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, fv, _ := newTestVLLM(t, tc.opts)
			err := tc.run(v)
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			for _, s := range append(tc.says, fv.URL()) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if v.Adapter() != "Qwen/Qwen2.5-0.5B-Instruct" {
				t.Errorf("after a failed load requests name %q, want the base model", v.Adapter())
			}
		})
	}
}

func TestVLLMServerRestartReloadsAdapter(t *testing.T) {
	ctx := context.Background()
	v, fv, sl := newTestVLLM(t, fakevllm.Options{AllowRuntimeLoRA: true})
	dir := peftDir(t, 8)
	if err := v.SwitchAdapter(ctx, "run-step-4", dir, 4); err != nil {
		t.Fatal(err)
	}
	fv.Restart(2)
	if _, err := v.Complete(ctx, hello); err != nil {
		t.Fatalf("complete across a restart: %v", err)
	}
	if n := len(sl.get()); n < 2 {
		t.Errorf("%d backoffs, want at least 2 (one per dropped connection)", n)
	}
	if got, want := fv.Loads(), []string{"run-step-4", "run-step-4"}; !slices.Equal(got, want) {
		t.Errorf("loads %v, want %v (the adapter loaded again)", got, want)
	}
	if v.Reloads() != 1 {
		t.Errorf("Reloads = %d, want 1", v.Reloads())
	}
	models := fv.Models()
	if models[len(models)-1] != "run-step-4" {
		t.Errorf("last request named %q, want run-step-4", models[len(models)-1])
	}
}

func TestVLLMUnknownAdapterAfterRestart(t *testing.T) {
	ctx := context.Background()
	v, fv, _ := newTestVLLM(t, fakevllm.Options{AllowRuntimeLoRA: true})
	dir := peftDir(t, 8)
	if err := v.SwitchAdapter(ctx, "run-step-2", dir, 2); err != nil {
		t.Fatal(err)
	}
	// The server forgets the adapter and its directory is gone: the
	// reload cannot help, and the error says what happened.
	fv.Restart(0)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	_, err := v.Complete(ctx, hello)
	if err == nil {
		t.Fatal("complete succeeded with an adapter the server cannot have")
	}
	for _, s := range []string{`no longer knows LoRA adapter "run-step-2"`, fv.URL(), "No adapter found for " + dir} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

func TestVLLMConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		attr string
	}{
		{"no base_url", Config{Name: "v", Provider: "vllm", Model: ptr("m")}, "base_url"},
		{"no model", Config{Name: "v", Provider: "vllm", BaseURL: ptr("http://127.0.0.1:1/v1")}, "model"},
		{"return_token_ids", Config{Name: "v", Provider: "vllm", BaseURL: ptr("http://127.0.0.1:1/v1"), Model: ptr("m"), ReturnTokenIDs: ptr(false)}, "return_token_ids"},
		{"replay's file", Config{Name: "v", Provider: "vllm", BaseURL: ptr("http://127.0.0.1:1/v1"), Model: ptr("m"), File: ptr("x.jsonl")}, "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, t.TempDir())
			d := schema.FromError(err)
			if err == nil || len(d) != 1 || !slices.Equal(d[0].Path, []string{tc.attr}) {
				t.Fatalf("err = %v, want one diagnostic on %s", err, tc.attr)
			}
		})
	}
}

// FuzzAdapterStatus feeds arbitrary answers of the adapter routes to the
// client: it never panics, succeeds exactly on 200, and names the URL.
func FuzzAdapterStatus(f *testing.F) {
	for _, seed := range []string{`{"detail":"Not Found"}`, `{"error":{"message":"x","type":"NotFoundError","code":404}}`,
		`{"object":"error","message":"old vllm"}`, `Success`, ``, `{"error":null}`, `{"detail":[1]}`} {
		f.Add(404, seed, true)
		f.Add(400, seed, false)
		f.Add(200, seed, true)
	}
	f.Fuzz(func(t *testing.T, status int, body string, load bool) {
		route := "unload_lora_adapter"
		if load {
			route = "load_lora_adapter"
		}
		err := adapterStatus("http://h/v1/"+route, route, "a", status, body)
		if (err == nil) != (status == 200) {
			t.Fatalf("status %d: err %v", status, err)
		}
		if err != nil && !strings.Contains(err.Error(), "http://h/v1/"+route) {
			t.Fatalf("error %q does not name the URL", err)
		}
	})
}
