package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/rlhost/rlhost/host/dashboard/rundir"
)

func parsePages() (*template.Template, error) {
	funcs := template.FuncMap{"rows": func(rows []episodeRow, task bool) rowsView { return rowsView{rows, task} }}
	t, err := template.New("pages").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard templates: %w", err)
	}
	return t, nil
}

// page is what every page's layout needs.
type page struct {
	Title string
	Nav   []navLink
	Body  any
}

type navLink struct{ Text, URL string }

func (s *Server) render(w http.ResponseWriter, status int, name string, p page) {
	var b bytes.Buffer
	if err := s.pages.ExecuteTemplate(&b, name, p); err != nil {
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

func (s *Server) notFound(w http.ResponseWriter, _ *http.Request, msg string) {
	s.render(w, http.StatusNotFound, "notfound", page{Title: "Not found", Body: msg})
}

// overviewView is the front page: every run, the health of those
// selected, and their curves overlaid.
type overviewView struct {
	Runs   []runView
	Health []healthView
	Curves []curveGroup
	Empty  bool
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	all := s.runs()
	want := r.URL.Query()["run"]
	var sel []runRef
	v := overviewView{Empty: len(all) == 0}
	for _, ref := range all {
		rv := s.view(ref)
		if len(want) == 0 || slices.Contains(want, ref.Key) {
			sel = append(sel, ref)
			rv.Selected = true
			v.Health = append(v.Health, s.health(ref))
		}
		v.Runs = append(v.Runs, rv)
	}
	v.Curves = curves(sel)
	title := "runs"
	if len(sel) == 1 {
		title = sel[0].Key
	}
	s.render(w, http.StatusOK, "overview", page{Title: title, Body: v})
}

// rolloutsView is the rollout viewer: a filtered list of episodes (by
// group for one step) and, when one is chosen, its conversation.
type rolloutsView struct {
	Run      runView
	Filter   filterView
	Groups   []groupView // one step, no search
	Rows     []episodeRow
	Total    int // episodes the filters select
	From, To int // 1-based, of the rows shown among Total
	PrevURL  string
	NextURL  string
	Search   string // a note on how far the search read
	Episode  *episodeView
	Err      string
}

type filterView struct {
	Step, Task, Finish, Min, Max, Q string
	Steps                           []option
	Tasks, Finishes                 []string
	ClearURL                        string
}

type option struct {
	Value, Label string
	Selected     bool
}

type groupView struct {
	Group         int
	Task          string
	Mean, Std     string
	Passed, Count int
	Rows          []episodeRow
}

type episodeRow struct {
	Key, URL                    string
	Step, Group, Index          int
	Task, Reward, RewardClass   string
	Finish, Tokens, Duration    string
	Turns                       int
	Errored, TimedOut, Selected bool
	Where                       string
	Snippet                     []seg
	reward                      float64
}

// rowsView is a list of episodes, with a task column unless the list is
// one group's (whose heading names the task).
type rowsView struct {
	Rows []episodeRow
	Task bool
}

// pageSize is how many episodes a list shows at once.
const pageSize = 50

func (s *Server) rollouts(w http.ResponseWriter, r *http.Request) {
	ref, ok := s.run(r.PathValue("run"))
	if !ok {
		s.notFound(w, r, fmt.Sprintf("No run %q in the directories this dashboard serves.", r.PathValue("run")))
		return
	}
	q := r.URL.Query()
	base := "/runs/" + pathEscape(ref.Key) + "/rollouts"
	v := rolloutsView{Run: s.view(ref)}
	f, fv, err := parseFilter(ref, q)
	if err != "" {
		v.Err = err
	}
	fv.ClearURL = base
	fv.Tasks, fv.Finishes = ref.Dir.Values(ref.ID)
	v.Filter = fv
	eps := ref.Dir.Episodes(f)
	v.Total = len(eps)
	selected := q.Get("ep")

	switch {
	case fv.Q != "":
		s.searchRows(r, ref, &v, eps, q, base)
	case f.Step >= 0:
		v.Groups = groups(ref, eps, q, base, selected)
		v.From, v.To = min(1, len(eps)), len(eps)
	default:
		start := 0
		if p, err := strconv.Atoi(q.Get("page")); err == nil && p > 1 {
			start = min((p-1)*pageSize, max(0, len(eps)-1)/pageSize*pageSize)
		}
		end := min(start+pageSize, len(eps))
		for _, e := range eps[start:end] {
			v.Rows = append(v.Rows, row(ref, e, q, base, selected))
		}
		v.From, v.To = min(start+1, end), end
		page := start/pageSize + 1
		if start > 0 {
			v.PrevURL = link(base, q, "page", strconv.Itoa(page-1), "ep", "")
		}
		if end < len(eps) {
			v.NextURL = link(base, q, "page", strconv.Itoa(page+1), "ep", "")
		}
	}
	if selected != "" {
		v.Episode = s.episodeView(ref, selected, fv.Q, q, base)
	}
	title := ref.Key + " rollouts"
	s.render(w, http.StatusOK, "rollouts", page{Title: title, Body: v,
		Nav: []navLink{{"curves", "/?run=" + url.QueryEscape(ref.Key)}, {"settings", v.Run.SettingsURL}}})
}

// parseFilter reads the list's filters from the query. With neither a
// step nor a search, the newest step is shown; a search looks at every
// step unless one is chosen.
func parseFilter(ref runRef, q url.Values) (rundir.Filter, filterView, string) {
	f := rundir.NewFilter(ref.ID)
	fv := filterView{Task: q.Get("task"), Finish: q.Get("finish"), Min: q.Get("min"), Max: q.Get("max"), Q: q.Get("q"), Step: q.Get("step")}
	f.Task, f.Finish = fv.Task, fv.Finish
	var problems []string
	parse := func(name, s string, dst *float64) {
		if s == "" {
			return
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(x) {
			problems = append(problems, fmt.Sprintf("%s %q is not a number; ignored", name, s))
			return
		}
		*dst = x
	}
	parse("minimum reward", fv.Min, &f.MinReward)
	parse("maximum reward", fv.Max, &f.MaxReward)
	newest := -1
	if n := len(ref.Steps); n > 0 {
		newest = ref.Steps[n-1].Step
	}
	newest = max(newest, ref.LastStep)
	switch {
	case fv.Step == "all", fv.Step == "" && fv.Q != "":
		fv.Step = "all"
	case fv.Step == "":
		f.Step = max(newest, 0)
		fv.Step = strconv.Itoa(f.Step)
	default:
		n, err := strconv.Atoi(fv.Step)
		if err != nil || n < 0 {
			problems = append(problems, fmt.Sprintf("step %q is not a step number; showing every step", fv.Step))
			fv.Step = "all"
		} else {
			f.Step = n
		}
	}
	fv.Steps = append(fv.Steps, option{Value: "all", Label: "every step", Selected: fv.Step == "all"})
	rewards := map[int]float64{}
	for _, m := range ref.Steps {
		rewards[m.Step] = m.RewardMean
	}
	for st := newest; st >= 0; st-- {
		label := fmt.Sprintf("step %d", st)
		if m, ok := rewards[st]; ok {
			label += " · reward " + num(m)
		} else {
			label += " · in progress"
		}
		fv.Steps = append(fv.Steps, option{Value: strconv.Itoa(st), Label: label, Selected: fv.Step == strconv.Itoa(st)})
	}
	return f, fv, strings.Join(problems, "; ")
}

func groups(ref runRef, eps []rundir.Episode, q url.Values, base, selected string) []groupView {
	var out []groupView
	for _, e := range eps {
		if len(out) == 0 || out[len(out)-1].Group != int(e.Group) {
			out = append(out, groupView{Group: int(e.Group), Task: ref.Dir.Str(e.Task)})
		}
		g := &out[len(out)-1]
		g.Rows = append(g.Rows, row(ref, e, q, base, selected))
		g.Count++
		if e.Is(rundir.Passed) {
			g.Passed++
		}
	}
	for i := range out {
		var sum, sq float64
		for _, r := range out[i].Rows {
			sum += r.reward
			sq += r.reward * r.reward
		}
		n := float64(len(out[i].Rows))
		mean := sum / n
		out[i].Mean, out[i].Std = num(mean), num(math.Sqrt(max(0, sq/n-mean*mean)))
	}
	return out
}

func row(ref runRef, e rundir.Episode, q url.Values, base, selected string) episodeRow {
	key := e.Key()
	r := episodeRow{Key: key, URL: link(base, q, "ep", key), Step: int(e.Step), Group: int(e.Group), Index: int(e.Index),
		Task: ref.Dir.Str(e.Task), Reward: num(e.Reward), Finish: ref.Dir.Str(e.Finish), Turns: int(e.Turns),
		Tokens:   fmt.Sprintf("%s / %s", comma(int(e.PromptTokens)), comma(int(e.CompletionTokens))),
		Duration: ms(float64(e.DurationMS)), Errored: e.Is(rundir.Errored), TimedOut: e.Is(rundir.TimedOut), Selected: key == selected,
		reward: e.Reward}
	switch {
	case e.Is(rundir.Errored):
		r.RewardClass = "bad"
	case e.Is(rundir.Passed):
		r.RewardClass = "good"
	case e.Reward > 0:
		r.RewardClass = "part"
	default:
		r.RewardClass = "zero"
	}
	return r
}

// searchRows fills the list with the episodes that hold the query, from
// the cursor on, reading the file in order.
func (s *Server) searchRows(r *http.Request, ref runRef, v *rolloutsView, eps []rundir.Episode, q url.Values, base string) {
	byOff := rundir.ByOffset(eps)
	from := 0
	if c, err := strconv.Atoi(q.Get("from")); err == nil && c > 0 && c <= len(byOff) {
		from = c
	}
	hits, next, err := ref.Dir.Search(r.Context(), byOff[from:], v.Filter.Q, pageSize)
	if err != nil {
		v.Err = err.Error()
	}
	for _, h := range hits {
		er := row(ref, h.Episode, q, base, q.Get("ep"))
		er.Where, er.Snippet = h.Where, highlight(h.Snippet, v.Filter.Q)
		v.Rows = append(v.Rows, er)
	}
	read := from + next
	v.Search = fmt.Sprintf("%d matches in episodes %s to %s of %s", len(hits), comma(min(from+1, len(byOff))), comma(read), comma(len(byOff)))
	if from > 0 {
		v.PrevURL = link(base, q, "from", "", "ep", "")
		v.Search += " (from the first: see the first page)"
	}
	if read < len(byOff) {
		v.NextURL = link(base, q, "from", strconv.Itoa(read), "ep", "")
	}
}

// episode serves one episode: as its raw line with .json, else as the
// rollout viewer on its step.
func (s *Server) episode(w http.ResponseWriter, r *http.Request) {
	ref, ok := s.run(r.PathValue("run"))
	if !ok {
		s.notFound(w, r, fmt.Sprintf("No run %q in the directories this dashboard serves.", r.PathValue("run")))
		return
	}
	key, raw := strings.CutSuffix(r.PathValue("ep"), ".json")
	e, ok := findEpisode(ref, key)
	if !ok {
		s.notFound(w, r, fmt.Sprintf("Run %s has no episode %q.", ref.Key, key))
		return
	}
	if !raw {
		http.Redirect(w, r, link("/runs/"+pathEscape(ref.Key)+"/rollouts", nil, "step", strconv.Itoa(int(e.Step)), "ep", key), http.StatusFound)
		return
	}
	line, err := ref.Dir.Line(e)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf("inline; filename=%q", ref.Key+"-"+key+".json"))
	w.Write(append(line, '\n'))
}

// findEpisode parses "s3-g1-e2" and looks the episode up.
func findEpisode(ref runRef, key string) (rundir.Episode, bool) {
	var step, group, index int
	if n, err := fmt.Sscanf(key, "s%d-g%d-e%d", &step, &group, &index); n != 3 || err != nil || fmt.Sprintf("s%d-g%d-e%d", step, group, index) != key {
		return rundir.Episode{}, false
	}
	return ref.Dir.Find(ref.ID, step, group, index)
}

// settingsView is what a run was configured with.
type settingsView struct {
	Run     runView
	Job     *jobView
	Files   []settingsFile
	Summary string
	Err     string
}

type jobView struct {
	ConfigPath string
	Run        []item
	Vars       []item
	Source     string
}

type settingsFile struct{ Name, JSON string }

func (s *Server) settings(w http.ResponseWriter, r *http.Request) {
	ref, ok := s.run(r.PathValue("run"))
	if !ok {
		s.notFound(w, r, fmt.Sprintf("No run %q in the directories this dashboard serves.", r.PathValue("run")))
		return
	}
	v := settingsView{Run: s.view(ref)}
	if j := ref.Job; j != nil {
		jv := &jobView{ConfigPath: j.ConfigPath, Source: j.Source}
		for _, it := range []item{
			{Label: "steps", Value: strconv.Itoa(j.Steps)}, {Label: "batch_size", Value: strconv.Itoa(j.BatchSize)},
			{Label: "group_size", Value: strconv.Itoa(j.GroupSize)}, {Label: "concurrency", Value: strconv.Itoa(j.Concurrency)},
			{Label: "max_turns", Value: strconv.Itoa(j.MaxTurns)}, {Label: "seed", Value: strconv.FormatInt(j.Seed, 10)},
			{Label: "episode_timeout", Value: j.EpisodeTimeout.String()}, {Label: "env", Value: j.Env}, {Label: "policy", Value: j.Policy},
		} {
			jv.Run = append(jv.Run, it)
		}
		for _, k := range slices.Sorted(maps.Keys(j.Vars)) {
			jv.Vars = append(jv.Vars, item{Label: k, Value: j.Vars[k]})
		}
		v.Job = jv
	}
	if ref.Latest {
		files, err := ref.Dir.Settings()
		if err != nil {
			v.Err = err.Error()
		}
		for _, f := range files {
			v.Files = append(v.Files, settingsFile{Name: f.Name, JSON: string(f.JSON)})
		}
	}
	if ref.Summary != nil {
		b, _ := json.MarshalIndent(ref.Summary, "", "  ")
		v.Summary = string(b)
	}
	s.render(w, http.StatusOK, "settings", page{Title: ref.Key + " settings", Body: v,
		Nav: []navLink{{"curves", "/?run=" + url.QueryEscape(ref.Key)}, {"rollouts", v.Run.RolloutsURL}}})
}
