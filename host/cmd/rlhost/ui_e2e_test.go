package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rlhost/rlhost/host/dashboard/fakerun"
	"github.com/rlhost/rlhost/host/output"
	"github.com/rlhost/rlhost/host/policy/fakeopenai"
)

// chromium finds Debian's chromium; without it the browser test skips,
// unless RLHOST_REQUIRE_CHROMIUM=1 (CI) makes that a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("RLHOST_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium is not installed (apt-get install chromium) and RLHOST_REQUIRE_CHROMIUM=1")
	}
	t.Skip("chromium is not installed (apt-get install chromium); the dashboard's browser test needs it")
	return ""
}

// artifacts is where the browser test leaves its screenshots:
// RLHOST_ARTIFACTS, else .artifacts/dashboard at the top of the checkout
// (ignored by git).
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("RLHOST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", ".artifacts")
	}
	dir = filepath.Join(dir, "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	t.Logf("screenshots in %s", abs)
	return dir
}

// startUI runs `rlhost ui` on dir and returns the URL it prints.
func startUI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(rlhostBin, append([]string{"ui"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("rlhost ui printed no URL: %v\nstderr: %s", err, errb.String())
	}
	url := regexp.MustCompile(`http://\S+/`).FindString(line)
	if url == "" {
		t.Fatalf("no URL in %q", line)
	}
	return url
}

// The dashboard as a person uses it, in a real browser: the reward curve
// has a point per step and shows values on hover, a step appended to the
// files appears without a reload, clicking an episode shows its tool calls
// and their results, and a completion's markup is shown as text, never
// run.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	shots := artifacts(t)
	dir := t.TempDir()
	run := fakerun.Options{RunID: "browser-run", Steps: 6, Groups: 3, GroupSize: 4, Turns: 2, ToolOutput: 300, TokenIDs: 4, Seed: 9, Hostile: true}
	if _, err := fakerun.Write(dir, run); err != nil {
		t.Fatal(err)
	}
	base := startUI(t, dir, "--listen", "127.0.0.1:0")

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000), chromedp.Flag("disable-gpu", true))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil { // start the browser
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const rewardDots = `document.querySelectorAll('svg.chart[aria-label^="reward"] circle.pt').length`

	// The curves: one point per step.
	do("open the dashboard", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS(`svg.chart[aria-label^="reward"]`)),
		chromedp.Poll[chromedp.Void](`document.getElementById('live-status').classList.contains('on')`))
	if n := eval(`String(` + rewardDots + `)`); n != fmt.Sprint(run.Steps) {
		t.Fatalf("the reward chart has %s points, want %d", n, run.Steps)
	}
	// Hovering a point reads out its exact value.
	xy := eval(`(() => { const r = document.querySelector('svg.chart[aria-label^="reward"] circle.pt[data-step="3"]').getBoundingClientRect(); return (r.x + r.width/2) + ',' + (r.y + r.height/2); })()`)
	var x, y float64
	fmt.Sscanf(xy, "%f,%f", &x, &y)
	do("hover step 3", chromedp.MouseEvent(chromedp.MouseMoved, x, y), chromedp.Poll[chromedp.Void](`!document.querySelector('.tip').hidden`))
	if tip := eval(`document.querySelector('.tip').textContent`); !strings.Contains(tip, "step 3") || !strings.Contains(tip, "browser-run") || !strings.Contains(tip, "std") {
		t.Errorf("hover read-out %q", tip)
	}
	shot("curves-hover")

	// A step appended to the files appears without a reload.
	eval(`window.rlhostNotReloaded = 'yes'; 'ok'`)
	next := run
	next.Start, next.Steps = run.Steps, 1
	if _, err := fakerun.Write(dir, next); err != nil {
		t.Fatal(err)
	}
	do("wait for the new step", chromedp.Poll[chromedp.Void](rewardDots+` === `+fmt.Sprint(run.Steps+1), chromedp.WithPollingTimeout(time.Minute)))
	if eval(`window.rlhostNotReloaded || 'reloaded'`) != "yes" {
		t.Error("the page reloaded to show the new step")
	}
	shot("curves-live")

	// Clicking an episode shows its tool calls and their results.
	do("open the rollouts", chromedp.Click(chromedp.CSS(`a[href$="/rollouts"]`), chromedp.NodeVisible), chromedp.WaitVisible(chromedp.CSS(`a.ep-link`)))
	do("click an episode", chromedp.Click(chromedp.CSS(`a.ep-link[href*="ep=s6-g1-e2"]`), chromedp.NodeVisible), chromedp.WaitVisible(chromedp.CSS(`#episode .call`)))
	calls := eval(`[...document.querySelectorAll('#episode .call')].map(c => c.textContent).join('\n')`)
	results := eval(`[...document.querySelectorAll('#episode .role-tool')].map(c => c.textContent).join('\n')`)
	if strings.Count(calls, "bash") != run.Turns || !strings.Contains(calls, "python3 -m pytest") {
		t.Errorf("tool calls shown:\n%s", calls)
	}
	if strings.Count(results, "result of bash") != run.Turns || !strings.Contains(results, "exit status 1") || !strings.Contains(results, "AssertionError") {
		t.Errorf("tool results shown:\n%s", results)
	}
	shot("episode")

	// A hostile completion's markup is text on the page; none of it runs.
	do("open the hostile episode", chromedp.Navigate(base+"runs/browser-run/rollouts?step=0&ep=s0-g0-e0"), chromedp.WaitVisible(chromedp.CSS(`#episode .role-assistant`)))
	if title := eval(`document.title`); strings.Contains(title, "pwned") {
		t.Errorf("the completion's script ran: title %q", title)
	}
	if n := eval(`String(document.querySelectorAll('#episode img, #episode b, #episode script').length)`); n != "0" {
		t.Errorf("the completion's markup became %s elements", n)
	}
	if text := eval(`document.querySelector('#episode .role-assistant pre.content').textContent`); text != fakerun.HostileText {
		t.Errorf("the completion shows as %q, want its text", text)
	}
	shot("hostile")

	// Finding text across episodes marks it.
	do("search", chromedp.Navigate(base+"runs/browser-run/rollouts?q=assertionerror"), chromedp.WaitVisible(chromedp.CSS(`#episodes`)))
	if marks := eval(`[...document.querySelectorAll('#episodes mark')].map(m => m.textContent).join('|')`); marks == "" || !strings.Contains(marks, "AssertionError") {
		t.Errorf("search marks %q", marks)
	}
	shot("search")
}

func TestUICommandLine(t *testing.T) {
	code, out, errs := runCLI("ui", "--help")
	if code != 0 || !strings.Contains(out, "Usage: rlhost ui") || !strings.Contains(out, "--listen") || errs != "" {
		t.Errorf("ui --help: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := runCLI("ui", "--lisen", "x"); code != 2 || !strings.Contains(errs, "did you mean --listen?") {
		t.Errorf("ui --lisen: exit %d, stderr %q", code, errs)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if code, _, errs := runCLI("ui", missing); code != 1 || !strings.Contains(errs, "rlhost: run directory "+missing+": no such file or directory") {
		t.Errorf("ui on a missing directory: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runCLI("ui", "--listen", "7171", t.TempDir()); code != 1 || !strings.Contains(errs, "HOST:PORT") {
		t.Errorf("ui --listen 7171: exit %d, stderr %q", code, errs)
	}
	if code, out, _ := runCLI("run", "--help"); code != 0 || !strings.Contains(out, "--ui-listen") {
		t.Errorf("run --help does not list --ui: %q", out)
	}
	// A taken port stops a run before it has made anything.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	outDir := filepath.Join(t.TempDir(), "out")
	code, _, errs = runCLI("run", "../../../examples/coding.hcl", "--dry-run", "--out", outDir, "--ui", "--ui-listen", taken.Addr().String())
	if _, statErr := os.Stat(outDir); code != 1 || !strings.Contains(errs, "--ui: listen on") || statErr == nil {
		t.Errorf("run --ui on a taken port: exit %d, stderr %q, output directory made: %v", code, errs, statErr == nil)
	}
}

// rlhost run --ui serves the run while it runs: the page shows it running
// with the episodes the runner has in flight, and its job file one click
// away; the dashboard stops with the run.
func TestRunUIServesTheRunInProgress(t *testing.T) {
	pure := buildPlugin(t, "./testdata/pureenv", "pureenv")
	release := make(chan struct{})
	srv := fakeopenai.New(func(req fakeopenai.ChatRequest) fakeopenai.Reply {
		<-release
		return fakeopenai.Reply{Choices: []fakeopenai.ReplyChoice{fakeopenai.Text("alpha")}}
	})
	defer srv.Close()
	srv.SetModels("m")
	var once bool
	releaseAll := func() {
		if !once {
			once = true
			close(release)
		}
	}
	defer releaseAll()
	dir := t.TempDir()
	write(t, dir, "job.hcl", fmt.Sprintf(`
run {
  steps       = 2
  batch_size  = 2
  group_size  = 2
  concurrency = 4
}
env "pure" { plugin = %q }
policy "fake" {
  provider = "openai"
  base_url = %q
  model    = "m"
}
output { dir = "out" }
`, pure, srv.URL))
	cmd, out, errb := startRun(t, dir, nil, false, "run", "job.hcl", "--ui", "--ui-listen", "127.0.0.1:0")
	urlRE := regexp.MustCompile(`dashboard: (http://\S+/)`)
	waitUntil(t, cmd, "no dashboard URL, or no policy request", func() bool {
		return urlRE.MatchString(out.String()) && srv.Requests() >= 2
	}, out, errb)
	url := urlRE.FindStringSubmatch(out.String())[1]
	fetch := func(path string) string {
		t.Helper()
		resp, err := http.Get(url + strings.TrimPrefix(path, "/"))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	// The runner counts an episode in flight just before it starts it, so
	// the last of the four may still be on its way.
	inFlight := regexp.MustCompile(`<dt>in flight</dt><dd>4 <span class="note">0 of 4 done in step 0</span>`)
	page := ""
	waitUntil(t, cmd, "the page does not show 4 episodes in flight", func() bool {
		page = fetch("/")
		return inFlight.MatchString(page)
	}, out, errb)
	if !strings.Contains(page, `class="status running"`) {
		t.Errorf("the page does not show the run running:\n%s", page)
	}
	runID := regexp.MustCompile(`/runs/([^/"]+)/settings`).FindStringSubmatch(page)
	if runID == nil {
		t.Fatalf("no run on the page:\n%s", page)
	}
	if settings := fetch("/runs/" + runID[1] + "/settings"); !strings.Contains(settings, "concurrency = 4") || !strings.Contains(settings, "job.hcl") {
		t.Errorf("the settings page lacks the job file:\n%s", settings)
	}
	releaseAll()
	waitExit(t, cmd, time.Minute, errb)
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errb)
	}
	if !strings.Contains(out.String(), "dashboard stopped with the run; to look again: rlhost ui out") {
		t.Errorf("no hint at the end:\n%s", out)
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the dashboard still answers after the run")
	}
	var job output.Job
	b, err := os.ReadFile(filepath.Join(dir, "out", output.JobFile))
	if err != nil || json.Unmarshal(b, &job) != nil || job.RunID != runID[1] || !strings.Contains(job.Source, `plugin = "`) || job.BatchSize != 2 {
		t.Errorf("job.json: %v %+v", err, job)
	}
}
