package main

// The flagship MBPP example on Aviato: examples/mbpp.hcl with the one-line
// switch --var backend=aviato, run end to end through the aviato backend
// plugin against a wire-level fake of Aviato's ATCService.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlhost/rlhost/host/policy/fakeopenai"
	"github.com/rlhost/rlhost/plugins/aviato/fakeaviato"
)

func startFakeAviato(t *testing.T) *fakeaviato.Server {
	t.Helper()
	srv, err := fakeaviato.New(fakeaviato.Options{StartPolls: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// aviatoProblems writes MBPP problems whose text names the agent's script.
func aviatoProblems(t *testing.T, dir string, scripts ...string) string {
	var b strings.Builder
	for i, s := range scripts {
		line, _ := json.Marshal(map[string]any{
			"task_id": 7000 + i, "text": fmt.Sprintf("[%s] Write a function add(a, b) that returns the sum of a and b.", s),
			"code": goodAdd, "test_list": []string{"assert add(1, 2) == 3", "assert add(-1, 1) == 0"},
		})
		b.Write(line)
		b.WriteByte('\n')
	}
	return write(t, dir, "problems.jsonl", b.String())
}

// aviatoAgent plays mbppAgent's scripts, plus "sleepy", which runs a long
// command so a run can be interrupted while its sandboxes are busy.
func aviatoAgent(req fakeopenai.ChatRequest) fakeopenai.Reply {
	for _, m := range req.Messages {
		if strings.Contains(m.Content, "[sleepy]") {
			return fakeopenai.Reply{Choices: []fakeopenai.ReplyChoice{bashCall("sleep 120")}}
		}
	}
	return mbppAgent(req)
}

// runAviatoExample runs examples/mbpp.hcl on the fake; env adds to the
// run's environment.
func aviatoArgs(dir, dataset string) []string {
	repo, _ := filepath.Abs("../../..")
	return []string{"run", filepath.Join(repo, "examples", "mbpp.hcl"), "--var", "backend=aviato",
		"--var", "policy=openai", "--dry-run",
		"--var", "dataset=" + dataset, "--steps", "1", "--out", filepath.Join(dir, "out")}
}

// descendants lists the processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var p int
		if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		var state string
		var ppid int
		if _, err := fmt.Sscanf(rest, " %s %d", &state, &ppid); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func aviatoEnv(t *testing.T, srv *fakeaviato.Server, policy *fakeopenai.Server, key, state string) []string {
	policy.SetModels("scripted") // the pre-flight check asks
	return []string{"CWSANDBOX_API_KEY=" + key, "CWSANDBOX_BASE_URL=" + srv.URL, "XDG_STATE_HOME=" + state,
		"OPENAI_BASE_URL=" + policy.URL, "OPENAI_MODEL=scripted", "OPENAI_API_KEY=sk-test"}
}

func TestAviatoMBPPExample(t *testing.T) {
	srv := startFakeAviato(t)
	policy := fakeopenai.New(aviatoAgent)
	defer policy.Close()
	dir := t.TempDir()
	data := aviatoProblems(t, dir, "solve", "fix", "solve", "fix")
	r := rlhostEnv(t, dir, aviatoEnv(t, srv, policy, fakeaviato.DefaultAPIKey, t.TempDir()), aviatoArgs(dir, data)...)
	if r.code != 0 {
		t.Fatalf("run on aviato: %+v", r)
	}
	trajs := readTrajectories(t, filepath.Join(dir, "out", "trajectories.jsonl"))
	if len(trajs) != 16 {
		t.Fatalf("got %d trajectories, want 16", len(trajs))
	}
	for _, tr := range trajs {
		if tr.Error != "" || tr.Reward != 1 {
			t.Errorf("%s/%d: reward %v error %q", tr.TaskID, tr.Index, tr.Reward, tr.Error)
		}
	}
	if srv.Starts() < 16 {
		t.Errorf("fake saw %d starts, want at least 16", srv.Starts())
	}
	if left := srv.Sandboxes(); len(left) != 0 {
		t.Errorf("%d sandboxes left on the fake after the run", len(left))
	}
	if strings.Contains(r.stdout+r.stderr, fakeaviato.DefaultAPIKey) {
		t.Error("the API key was printed")
	}
}

func TestAviatoInterruptLeavesNoSandboxes(t *testing.T) {
	srv := startFakeAviato(t)
	policy := fakeopenai.New(aviatoAgent)
	defer policy.Close()
	dir := t.TempDir()
	data := aviatoProblems(t, dir, "sleepy", "sleepy", "sleepy", "sleepy")
	cmd, out, errb := startRun(t, dir, aviatoEnv(t, srv, policy, fakeaviato.DefaultAPIKey, t.TempDir()), false, aviatoArgs(dir, data)...)
	waitUntil(t, cmd, "sandboxes never got busy", func() bool { return len(srv.Sandboxes()) >= 8 }, out, errb)
	// The key reaches the sandbox backend plugin, never the env plugin.
	envs, backends := 0, 0
	for _, pid := range descendants(cmd.Process.Pid) {
		argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		hasKey := strings.Contains(string(environ), "CWSANDBOX_API_KEY=")
		switch {
		case strings.Contains(string(argv), builtinPluginArg+"\x00env\x00"):
			envs++
			if hasKey {
				t.Errorf("env plugin %d has CWSANDBOX_API_KEY in its environment", pid)
			}
		case strings.Contains(string(argv), builtinPluginArg+"\x00sandbox\x00aviato"):
			backends++
			if !hasKey {
				t.Errorf("aviato plugin %d lacks its credentials", pid)
			}
		}
	}
	if envs == 0 || backends == 0 {
		t.Errorf("found %d env and %d aviato plugin processes under rlhost", envs, backends)
	}
	time.Sleep(2 * time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	waitExit(t, cmd, 90*time.Second, errb)
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit code %d, want 130\n%s", code, errb.String())
	}
	if left := srv.Sandboxes(); len(left) != 0 {
		t.Errorf("%d sandboxes left on the fake after Ctrl-C: %+v", len(left), left)
	}
	waitNoProcesses(t, rlhostBin)
}

// The host and its plugins all SIGKILLed: nothing cleans up then, so the
// sandboxes stay until the next start on the host sweeps them.
func TestAviatoKilledHostOrphansSweptAtNextStart(t *testing.T) {
	srv := startFakeAviato(t)
	policy := fakeopenai.New(aviatoAgent)
	defer policy.Close()
	dir := t.TempDir()
	state := t.TempDir()
	data := aviatoProblems(t, dir, "sleepy", "sleepy", "sleepy", "sleepy")
	cmd, out, errb := startRun(t, dir, aviatoEnv(t, srv, policy, fakeaviato.DefaultAPIKey, state), true, aviatoArgs(dir, data)...)
	waitUntil(t, cmd, "sandboxes never created", func() bool { return len(srv.Sandboxes()) >= 8 }, out, errb)
	time.Sleep(time.Second)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	waitNoProcesses(t, rlhostBin)
	orphans := srv.Sandboxes()
	if len(orphans) == 0 {
		t.Fatal("no sandboxes left after SIGKILL of the whole process group; nothing to sweep")
	}

	// The orphans are visible by label from the CLI meanwhile.
	env := aviatoEnv(t, srv, policy, fakeaviato.DefaultAPIKey, t.TempDir())
	r := rlhostEnv(t, dir, env, "sandbox", "list", "--backend", "aviato", "--label", "rlhost.env=mbpp", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, orphans[0].ID) {
		t.Fatalf("sandbox list: %+v", r)
	}

	data2 := aviatoProblems(t, t.TempDir(), "solve")
	dir2 := t.TempDir()
	r = rlhostEnv(t, dir2, aviatoEnv(t, srv, policy, fakeaviato.DefaultAPIKey, state), aviatoArgs(dir2, data2)...)
	if r.code != 0 {
		t.Fatalf("next run: %+v", r)
	}
	if left := srv.Sandboxes(); len(left) != 0 {
		t.Errorf("%d of %d orphans left after the next start: %+v\n%s", len(left), len(orphans), left, r.stderr)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "rlhost", "aviato")); len(ents) != 0 {
		t.Errorf("owner records left: %v", ents)
	}
}

// SIGKILL of the host alone: the backend plugin gets its parent-death
// SIGTERM and deletes its sandboxes itself.
func TestAviatoHostKilledPluginCleansUp(t *testing.T) {
	srv := startFakeAviato(t)
	policy := fakeopenai.New(aviatoAgent)
	defer policy.Close()
	dir := t.TempDir()
	data := aviatoProblems(t, dir, "sleepy", "sleepy", "sleepy", "sleepy")
	cmd, out, errb := startRun(t, dir, aviatoEnv(t, srv, policy, fakeaviato.DefaultAPIKey, t.TempDir()), false, aviatoArgs(dir, data)...)
	waitUntil(t, cmd, "sandboxes never created", func() bool { return len(srv.Sandboxes()) >= 8 }, out, errb)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for len(srv.Sandboxes()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes still on the fake after the host was killed", len(srv.Sandboxes()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitNoProcesses(t, rlhostBin)
}

func TestAviatoBadStartsFailClearly(t *testing.T) {
	srv := startFakeAviato(t)
	policy := fakeopenai.New(aviatoAgent)
	defer policy.Close()
	tests := []struct {
		name, key, url, want string
	}{
		{"bad key", "not-the-key", srv.URL, "Aviato rejected the credentials"},
		{"unreachable endpoint", fakeaviato.DefaultAPIKey, "http://127.0.0.1:1", "cannot reach Aviato"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := aviatoProblems(t, dir, "solve")
			env := aviatoEnv(t, srv, policy, tc.key, t.TempDir())
			env = append(env, "CWSANDBOX_BASE_URL="+tc.url)
			start := time.Now()
			r := rlhostEnv(t, dir, env, aviatoArgs(dir, data)...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "mbpp.hcl:") {
				t.Fatalf("want a failure naming %q at the config line: %+v", tc.want, r)
			}
			if strings.Contains(r.stdout+r.stderr, tc.key) {
				t.Error("the key was printed")
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %s to fail", d)
			}
			if srv.Starts() != 0 {
				t.Errorf("%d sandboxes started", srv.Starts())
			}
		})
	}
}
