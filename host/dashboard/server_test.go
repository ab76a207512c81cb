package dashboard

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/host/dashboard/fakerun"
	"github.com/rlhost/rlhost/host/output"
)

var small = fakerun.Options{RunID: "run-a", Steps: 4, Groups: 2, GroupSize: 3, Turns: 2, ToolOutput: 120, TokenIDs: 3, Seed: 5, Hostile: true}

func makeRun(t testing.TB, dir string, opt fakerun.Options) {
	t.Helper()
	if _, err := fakerun.Write(dir, opt); err != nil {
		t.Fatal(err)
	}
}

func newServer(t testing.TB, opt Options) *Server {
	t.Helper()
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// get requests path the way a browser on this machine would.
func get(t testing.TB, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7171"+path, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func mustGet(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	w := get(t, h, path)
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, w.Code, w.Body.String())
	}
	return w.Body.String()
}

func TestOverview(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	makeRun(t, a, small)
	other := small
	other.RunID, other.Steps = "run-b", 2
	makeRun(t, b, other)
	h := newServer(t, Options{Dirs: []string{a, b}}).Handler()
	body := mustGet(t, h, "/")
	for _, want := range []string{"run-a", "run-b", "reward (mean ± std)", "pass rate", "train/loss", "time/rollout_s",
		"metric/tests_passed", "async/staleness_mean", "finish/done", "sandbox execs", "/runs/run-a/settings"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	// One dot per step and run on the reward chart.
	reward := chartSVG(t, body, "reward (mean ± std)")
	if n := strings.Count(reward, `class="pt"`); n != 4+2 {
		t.Errorf("reward chart has %d dots, want 6", n)
	}
	// Selecting one run draws only its line.
	one := mustGet(t, h, "/?run=run-b")
	if n := strings.Count(chartSVG(t, one, "reward (mean ± std)"), `class="pt"`); n != 2 {
		t.Errorf("run-b alone: %d dots, want 2", n)
	}
}

// chartSVG cuts the chart titled title out of a page.
func chartSVG(t *testing.T, page, title string) string {
	t.Helper()
	start := strings.Index(page, `aria-label="`+htmlEscape(title)+`"`)
	if start < 0 {
		t.Fatalf("no chart %q", title)
	}
	end := strings.Index(page[start:], "</svg>")
	return page[start : start+end]
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

func TestRolloutsAndEpisode(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	h := newServer(t, Options{Dirs: []string{dir}}).Handler()
	list := mustGet(t, h, "/runs/run-a/rollouts")
	// The newest step by default, by group.
	if !strings.Contains(list, `<option value="3" selected>`) || strings.Count(list, `class="ep-link mono"`) != 6 || strings.Count(list, `class="group"`) != 2 {
		t.Errorf("step 3's list:\n%s", list)
	}
	page := mustGet(t, h, "/runs/run-a/rollouts?step=1&ep=s1-g1-e1")
	for _, want := range []string{`class="call"`, "bash", "cmd", "python3 -m pytest", "result of <span class=\"mono\">bash (call_", "exit status 1", "tests_passed", "turn 0 · policy"} {
		if !strings.Contains(page, want) {
			t.Errorf("episode page lacks %q", want)
		}
	}
	if !strings.Contains(page, `href="/runs/run-a/rollouts?ep=s1-g1-e2&amp;step=1" id="ep-next"`) || !strings.Contains(page, `href="/runs/run-a/rollouts?ep=s1-g1-e0&amp;step=1" id="ep-prev"`) {
		t.Error("no links to the episodes beside it")
	}
}

// What a model or sandbox wrote is shown, never interpreted.
func TestHostileTextIsEscaped(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	h := newServer(t, Options{Dirs: []string{dir}}).Handler()
	for _, path := range []string{"/runs/run-a/rollouts?step=0&ep=s0-g0-e0", "/runs/run-a/rollouts?q=" + "%3Cscript%3E", "/runs/run-a/settings"} {
		body := mustGet(t, h, path)
		if strings.Contains(body, "<script>document") || strings.Contains(body, "<img src=x") || strings.Contains(body, "<b>bold") {
			t.Errorf("%s: hostile markup got through", path)
		}
	}
	page := mustGet(t, h, "/runs/run-a/rollouts?step=0&ep=s0-g0-e0")
	if !strings.Contains(page, "&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;") {
		t.Error("the hostile text is not shown")
	}
}

func TestSearchPage(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	h := newServer(t, Options{Dirs: []string{dir}}).Handler()
	body := mustGet(t, h, "/runs/run-a/rollouts?q=PYTHON3+-m")
	if n := strings.Count(body, `class="snippet"`); n != 24 {
		t.Errorf("%d hits, want one per episode (24)", n)
	}
	if !strings.Contains(body, "<mark>python3 -m</mark>") || !strings.Contains(body, `<option value="all" selected>`) {
		t.Error("matches are not marked, or the search is not over every step")
	}
	if none := mustGet(t, h, "/runs/run-a/rollouts?q=no+such+words"); strings.Contains(none, `class="snippet"`) || !strings.Contains(none, "0 matches") {
		t.Error("a search with no match listed episodes")
	}
}

func TestFilters(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	h := newServer(t, Options{Dirs: []string{dir}}).Handler()
	for _, tc := range []struct {
		query string
		check func(fakeRow) bool
	}{
		{"step=all&min=0.3", func(r fakeRow) bool { return r.reward >= 0.3 }},
		{"step=all&max=0.3", func(r fakeRow) bool { return r.reward <= 0.3 }},
		{"step=all&task=sort", func(r fakeRow) bool { return r.task == "sort_list" }},
		{"step=all&finish=done", func(r fakeRow) bool { return r.finish == "done" }},
	} {
		rows := parseRows(t, mustGet(t, h, "/runs/run-a/rollouts?"+tc.query))
		if len(rows) == 0 {
			t.Errorf("%s: nothing listed", tc.query)
		}
		for _, r := range rows {
			if !tc.check(r) {
				t.Errorf("%s: listed %+v", tc.query, r)
			}
		}
	}
	if body := mustGet(t, h, "/runs/run-a/rollouts?min=abc"); !strings.Contains(body, "is not a number") {
		t.Error("a bad bound is not explained")
	}
}

type fakeRow struct {
	key, task, finish string
	reward            float64
}

var rowRE = regexp.MustCompile(`(?s)class="ep-link mono" href="[^"]*">([^<]+)</a></td>\s*<td class="mono small">([^<]*)</td>\s*<td class="num"><span class="reward [a-z]+">([^<]+)</span></td>\s*<td>([a-z_]+)`)

func parseRows(t *testing.T, body string) []fakeRow {
	var out []fakeRow
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		var r fakeRow
		r.key, r.task, r.finish = m[1], m[2], m[4]
		fmt.Sscan(m[3], &r.reward)
		out = append(out, r)
	}
	return out
}

func TestRawEpisodeAndLinks(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	h := newServer(t, Options{Dirs: []string{dir}}).Handler()
	w := get(t, h, "/runs/run-a/episodes/s2-g1-e0.json")
	var tr core.Trajectory
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &tr) != nil || tr.Step != 2 || tr.Group != 1 || tr.Index != 0 {
		t.Fatalf("raw episode: %d %s", w.Code, w.Body.String())
	}
	w = get(t, h, "/runs/run-a/episodes/s2-g1-e0")
	if w.Code != http.StatusFound || w.Header().Get("Location") != "/runs/run-a/rollouts?ep=s2-g1-e0&step=2" {
		t.Errorf("episode link: %d to %q", w.Code, w.Header().Get("Location"))
	}
	for _, bad := range []string{"/runs/run-a/episodes/s9-g0-e0", "/runs/run-a/episodes/s01-g0-e0.json", "/runs/nope/rollouts", "/runs/nope/settings", "/nope", "/static/pages.html"} {
		if w := get(t, h, bad); w.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", bad, w.Code)
		}
	}
}

func TestSettingsPage(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	h := newServer(t, Options{Dirs: []string{dir}}).Handler()
	body := mustGet(t, h, "/runs/run-a/settings")
	for _, want := range []string{"/jobs/fake.hcl", "group_size", "The job file as run", "steps = 4", "summary.json", "seed"} {
		if !strings.Contains(body, want) {
			t.Errorf("settings lack %q", want)
		}
	}
}

func TestGuard(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	s := newServer(t, Options{Dirs: []string{dir}})
	h := s.Handler()
	for _, tc := range []struct {
		method, host string
		want         int
	}{
		{"GET", "127.0.0.1:7171", 200},
		{"GET", "localhost:7171", 200},
		{"GET", "[::1]:7171", 200},
		{"HEAD", "127.0.0.1", 200},
		{"POST", "127.0.0.1:7171", 405},
		{"DELETE", "127.0.0.1:7171", 405},
		{"GET", "attacker.example:7171", 403}, // a name rebound to 127.0.0.1
		{"GET", "10.0.0.5:7171", 403},
	} {
		req := httptest.NewRequest(tc.method, "/", nil)
		req.Host = tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("%s with Host %s: %d, want %d", tc.method, tc.host, w.Code, tc.want)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("CSP %q", csp)
		}
	}
	any := newServer(t, Options{Dirs: []string{dir}, AnyHost: true}).Handler()
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "box.lan:7171"
	w := httptest.NewRecorder()
	any.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Errorf("AnyHost: %d", w.Code)
	}
}

// snapshot records every file under dir: name, mode, size, time, content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		st, _ := d.Info()
		sum := ""
		if d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			sum = fmt.Sprintf("%x", sha256.Sum256(b))
		}
		out[p] = fmt.Sprintf("%v %d %v %s", st.Mode(), st.Size(), st.ModTime().UnixNano(), sum)
		return nil
	})
	return out
}

// Serving a run changes nothing in its directory.
func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	os.MkdirAll(filepath.Join(dir, "checkpoints", "step-000004", "model"), 0o755)
	os.WriteFile(filepath.Join(dir, "checkpoints", "step-000004", "trainer_state.json"), []byte(`{"config":{"lr":1}}`), 0o644)
	before := snapshot(t, dir)
	s := newServer(t, Options{Dirs: []string{dir}})
	h := s.Handler()
	for _, p := range []string{"/", "/runs/run-a/rollouts", "/runs/run-a/rollouts?step=all&q=pytest", "/runs/run-a/rollouts?ep=s3-g0-e1",
		"/runs/run-a/settings", "/runs/run-a/episodes/s1-g0-e0.json", "/static/app.js"} {
		mustGet(t, h, p)
	}
	s.refresh()
	if after := snapshot(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the run directory changed:\nbefore %v\nafter  %v", before, after)
	}
}

// An open page hears about a new step, and the curve has it.
func TestLiveEvents(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, small)
	s := newServer(t, Options{Dirs: []string{dir}, Poll: 20 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				events <- sc.Text()
			}
		}
		close(events)
	}()
	next := small
	next.Start, next.Steps = 4, 1
	makeRun(t, dir, next)
	// Another page's request finds the new step first; this page still
	// hears of it.
	mustGet(t, s.Handler(), "/runs/run-a/rollouts")
	select {
	case _, ok := <-events:
		if !ok {
			t.Fatal("the event stream ended")
		}
	case <-time.After(time.Minute):
		t.Fatal("no event after a step was appended")
	}
	if n := strings.Count(chartSVG(t, mustGet(t, s.Handler(), "/"), "reward (mean ± std)"), `class="pt"`); n != 5 {
		t.Errorf("%d dots after the new step, want 5", n)
	}
}

// Episodes in flight come from the runner for the run this process runs.
func TestInFlight(t *testing.T) {
	dir := t.TempDir()
	w, err := output.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.WriteJob(output.Job{RunID: "live", BatchSize: 2, GroupSize: 4, Concurrency: 4, Steps: 3})
	w.WriteSummary(output.Summary{RunID: "live", TotalSteps: 3, StartedAt: time.Now()})
	live := &Live{}
	s := newServer(t, Options{Dirs: []string{dir}, Live: live})
	live.StepStarted(0)
	for range 4 {
		live.EpisodeStarted()
	}
	tr := core.Trajectory{RunID: "live", Step: 0, FinishReason: "done"}
	w.WriteTrajectory(tr)
	live.EpisodeFinished(tr)
	s.refresh()
	body := mustGet(t, s.Handler(), "/")
	if !regexp.MustCompile(`<dt>in flight</dt><dd>3 <span class="note">1 of 8 done in step 0</span>`).MatchString(body) || !strings.Contains(body, `status running`) {
		t.Errorf("in flight not shown:\n%s", body)
	}
	live.End()
	if body := mustGet(t, s.Handler(), "/"); !strings.Contains(body, "<dt>in flight</dt><dd>0 ") {
		t.Error("episodes still in flight after the run ended")
	}
	// Without the runner, the files give an estimate.
	est := newServer(t, Options{Dirs: []string{dir}})
	if body := mustGet(t, est.Handler(), "/"); !strings.Contains(body, "<dt>in flight</dt><dd>about 4 ") {
		t.Errorf("no estimate:\n%s", body)
	}
}

func TestFindRunDirs(t *testing.T) {
	root := t.TempDir()
	makeRun(t, filepath.Join(root, "runs", "a"), small)
	makeRun(t, filepath.Join(root, "runs", "b"), small)
	os.MkdirAll(filepath.Join(root, "runs", "notes"), 0o755)
	os.MkdirAll(filepath.Join(root, "empty"), 0o755)
	os.WriteFile(filepath.Join(root, "file"), nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{filepath.Join(root, "runs", "a")}, "a"},
		{[]string{filepath.Join(root, "runs")}, "a b (runs)"},
		{[]string{filepath.Join(root, "empty")}, "(empty)"},
		{[]string{filepath.Join(root, "missing")}, "error: no such file or directory"},
		{[]string{filepath.Join(root, "file")}, "error: is not a directory"},
	} {
		dirs, parents, err := FindRunDirs(tc.args)
		var got []string
		for _, d := range dirs {
			got = append(got, filepath.Base(d))
		}
		for _, p := range parents {
			got = append(got, "("+filepath.Base(p)+")")
		}
		g := strings.Join(got, " ")
		if err != nil {
			g = "error: " + err.Error()
		}
		if !strings.HasPrefix(tc.want, "error: ") && g != tc.want || strings.HasPrefix(tc.want, "error: ") && !strings.Contains(g, strings.TrimPrefix(tc.want, "error: ")) {
			t.Errorf("FindRunDirs(%v) = %s, want %s", tc.args, g, tc.want)
		}
	}
}

func TestListen(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{{"127.0.0.1", true}, {"localhost", true}, {"::1", true}, {"[::1]", true}, {"", false}, {"0.0.0.0", false}, {"192.168.1.4", false}} {
		if got := isLoopback(tc.host); got != tc.want {
			t.Errorf("isLoopback(%q) = %v", tc.host, got)
		}
	}
	if _, _, err := Listen("7171"); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("a bare port: %v", err)
	}
	ln, loop, err := Listen("127.0.0.1:0")
	if err != nil || !loop {
		t.Fatal(err, loop)
	}
	defer ln.Close()
	if u := URL(ln); !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("URL %s", u)
	}
	// A taken explicit port is an error; the default falls back.
	if _, _, err := Listen(ln.Addr().String()); err == nil {
		t.Error("listening twice on one port")
	}
}

// No URL reaches a file outside the run directories given: not through
// the path, its escapes, the run key or the episode key. The files outside
// carry a token no request can echo.
func FuzzPaths(f *testing.F) {
	root := f.TempDir()
	dir := filepath.Join(root, "served")
	makeRun(f, dir, small)
	token := fmt.Sprintf("tok%x", sha256.Sum256([]byte(root+time.Now().String())))
	secret := small
	secret.RunID = token
	makeRun(f, filepath.Join(root, "secret"), secret) // beside the run served
	makeRun(f, root, secret)                          // above it
	os.WriteFile(filepath.Join(root, "SECRET.txt"), []byte(token), 0o644)
	os.Symlink(filepath.Join(root, "SECRET.txt"), filepath.Join(dir, "checkpoints"))
	s, err := New(Options{Dirs: []string{dir}})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	for _, seed := range []string{"/", "/static/app.js", "/static/../SECRET.txt", "/static/..%2f..%2fSECRET.txt", "/runs/run-a/rollouts?step=1&ep=s1-g0-e0",
		"/runs/..%2fsecret/rollouts", "/runs/secret/settings", "/runs/run-a/settings", "/runs/run-a/episodes/..%2f..%2fSECRET.txt",
		"/runs/run-a/episodes/s0-g0-e0.json", "//SECRET.txt", "/runs/run-a/rollouts?q=tok", "/runs/%2e%2e/settings",
		"/runs/run-a/rollouts?ep=../../secret", "/../secret/metrics.jsonl", "/runs/run-a/episodes/s0-g0-e0%2f..%2f..%2fSECRET.txt"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, target string) {
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:7171", nil)
		if err != nil {
			return
		}
		u, err := req.URL.Parse(target)
		if err != nil {
			return
		}
		req.URL, req.Host, req.RequestURI = u, "127.0.0.1:7171", u.RequestURI()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		body, _ := io.ReadAll(w.Body)
		if strings.Contains(string(body), token) {
			t.Fatalf("GET %q showed a file outside the run directory:\n%s", target, body)
		}
		if w.Code >= 500 {
			t.Fatalf("GET %q: %d %s", target, w.Code, body)
		}
	})
}

// A run that starts in a directory of runs after the dashboard did shows
// up on the page.
func TestNewRunInParentAppears(t *testing.T) {
	root := t.TempDir()
	makeRun(t, filepath.Join(root, "a"), small)
	dirs, parents, err := FindRunDirs([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Options{Dirs: dirs, Parents: parents, Poll: 20 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	later := small
	later.RunID = "run-later"
	makeRun(t, filepath.Join(root, "b"), later)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(mustGet(t, s.Handler(), "/"), "/runs/run-later/settings") {
		if time.Now().After(deadline) {
			t.Fatal("the new run never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if body := mustGet(t, s.Handler(), "/runs/run-later/rollouts"); !strings.Contains(body, "ep-link") {
		t.Error("the new run's episodes are not listed")
	}
}
