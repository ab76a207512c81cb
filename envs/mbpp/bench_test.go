package mbpp

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/plugins/local"
)

// BenchmarkEpisode measures whole episodes on the sample set with an instant
// scripted policy (one write_file of the reference solution, then end of
// turn) through real gRPC and the local backend. In the same loop it replays
// the sandbox operations that episode performs (the probe exec, the file
// write, the kill exec under namespaces, the grader exec) directly on the
// backend, so the env's own overhead shows as a ratio over that raw cost,
// and it times a bare `/bin/true` exec as the floor of one sandbox call.
//
//	go test ./envs/mbpp/ -run '^$' -bench BenchmarkEpisode -benchtime 48x -v
func BenchmarkEpisode(b *testing.B) {
	for _, iso := range []string{"none", "namespaces"} {
		b.Run("isolation="+iso, func(b *testing.B) { benchEpisodes(b, iso) })
	}
}

func benchEpisodes(b *testing.B, isolation string) {
	ctx := context.Background()
	be := local.New()
	bcfg, _ := json.Marshal(map[string]any{"isolation": isolation, "state_dir": b.TempDir()})
	if ds := be.Configure(ctx, schema.Config{Name: "local", JSON: bcfg}, core.SandboxSpec{}); ds.HasErrors() {
		b.Fatalf("configure local backend: %v", ds.Err())
	}
	b.Cleanup(func() { _ = be.Shutdown(context.Background()) })
	sb := envtest.NewSandbox(b, be, core.SandboxSpec{}, time.Minute)
	client := envtest.Serve(b, New())
	js := []byte(`{"dataset": "sample.jsonl", "max_attempts": 1}`)
	if ds := client.Configure(ctx, schema.Config{Name: "mbpp", JSON: js, BaseDir: "../../examples/mbpp"}); ds.HasErrors() {
		b.Fatal(ds.Err())
	}
	ps, err := LoadDataset(DatasetOptions{Path: "../../examples/mbpp/sample.jsonl"})
	if err != nil {
		b.Fatal(err)
	}
	cfg := defaultConfig()
	cfg.Dataset, cfg.MaxAttempts = "sample.jsonl", 1
	if ds := cfg.check(); ds.HasErrors() {
		b.Fatal(ds.Err())
	}

	var envTime, rawTime, trueTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := ps[i%len(ps)]
		start := time.Now()
		sess, _, err := client.NewEpisode(ctx, envplugin.Episode{ID: fmt.Sprintf("bench-%d", i), Task: core.Task{ID: taskID(p)}, Sandbox: sb})
		if err != nil {
			b.Fatal(err)
		}
		args, _ := json.Marshal(map[string]string{"path": cfg.SolutionPath, "content": p.Code})
		if _, err := sess.Step(ctx, core.Message{Role: core.RoleAssistant, ToolCalls: []core.ToolCall{{ID: "w", Type: "function",
			Function: core.FunctionCall{Name: ToolWriteFile, Arguments: string(args)}}}}); err != nil {
			b.Fatal(err)
		}
		obs, err := sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "done"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sess.End(ctx, ""); err != nil {
			b.Fatal(err)
		}
		envTime += time.Since(start)
		if obs.Reward != 1 {
			b.Fatalf("task %d: reward %v", p.TaskID, obs.Reward)
		}

		// The same sandbox operations, straight on the backend.
		start = time.Now()
		rt, err := probe(ctx, sb, &cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := sb.WriteFile(ctx, "solution.py", []byte(p.Code), 0o644); err != nil {
			b.Fatal(err)
		}
		g, err := grade(ctx, sb, rt, &cfg, p)
		if err != nil || !g.Passed() {
			b.Fatalf("raw grade of %d: %v %+v", p.TaskID, err, g)
		}
		rawTime += time.Since(start)

		start = time.Now()
		if _, err := sb.Exec(ctx, core.ExecRequest{Command: []string{"/bin/true"}}); err != nil {
			b.Fatal(err)
		}
		trueTime += time.Since(start)
	}
	b.StopTimer()
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(n/envTime.Seconds(), "episodes/s")
	b.ReportMetric(ms(envTime), "episode_ms")
	b.ReportMetric(ms(rawTime), "raw_exec_ms")
	b.ReportMetric(ms(trueTime), "true_exec_ms")
	b.ReportMetric(envTime.Seconds()/rawTime.Seconds(), "overhead_ratio")
	if b.N > 1 { // the framework probes with N=1 first; report the real pass
		b.Logf("| mbpp episode, local isolation=%s (write_file + grade, %d sample tasks, N=%d) | %.1f ms/episode (%.2f episodes/s) | same sandbox calls direct: %.1f ms; bare /bin/true exec: %.1f ms | %.2fx | %d CPUs |",
			isolation, len(ps), b.N, ms(envTime), n/envTime.Seconds(), ms(rawTime), ms(trueTime), envTime.Seconds()/rawTime.Seconds(), runtime.NumCPU())
	}
}
