package envplugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// dirSandbox is a real, unisolated sandbox: a directory and os/exec. It
// stands in for a backend so these tests exercise the SDK's transport (gRPC,
// broker, conversions) and nothing else.
type dirSandbox struct {
	id, dir string
	mu      sync.Mutex
	execs   int
}

func (s *dirSandbox) ID() string { return s.id }

func (s *dirSandbox) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	s.mu.Lock()
	s.execs++
	s.mu.Unlock()
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, req.Command[0], req.Command[1:]...)
	cmd.Dir = s.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = bytes.NewReader(req.Stdin)
	start := time.Now()
	err := cmd.Run()
	res := core.ExecResult{Stdout: out.String(), Stderr: errb.String(), Duration: time.Since(start), TimedOut: ctx.Err() != nil}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return res, err
	}
	return res, nil
}

func (s *dirSandbox) path(p string) (string, error) {
	clean := filepath.Clean("/" + p)
	if strings.Contains(p, "..") {
		return "", core.ErrInvalidPath
	}
	return filepath.Join(s.dir, clean), nil
}

func (s *dirSandbox) ReadFile(_ context.Context, p string, _ int64) ([]byte, error) {
	fp, err := s.path(p)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(fp)
	if errors.Is(err, os.ErrNotExist) {
		return nil, core.ErrNotFound
	}
	return b, err
}

func (s *dirSandbox) WriteFile(_ context.Context, p string, data []byte, mode uint32) error {
	fp, err := s.path(p)
	if err != nil {
		return err
	}
	return os.WriteFile(fp, data, os.FileMode(mode))
}

func (s *dirSandbox) ListFiles(_ context.Context, p string) ([]core.FileInfo, error) {
	fp, err := s.path(p)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(fp)
	if err != nil {
		return nil, err
	}
	var out []core.FileInfo
	for _, e := range ents {
		out = append(out, core.FileInfo{Path: e.Name(), IsDir: e.IsDir()})
	}
	return out, nil
}

// shellEnv runs each reply as a shell command in its lent sandbox.
type shellEnv struct {
	configured string
}

var tool = core.ToolSpec{Type: "function", Function: core.FunctionSpec{Name: "sh", Description: "run", Parameters: json.RawMessage(`{"type":"object"}`)}}

func (e *shellEnv) Info() pluginbase.Info {
	return pluginbase.Info{Name: "shell", Version: "1.0", Kind: pluginbase.KindEnv}
}

func (e *shellEnv) Configure(_ context.Context, cfg schema.Config) schema.Diagnostics {
	var c struct {
		Greeting string `json:"greeting"`
	}
	if err := cfg.Decode(&c); err != nil {
		return schema.Diagnostics{schema.Errorf(nil, "bad config", "%v", err)}
	}
	if c.Greeting == "" {
		return schema.Diagnostics{schema.Errorf([]string{"greeting"}, "greeting is required", "")}
	}
	e.configured = c.Greeting
	return nil
}

func (e *shellEnv) Tasks(context.Context) ([]core.Task, error) {
	return []core.Task{{ID: "t1", Prompt: "p1", Data: json.RawMessage(`{"k":1}`)}, {ID: "t2"}}, nil
}

func (e *shellEnv) NewEpisode(ctx context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	if err := ep.Sandbox.WriteFile(ctx, "task.txt", []byte(ep.Task.ID), 0o644); err != nil {
		return nil, envplugin.Observation{}, err
	}
	return &shellSession{sb: ep.Sandbox}, envplugin.Observation{
		Messages: []core.Message{{Role: core.RoleUser, Content: e.configured + " " + ep.Task.Prompt}},
		Tools:    []core.ToolSpec{tool},
	}, nil
}

type shellSession struct {
	sb    envplugin.Sandbox
	steps int
}

func (s *shellSession) Step(ctx context.Context, reply core.Message) (envplugin.Observation, error) {
	s.steps++
	if reply.Content == "done" {
		return envplugin.Observation{Done: true, Reward: 1, FinishReason: core.FinishPassed, Metrics: map[string]float64{"steps": float64(s.steps)}}, nil
	}
	res, err := s.sb.Exec(ctx, core.ExecRequest{Command: []string{"sh", "-c", reply.Content}, Timeout: 5 * time.Second})
	if err != nil {
		return envplugin.Observation{}, err
	}
	return envplugin.Observation{Messages: []core.Message{{Role: core.RoleTool, Content: res.Stdout, ToolCallID: "c1"}}}, nil
}

func (s *shellSession) End(_ context.Context, reason string) (envplugin.Observation, error) {
	return envplugin.Observation{Reward: -0.5, Info: map[string]string{"ended": reason}}, nil
}

func TestEnvironmentRoundTrip(t *testing.T) {
	client := envtest.Serve(t, &shellEnv{})
	ctx := context.Background()

	if info := client.Info(); info.Name != "shell" || info.Version != "1.0" {
		t.Fatalf("info = %+v", info)
	}
	if d := client.Configure(ctx, schema.Config{Name: "e", JSON: []byte(`{}`)}); !d.HasErrors() || d[0].Path[0] != "greeting" {
		t.Fatalf("want a greeting diagnostic with a path, got %v", d)
	}
	if d := client.Configure(ctx, schema.Config{Name: "e", JSON: []byte(`{"greeting":"hi"}`)}); d.HasErrors() {
		t.Fatalf("configure: %v", d)
	}
	tasks, err := client.Tasks(ctx)
	if err != nil || len(tasks) != 2 || string(tasks[0].Data) != `{"k":1}` {
		t.Fatalf("tasks = %+v, %v", tasks, err)
	}

	sb := &dirSandbox{id: "sb-1", dir: t.TempDir()}
	conv, obs := envtest.Episode(t, client, envplugin.Episode{ID: "ep1", Task: tasks[0], Sandbox: sb}, 5,
		func(turn int, conv []core.Message) core.Message {
			switch turn {
			case 0:
				return core.Message{Role: core.RoleAssistant, Content: "cat task.txt; printf '\\377\\000end'"}
			default:
				return core.Message{Role: core.RoleAssistant, Content: "done"}
			}
		})
	if !obs.Done || obs.Reward != 1 || obs.FinishReason != core.FinishPassed || obs.Metrics["steps"] != 2 {
		t.Fatalf("final observation = %+v", obs)
	}
	if conv[0].Content != "hi p1" {
		t.Errorf("first message = %q", conv[0].Content)
	}
	// NUL survives; invalid UTF-8 in chat text becomes U+FFFD rather than
	// failing the call (proto3 strings must be UTF-8).
	if got := conv[2].Content; got != "t1\uFFFD\x00end" || conv[2].ToolCallID != "c1" {
		t.Errorf("tool output = %q", got)
	}
	if sb.execs != 1 {
		t.Errorf("sandbox execs = %d, want 1", sb.execs)
	}
}

func TestEpisodeEndedByHost(t *testing.T) {
	client := envtest.Serve(t, &shellEnv{configured: "x"})
	sb := &dirSandbox{id: "sb-2", dir: t.TempDir()}
	_, obs := envtest.Episode(t, client, envplugin.Episode{ID: "ep2", Task: core.Task{ID: "t"}, Sandbox: sb}, 1,
		func(int, []core.Message) core.Message { return core.Message{Role: core.RoleAssistant, Content: "true"} })
	if obs.Done || obs.Reward != -0.5 || obs.Info["ended"] != core.FinishMaxTurns {
		t.Fatalf("End observation = %+v", obs)
	}
}

// An ended session is gone on the plugin side, and an id cannot start twice.
func TestUnknownEpisodeAfterEnd(t *testing.T) {
	client := envtest.Serve(t, &shellEnv{configured: "x"})
	ctx := context.Background()
	sb := &dirSandbox{id: "sb-3", dir: t.TempDir()}
	sess, _, err := client.NewEpisode(ctx, envplugin.Episode{ID: "ep3", Task: core.Task{ID: "t"}, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.NewEpisode(ctx, envplugin.Episode{ID: "ep3", Task: core.Task{ID: "t"}, Sandbox: sb}); err == nil {
		t.Error("starting the same episode id twice must fail")
	}
	if _, err := sess.End(ctx, core.FinishCancelled); err != nil {
		t.Fatal(err)
	}
	// The session is gone; stepping it again is a NotFound across the boundary.
	_, err = sess.Step(ctx, core.Message{Role: core.RoleAssistant, Content: "true"})
	if !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("step after end: %v, want ErrNotFound", err)
	}
}

// Sandbox errors keep their identity across the broker.
func TestSandboxErrorsCrossBoundary(t *testing.T) {
	client := envtest.Serve(t, &pathEnv{})
	sb := &dirSandbox{id: "sb-4", dir: t.TempDir()}
	_, obs := envtest.Episode(t, client, envplugin.Episode{ID: "ep4", Task: core.Task{ID: "t"}, Sandbox: sb}, 1,
		func(int, []core.Message) core.Message { return core.Message{Role: core.RoleAssistant, Content: "x"} })
	if obs.Info["missing"] != "not-found" || obs.Info["escape"] != "invalid-path" {
		t.Fatalf("error identities lost: %+v", obs.Info)
	}
}

type pathEnv struct{ shellEnv }

func (e *pathEnv) NewEpisode(_ context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	return &pathSession{sb: ep.Sandbox}, envplugin.Observation{}, nil
}

type pathSession struct{ sb envplugin.Sandbox }

func (s *pathSession) Step(ctx context.Context, _ core.Message) (envplugin.Observation, error) {
	info := map[string]string{}
	if _, err := s.sb.ReadFile(ctx, "nope.txt", 0); errors.Is(err, core.ErrNotFound) {
		info["missing"] = "not-found"
	}
	if err := s.sb.WriteFile(ctx, "../../etc/x", []byte("x"), 0o644); errors.Is(err, core.ErrInvalidPath) {
		info["escape"] = "invalid-path"
	}
	return envplugin.Observation{Done: true, Info: info}, nil
}

func (s *pathSession) End(context.Context, string) (envplugin.Observation, error) {
	return envplugin.Observation{}, nil
}

// slowEnv takes a while to start episodes and counts Ends.
type slowEnv struct {
	shellEnv
	mu   sync.Mutex
	ends int
}

func (e *slowEnv) NewEpisode(ctx context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	time.Sleep(300 * time.Millisecond)
	return &countingSession{e: e}, envplugin.Observation{}, nil
}

type countingSession struct{ e *slowEnv }

func (s *countingSession) Step(context.Context, core.Message) (envplugin.Observation, error) {
	return envplugin.Observation{Done: true}, nil
}

func (s *countingSession) End(context.Context, string) (envplugin.Observation, error) {
	s.e.mu.Lock()
	s.e.ends++
	s.e.mu.Unlock()
	return envplugin.Observation{}, nil
}

// A host that gives up on NewEpisode never gets a Session to End; the
// plugin side must end it itself, and the id must be free again.
func TestAbandonedNewEpisodeIsEnded(t *testing.T) {
	env := &slowEnv{}
	client := envtest.Serve(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := client.NewEpisode(ctx, envplugin.Episode{ID: "slow", Task: core.Task{ID: "t"}}); err == nil {
		t.Fatal("NewEpisode outlived its context")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		env.mu.Lock()
		ends := env.ends
		env.mu.Unlock()
		if ends == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("abandoned session ended %d times, want 1", ends)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sess, _, err := client.NewEpisode(context.Background(), envplugin.Episode{ID: "slow", Task: core.Task{ID: "t"}})
	if err != nil {
		t.Fatalf("the id of an abandoned episode stays taken: %v", err)
	}
	sess.End(context.Background(), "")
}

// Files of several MiB cross the broker (gRPC's 4 MiB default would not).
func TestLargeFileThroughLentSandbox(t *testing.T) {
	client := envtest.Serve(t, &bigEnv{})
	sb := &dirSandbox{id: "big", dir: t.TempDir()}
	_, obs := envtest.Episode(t, client, envplugin.Episode{ID: "big", Task: core.Task{ID: "t"}, Sandbox: sb}, 1,
		func(int, []core.Message) core.Message { return core.Message{Role: core.RoleAssistant, Content: "x"} })
	if obs.Info["size"] != "5242880" {
		t.Fatalf("large file round trip: %+v", obs.Info)
	}
}

type bigEnv struct{ shellEnv }

func (e *bigEnv) NewEpisode(_ context.Context, ep envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	return &bigSession{sb: ep.Sandbox}, envplugin.Observation{}, nil
}

type bigSession struct{ sb envplugin.Sandbox }

func (s *bigSession) Step(ctx context.Context, _ core.Message) (envplugin.Observation, error) {
	data := bytes.Repeat([]byte("x"), 5<<20)
	if err := s.sb.WriteFile(ctx, "big.bin", data, 0o644); err != nil {
		return envplugin.Observation{}, err
	}
	back, err := s.sb.ReadFile(ctx, "big.bin", 0)
	if err != nil {
		return envplugin.Observation{}, err
	}
	return envplugin.Observation{Done: true, Info: map[string]string{"size": fmt.Sprint(len(back))}}, nil
}

func (s *bigSession) End(context.Context, string) (envplugin.Observation, error) {
	return envplugin.Observation{}, nil
}
