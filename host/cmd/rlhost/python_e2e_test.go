package main

// End-to-end tests of environment plugins written in Python with the
// rlhost_env SDK (core/sdk/envplugin/python): the real rlhost binary starts
// testdata/pyprobe/probe_env.py under Debian's python3, which speaks
// go-plugin's protocol and reaches its lent sandboxes over the broker.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/core/sdk/envplugin/envtest"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/job"
	"github.com/rlhost/rlhost/host/pluginmgr"
)

// systemPython is the interpreter the tests run Python plugins with: the
// SDK supports the grpcio and protobuf Debian ships.
const systemPython = "/usr/bin/python3"

// needPythonGRPC skips when the system python lacks grpcio or protobuf,
// unless RLHOST_REQUIRE_PYTHON_GRPC is set (CI installs them).
func needPythonGRPC(t *testing.T) {
	t.Helper()
	out, err := exec.Command(systemPython, "-c", "import grpc, google.protobuf").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s cannot import grpc and protobuf (apt-get install python3-grpcio python3-protobuf): %v\n%s", systemPython, err, out)
	if os.Getenv("RLHOST_REQUIRE_PYTHON_GRPC") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func probeScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("testdata/pyprobe/probe_env.py")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// probeJob is a job file for the probe env; extra goes into its env block.
func probeJob(t *testing.T, dir string, batch, group, concurrency int, extra string) {
	t.Helper()
	write(t, dir, "job.hcl", fmt.Sprintf(`run {
  batch_size  = %d
  group_size  = %d
  concurrency = %d
}
sandbox "s" {
  backend = "local"
  timeout = "60s"
}
env "probe" {
  plugin = %q
  python = %q
%s
}
policy "p" {
  provider = "replay"
  file     = "replay.jsonl"
}
output { dir = "out" }
`, batch, group, concurrency, probeScript(t), systemPython, extra))
}

// Settings are decoded by the host against the Python plugin's schema, and
// what the plugin rejects is reported at the offending line and column.
func TestPythonEnvDiagnostics(t *testing.T) {
	needPythonGRPC(t)
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"t0","completions":["ok"]}`+"\n")
	cases := []struct {
		name, extra string
		want        []string
	}{
		// Lines: the env block's first setting after plugin and python is line 13.
		{"host type check", "  greeting = \"hi\"\n  n = \"many\"", []string{"job.hcl:14:7", "number"}},
		{"unknown setting", "  greeting = \"hi\"\n  colour = 1", []string{"job.hcl:14:3", "colour"}},
		{"missing required", "", []string{"job.hcl:10:1", "greeting"}},
		{"plugin diagnostic", "  n = 2\n  greeting = \"bad\"", []string{"job.hcl:14:14", "greeting rejected (plugin pyprobe)", "the probe rejects 'bad'"}},
		{"plugin ConfigError", "  n = 0\n  greeting = \"hi\"", []string{"job.hcl:13:7", "too few tasks", "n must be at least 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			probeJob(t, dir, 1, 1, 1, tc.extra)
			r := rlhost(t, dir, "validate", "job.hcl")
			if r.code == 0 {
				t.Fatalf("validate accepted a bad block: %+v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
	probeJob(t, dir, 1, 1, 1, "  greeting = \"hi\"")
	if r := rlhost(t, dir, "validate", "job.hcl"); r.code != 0 {
		t.Fatalf("validate of a good block: %+v", r)
	}
	// A python that does not exist is an error at the plugin's line.
	write(t, dir, "nopython.hcl", fmt.Sprintf("sandbox \"s\" { backend = \"local\" }\nenv \"probe\" {\n  plugin = %q\n  python = \"/no/such/python3\"\n  greeting = \"hi\"\n}\npolicy \"p\" {\n  provider = \"replay\"\n  file = \"replay.jsonl\"\n}\n", probeScript(t)))
	if r := rlhost(t, dir, "validate", "nopython.hcl"); r.code == 0 || !strings.Contains(r.stderr, "nopython.hcl:3:") || !strings.Contains(r.stderr, "python interpreter") {
		t.Errorf("missing interpreter not reported at the plugin line: %+v", r)
	}
}

// Episodes use their lent sandbox through the broker; an exception (even
// SystemExit) in one episode's step fails that episode only; files larger than gRPC's default
// 4 MiB message limit cross the broker both ways intact. Steps travel on
// the plugin's episode socket.
func TestPythonEnvRun(t *testing.T) {
	needPythonGRPC(t)
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"t0","completions":["ok"]}
{"task_id":"t1","completions":["RAISE"]}
{"task_id":"t2","completions":["BIG"]}
{"task_id":"t3","completions":["EXIT"]}
{"task_id":"t4","completions":["ok"]}
`)
	probeJob(t, dir, 5, 2, 4, "  greeting = \"hello\"\n  big_mib = 12\n  n = 5")
	r := rlhost(t, dir, "run", "job.hcl")
	if r.code != 0 {
		t.Fatalf("run failed: %+v", r)
	}
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	if len(trajs) != 10 {
		t.Fatalf("got %d trajectories, want 10", len(trajs))
	}
	sandboxes := map[string]bool{}
	for _, tr := range trajs {
		if want, ok := map[string]string{"t1": "RuntimeError: boom in step of t1", "t3": "SystemExit: 3"}[tr.TaskID]; ok {
			if tr.FinishReason != core.FinishError || !strings.Contains(tr.Error, want) {
				t.Errorf("%s/%d: finish %q error %q, want the step's %q", tr.TaskID, tr.Index, tr.FinishReason, tr.Error, want)
			}
			continue
		}
		if tr.Error != "" || tr.Reward != 1 {
			t.Errorf("%s/%d: reward %v error %q, want 1 and none", tr.TaskID, tr.Index, tr.Reward, tr.Error)
		}
		if tr.TaskID != "t2" && tr.Info["wire"] != "frames" {
			t.Errorf("%s/%d: step served over %q, want frames on the episode socket", tr.TaskID, tr.Index, tr.Info["wire"])
		}
		if tr.TaskID == "t2" && tr.Metrics["bytes"] != 12<<20 {
			t.Errorf("t2/%d moved %v bytes, want %d", tr.Index, tr.Metrics["bytes"], 12<<20)
		}
		sandboxes[tr.Info["sandbox"]] = true
	}
	// Each ok episode saw its own sandbox id.
	if delete(sandboxes, ""); len(sandboxes) != 4 {
		t.Errorf("ok episodes saw sandboxes %v, want 4 distinct", sandboxes)
	}
	// The traceback reached rlhost's log under the plugin's name.
	if !strings.Contains(r.stderr, "Traceback") || !strings.Contains(r.stderr, "probe_env.py") {
		t.Errorf("the step's traceback is not in rlhost's log:\n%s", r.stderr)
	}
	waitNoProcesses(t, probeScript(t))
}

// A Python plugin that dies mid-run is restarted like a Go plugin: the
// episode in flight errors, the rest of the run completes.
func TestPythonEnvCrashRestart(t *testing.T) {
	needPythonGRPC(t)
	dir := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"t0","completions":["ok"]}
{"task_id":"t1","completions":["CRASH"]}
{"task_id":"t2","completions":["ok"]}
{"task_id":"t3","completions":["ok"]}
`)
	probeJob(t, dir, 4, 1, 1, "  greeting = \"hi\"")
	r := rlhost(t, dir, "run", "job.hcl", "--steps", "2")
	if r.code != 0 {
		t.Fatalf("run failed: %+v", r)
	}
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	errored, ok := 0, 0
	for _, tr := range trajs {
		switch {
		case tr.Error != "":
			errored++
			if tr.TaskID != "t1" || !strings.Contains(tr.Error, "plugin process exited") {
				t.Errorf("unexpected error on %s: %s", tr.TaskID, tr.Error)
			}
		case tr.Reward == 1:
			ok++
		}
	}
	if len(trajs) != 8 || errored != 2 || ok != 6 {
		t.Fatalf("%d trajectories, %d errored, %d ok; want 8, 2 and 6\n%s", len(trajs), errored, ok, r.stderr)
	}
	waitNoProcesses(t, probeScript(t))
}

// A Python plugin reached on its episode socket that is killed in the
// middle of a Step: the Step fails at once with an error the host reads as
// a crash, and the plugin is restarted, as over gRPC. Each plugin's socket
// is gone once it is: the one killed, removed by the host, and the one
// shut down, by the plugin.
func TestPythonEnvKilledMidStep(t *testing.T) {
	needPythonGRPC(t)
	ctx := context.Background()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the plugins make their sockets
	f, diags := config.Parse(filepath.Join(t.TempDir(), "job.hcl"), []byte(fmt.Sprintf(`env "probe" {
  plugin   = %q
  python   = %q
  greeting = "hi"
}
`, probeScript(t), systemPython)), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			mgr.StopAll(ctx)
		}
	}()
	in, d := job.StartEnv(ctx, f, f.Envs[0], mgr, "killed-test")
	if d.HasErrors() {
		t.Fatal(d)
	}
	sockets := func() []string {
		m, _ := filepath.Glob(filepath.Join(tmp, "rlhost-env-*", "episode.sock"))
		return m
	}
	step := stepper(ctx, t, in)
	if obs, err := step("noop"); err != nil || obs.Info["wire"] != "frames" {
		t.Fatalf("a step: %+v, %v; want it sent on the episode socket", obs, err)
	}
	first := sockets()
	if len(first) != 1 {
		t.Fatalf("episode sockets %v, want the plugin's one", first)
	}
	killMidStep(t, in, step)
	if now := sockets(); len(now) != 1 || now[0] == first[0] {
		t.Errorf("episode sockets after the restart: %v, want only the new plugin's (the killed one's was %s)", now, first[0])
	}
	mgr.StopAll(ctx)
	stopped = true
	waitNoProcesses(t, probeScript(t))
	if ents, _ := filepath.Glob(filepath.Join(tmp, "rlhost-env-*")); len(ents) != 0 {
		t.Errorf("left after the plugins stopped: %v", ents)
	}
}

// Ctrl-C of the host while Python episodes run sandboxed programs: rlhost
// exits 130, the episodes end cancelled, and no plugin or sandbox process
// is left.
func TestPythonEnvInterrupt(t *testing.T) {
	needPythonGRPC(t)
	dir := t.TempDir()
	started := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"t0","completions":["SLEEP"]}
{"task_id":"t1","completions":["SLEEP"]}
`)
	probeJob(t, dir, 2, 2, 4, fmt.Sprintf("  greeting = \"hi\"\n  n = 2\n  started_dir = %q", started))
	cmd, out, errb := startRun(t, dir, nil, true, "run", "job.hcl")
	waitUntil(t, cmd, "episodes never started their sleep", func() bool {
		ents, _ := os.ReadDir(started)
		return len(ents) == 4
	}, out, errb)
	time.Sleep(300 * time.Millisecond) // let the sleeps start in their sandboxes
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, 60*time.Second, errb)
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit code %d, want 130\nstderr:%s", code, errb.String())
	}
	waitNoProcesses(t, probeScript(t))
	waitNoProcesses(t, rlhostBin)
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	if len(trajs) != 4 {
		t.Errorf("got %d trajectories, want 4 cancelled ones", len(trajs))
	}
	for _, tr := range trajs {
		if tr.FinishReason != core.FinishCancelled {
			t.Errorf("episode %s/%d finished %q, want cancelled", tr.TaskID, tr.Index, tr.FinishReason)
		}
	}
	if r := runSandboxes(t, dir, filepath.Join(dir, "out")); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("sandboxes left: %+v", r)
	}
}

// SIGKILL of the host: the Python plugin notices (parent-death signal or
// its parent watch) and exits.
func TestPythonEnvHostKilled(t *testing.T) {
	needPythonGRPC(t)
	dir := t.TempDir()
	started := t.TempDir()
	write(t, dir, "replay.jsonl", `{"task_id":"t0","completions":["SLEEP"]}`+"\n")
	probeJob(t, dir, 1, 1, 1, fmt.Sprintf("  greeting = \"hi\"\n  n = 1\n  started_dir = %q", started))
	cmd, out, errb := startRun(t, dir, nil, false, "run", "job.hcl")
	waitUntil(t, cmd, "episode never started its sleep", func() bool {
		ents, _ := os.ReadDir(started)
		return len(ents) == 1
	}, out, errb)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitNoProcesses(t, probeScript(t))
	waitNoProcesses(t, rlhostBin)
}

// The Python side's own tests: rlhost_env's unit tests, and the examples'
// tests, which drive this rlhost binary through rlhost_env's test harness.
func TestPythonUnittests(t *testing.T) {
	needPythonGRPC(t)
	for _, dir := range []string{"../../../core/sdk/envplugin/python/tests", "../../../examples/python-env"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			cmd := exec.Command(systemPython, "-m", "unittest", "discover", "-s", dir, "-v")
			cmd.Env = append(os.Environ(), "RLHOST_BIN="+rlhostBin, "PYTHONDONTWRITEBYTECODE=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("python tests in %s failed: %v\n%s", dir, err, out)
			}
			if !strings.Contains(string(out), "\nOK") {
				t.Fatalf("python tests in %s did not report OK:\n%s", dir, out)
			}
		})
	}
}

// rlhost itself never turns on go-plugin's AutoMTLS, but a Python plugin
// works under a go-plugin host that does: TLS on the plugin's own server
// and on the broker connection to its lent sandbox.
func TestPythonEnvAutoMTLS(t *testing.T) {
	needPythonGRPC(t)
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed; rlhost_env makes its AutoMTLS certificate with it")
	}
	ctx := context.Background()
	f, diags := config.Parse(filepath.Join(t.TempDir(), "b.hcl"), []byte(`sandbox "s" { backend = "local" }`), nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	mgr, err := pluginmgr.New(pluginmgr.Options{Self: rlhostBin, Builtins: builtinNames(), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mgr.StopAll(ctx) }) // after the sandbox's own clean-up
	bin, d := job.StartBackend(ctx, f, f.Sandboxes[0], mgr, "mtls")
	if d.HasErrors() {
		t.Fatal(d)
	}
	backend, _ := bin.Backend(ctx)

	var logs bytes.Buffer
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginbase.HandshakeConfig(),
		Plugins:          map[string]plugin.Plugin{pluginbase.KindEnv: &envplugin.Plugin{}},
		Cmd:              exec.Command(systemPython, probeScript(t)),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}),
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("handshake with AutoMTLS: %v\n%s", err, logs.String())
	}
	if v := client.NegotiatedVersion(); v != pluginbase.ProtocolVersion {
		t.Errorf("negotiated version %d, want %d", v, pluginbase.ProtocolVersion)
	}
	raw, err := rpc.Dispense(pluginbase.KindEnv)
	if err != nil {
		t.Fatalf("dispense: %v\n%s", err, logs.String())
	}
	env := raw.(*envplugin.Client)
	if ds := env.Configure(ctx, schema.Config{Name: "p", JSON: []byte(`{"n":1,"greeting":"hi","big_mib":1,"started_dir":""}`)}); ds.HasErrors() {
		t.Fatalf("configure: %v", ds)
	}
	tasks, err := env.Tasks(ctx)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("tasks: %v %v", tasks, err)
	}
	sb := envtest.NewSandbox(t, backend, core.SandboxSpec{}, 10*time.Second)
	_, obs := envtest.Episode(t, env, envplugin.Episode{ID: "mtls-0", Task: tasks[0], Sandbox: sb}, 1,
		func(int, []core.Message) core.Message { return core.Message{Role: core.RoleAssistant, Content: "ok"} })
	if obs.Reward != 1 {
		t.Fatalf("episode over the TLS broker: reward %v, want 1\n%s", obs.Reward, logs.String())
	}
}

// A plugin built against the previous protocol, in Go or with an older
// rlhost_env, is refused at the handshake with both versions named. (Such a
// plugin would dial the lent sandbox's broker id once per episode, and hang
// on the second.)
func TestOlderProtocolPluginIsRefused(t *testing.T) {
	needPythonGRPC(t)
	cur, old := pluginbase.ProtocolVersion, pluginbase.ProtocolVersion-1
	sdk, err := filepath.Abs("../../../core/sdk/envplugin/python")
	if err != nil {
		t.Fatal(err)
	}
	pyOld := fmt.Sprintf("import runpy, sys\nsys.path.insert(0, %q)\nimport rlhost_env.server as s\ns.PROTOCOL_VERSION = %d\nrunpy.run_path(%q, run_name=\"__main__\")\n",
		sdk, old, probeScript(t))
	cases := []struct {
		name string
		cmd  *exec.Cmd
		want string // in the host's error or the plugin's log
	}{
		{"go", exec.Command(buildPlugin(t, "./testdata/oldproto", "oldproto")),
			fmt.Sprintf("Plugin version: %d, Client versions: [%d]", old, cur)},
		{"python", exec.Command(systemPython, "-c", pyOld),
			fmt.Sprintf("the host speaks plugin protocol versions [%d], this plugin speaks %d", cur, old)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			client := plugin.NewClient(&plugin.ClientConfig{
				HandshakeConfig:  pluginbase.HandshakeConfig(),
				Plugins:          map[string]plugin.Plugin{pluginbase.KindEnv: &envplugin.Plugin{}},
				Cmd:              tc.cmd,
				AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
				Logger:           hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}),
			})
			defer client.Kill()
			_, err := client.Client()
			if err == nil {
				t.Fatal("the host accepted a plugin of an older protocol")
			}
			if !strings.Contains(err.Error()+"\n"+logs.String(), tc.want) {
				t.Fatalf("the refusal does not say %q: %v\n%s", tc.want, err, logs.String())
			}
		})
	}
}

// The Python stubs come from the same core/sdk/wire/rlhostpb/rlhost.proto as the Go
// ones (`make proto` writes both); an edit regenerated for one side only
// shows up here as a difference in messages, fields or methods.
func TestPythonStubsMatchGo(t *testing.T) {
	needPythonGRPC(t)
	var goShape []string
	fd := rlhostpb.File_rlhost_proto
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			for j := 0; j < m.Fields().Len(); j++ {
				f := m.Fields().Get(j)
				goShape = append(goShape, fmt.Sprintf("%s.%s=%d/%d/%d", m.FullName(), f.Name(), f.Number(), f.Kind(), f.Cardinality()))
			}
			walk(m.Messages())
		}
	}
	walk(fd.Messages())
	for i := 0; i < fd.Services().Len(); i++ {
		s := fd.Services().Get(i)
		for j := 0; j < s.Methods().Len(); j++ {
			m := s.Methods().Get(j)
			goShape = append(goShape, fmt.Sprintf("%s.%s(%s)%s", s.FullName(), m.Name(), m.Input().FullName(), m.Output().FullName()))
		}
	}
	sort.Strings(goShape)
	py := `
import sys
sys.path.insert(0, "../../../core/sdk/envplugin/python")
from rlhost_env._pb import rlhost_pb2 as pb
out = []
def walk(ms):
    for m in ms:
        for f in m.fields:
            out.append("%s.%s=%d/%d/%d" % (m.full_name, f.name, f.number, f.type, f.label))
        walk(m.nested_types)
walk(pb.DESCRIPTOR.message_types_by_name.values())
for s in pb.DESCRIPTOR.services_by_name.values():
    for m in s.methods:
        out.append("%s.%s(%s)%s" % (s.full_name, m.name, m.input_type.full_name, m.output_type.full_name))
print("\n".join(sorted(out)))
`
	out, err := exec.Command(systemPython, "-c", py).CombinedOutput()
	if err != nil {
		t.Fatalf("read the Python stubs: %v\n%s", err, out)
	}
	pyShape := strings.Split(strings.TrimSpace(string(out)), "\n")
	if strings.Join(pyShape, "\n") != strings.Join(goShape, "\n") {
		t.Errorf("Python stubs differ from the Go ones; run make proto\nGo:\n%s\nPython:\n%s", strings.Join(goShape, "\n"), strings.Join(pyShape, "\n"))
	}
}

// An executable Python script named rlhost-env-NAME on the plugin path is
// found by name, like a Go plugin, and listed by `rlhost plugins`.
func TestPythonEnvOnPluginPath(t *testing.T) {
	needPythonGRPC(t)
	plugins := t.TempDir()
	echo, err := filepath.Abs("../../../examples/python-env/echo_env.py")
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!%s\nimport runpy\nrunpy.run_path(%q, run_name=\"__main__\")\n", systemPython, echo)
	if err := os.WriteFile(filepath.Join(plugins, "rlhost-env-pyecho"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pathEnv := []string{"RLHOST_PLUGIN_PATH=" + plugins}
	dir := t.TempDir()
	r := rlhostEnv(t, dir, pathEnv, "plugins", "--json")
	var rows []pluginRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("plugins --json: %v\n%+v", err, r)
	}
	found := false
	for _, row := range rows {
		if row.Info.Name == "py-echo" && row.Error == "" && len(row.Info.Config.Attributes) == 2 {
			found = true
		}
	}
	if !found {
		t.Errorf("rlhost plugins does not list the Python plugin with its settings: %s", r.stdout)
	}
	write(t, dir, "replay.jsonl", `{"task_id":"echo-0","completions":["hi","no"]}`+"\n")
	write(t, dir, "job.hcl", `run { group_size = 2 }
sandbox "s" { backend = "local" }
env "echo" {
  plugin = "pyecho"
  words  = ["hi"]
}
policy "p" {
  provider = "replay"
  file = "replay.jsonl"
}
output { dir = "out" }
`)
	if r := rlhostEnv(t, dir, pathEnv, "run", "job.hcl"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	var rewards []float64
	for _, tr := range readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl")) {
		rewards = append(rewards, tr.Reward)
	}
	sort.Float64s(rewards)
	if fmt.Sprint(rewards) != "[0 1]" {
		t.Errorf("rewards %v, want [0 1]", rewards)
	}
}

// The example job files run as shipped. The Python coding env scores the
// shipped completions exactly as the built-in Go coding env does.
func TestPythonExampleJobs(t *testing.T) {
	needPythonGRPC(t)
	// The examples run "python3" from PATH: make that Debian's.
	pathEnv := []string{"PATH=" + filepath.Dir(systemPython) + string(os.PathListSeparator) + os.Getenv("PATH")}
	type scored struct {
		reward  float64
		timeout bool
	}
	run := func(job, out string) map[string]scored {
		t.Helper()
		r := rlhostEnv(t, "../../../examples", pathEnv, "run", job, "--out", out, "--steps", "1")
		if r.code != 0 {
			t.Fatalf("%s: %+v", job, r)
		}
		got := map[string]scored{}
		for _, tr := range readTrajectories(t, filepath.Join(out, "trajectories.jsonl")) {
			if tr.Error != "" {
				t.Errorf("%s: %s/%d errored: %s", job, tr.TaskID, tr.Index, tr.Error)
			}
			got[fmt.Sprintf("%s/%d", tr.TaskID, tr.Index)] = scored{tr.Reward, tr.FinishReason == core.FinishTimeout}
		}
		return got
	}
	rewards := func(m map[string]scored) map[string]float64 {
		out := map[string]float64{}
		for k, v := range m {
			out[k] = v.reward
		}
		return out
	}
	// coding.hcl gives a completion 1 s. On a machine loaded by other
	// tests a correct completion can run out of it in one env and not the
	// other; such a one-sided timeout is load, so the pair runs again.
	// Any other difference fails at once.
	for attempt := 1; ; attempt++ {
		py := run("python-env/coding.hcl", t.TempDir())
		goEnv := run("coding.hcl", t.TempDir())
		if len(py) == 14 && fmt.Sprint(rewards(py)) == fmt.Sprint(rewards(goEnv)) {
			break
		}
		load := len(py) == 14 && len(goEnv) == 14
		for k, p := range py {
			if g := goEnv[k]; p.reward != g.reward && p.timeout == g.timeout {
				load = false
			}
		}
		if !load || attempt == 3 {
			t.Fatalf("Python coding env rewards differ from the Go env's (attempt %d):\npython %v\ngo     %v", attempt, rewards(py), rewards(goEnv))
		}
		t.Logf("attempt %d: a completion timed out in one env only (machine load); running both again", attempt)
	}
	tools := rewards(run("python-env/tools.hcl", t.TempDir()))
	want := map[string]float64{"secret-0/0": 1, "secret-0/1": 0, "secret-1/0": 1, "secret-1/1": 0, "secret-2/0": 1, "secret-2/1": 0}
	if fmt.Sprint(tools) != fmt.Sprint(want) {
		t.Errorf("tools.hcl rewards %v, want %v", tools, want)
	}
}
