package coding

import (
	"slices"
	"time"

	"github.com/rlhost/rlhost/core/duration"
	"github.com/rlhost/rlhost/core/schema"
)

// Reward modes.
const (
	RewardTests = "tests" // fraction of tests passed, -1 on failures
	RewardExec  = "exec"  // 1 if the program exits 0, else 0
)

// What an exception raised by one test call costs.
const (
	OnExceptionPenalty = "penalty" // the whole completion gets -1
	OnExceptionFail    = "fail"    // only that test counts as failed
)

// Extraction methods, tried in the configured order.
const (
	ExtractFenced = "fenced"
	ExtractAnswer = "answer"
	ExtractRaw    = "raw"
)

// config is the decoded `env "coding" {}` block.
type config struct {
	Tasks            string       `json:"tasks"`
	Task             []taskConfig `json:"task"`
	Extract          []string     `json:"extract"`
	Reward           string       `json:"reward"`
	Timeout          string       `json:"timeout"`
	ReferenceTimeout string       `json:"reference_timeout"`
	OnTestException  string       `json:"on_test_exception"`
	SystemPrompt     string       `json:"system_prompt"`
	Python           string       `json:"python"`
	Path             string       `json:"path"`
}

// taskConfig is one `task {}` block; the JSONL format uses the same fields.
type taskConfig struct {
	ID             string   `json:"id"`
	Prompt         string   `json:"prompt"`
	FuncName       string   `json:"func_name"`
	BannedPatterns []string `json:"banned_patterns"`
	Tests          []string `json:"tests"`
	Reference      string   `json:"reference"`
}

// settings is the validated form of config the episodes use.
type settings struct {
	extract          []string
	reward           string
	timeout          time.Duration
	referenceTimeout time.Duration
	onException      string
	systemPrompt     string
	python           string
	path             string
}

func configSpec() schema.Spec {
	return schema.Spec{
		Attributes: []schema.Attribute{
			schema.String("tasks", `"builtin", a JSONL file (relative to the config file), or "" for the task blocks (builtin when there are none)`).WithDefault(""),
			schema.StringList("extract", `code extraction methods in order: "fenced", "answer", "raw"`).WithDefault([]string{ExtractFenced, ExtractAnswer, ExtractRaw}),
			schema.String("reward", `"tests" (fraction of tests passed) or "exec" (1 if the program exits 0)`).WithDefault(RewardTests),
			schema.String("timeout", "wall-clock limit for the candidate's code in one completion, counted from the runner's start").WithDefault("1s"),
			schema.String("reference_timeout", "wall-clock limit for computing a task's expected outputs").WithDefault("10s"),
			schema.String("on_test_exception", `"penalty": a test that raises gives -1; "fail": it only fails that test`).WithDefault(OnExceptionPenalty),
			schema.String("system_prompt", "optional system message before each task prompt").WithDefault(""),
			schema.String("python", "Python interpreter, looked up on path inside the sandbox").WithDefault("python3"),
			schema.String("path", "PATH for commands run in the sandbox").WithDefault("/usr/local/bin:/usr/bin:/bin"),
		},
		Blocks: []schema.Block{schema.ListBlock("task", "an inline task", schema.Spec{Attributes: []schema.Attribute{
			schema.String("id", "").MarkRequired(),
			schema.String("prompt", "").MarkRequired(),
			schema.String("func_name", "").MarkRequired(),
			schema.StringList("banned_patterns", "").WithDefault([]string{}),
			schema.StringList("tests", "").WithDefault([]string{}),
			schema.String("reference", "").WithDefault(""),
		}})},
	}
}

// validate checks the block and returns settings, with diagnostics naming
// the offending attribute.
func (c config) validate() (settings, schema.Diagnostics) {
	var diags schema.Diagnostics
	s := settings{
		extract: c.Extract, reward: c.Reward, onException: c.OnTestException,
		systemPrompt: c.SystemPrompt, python: c.Python, path: c.Path,
	}
	if len(s.extract) == 0 {
		s.extract = []string{ExtractFenced, ExtractAnswer, ExtractRaw}
	}
	for _, m := range s.extract {
		if !slices.Contains([]string{ExtractFenced, ExtractAnswer, ExtractRaw}, m) {
			diags = append(diags, schema.Errorf([]string{"extract"}, "unknown extraction method",
				"%q is not one of fenced, answer, raw", m))
		}
	}
	if s.reward == "" {
		s.reward = RewardTests
	}
	if s.reward != RewardTests && s.reward != RewardExec {
		diags = append(diags, schema.Errorf([]string{"reward"}, "unknown reward mode", "%q is not tests or exec", s.reward))
	}
	if s.onException == "" {
		s.onException = OnExceptionPenalty
	}
	if s.onException != OnExceptionPenalty && s.onException != OnExceptionFail {
		diags = append(diags, schema.Errorf([]string{"on_test_exception"}, "unknown mode",
			"%q is not penalty or fail", s.onException))
	}
	var d schema.Diagnostics
	s.timeout, d = parseDuration("timeout", c.Timeout, time.Second)
	diags = append(diags, d...)
	s.referenceTimeout, d = parseDuration("reference_timeout", c.ReferenceTimeout, 10*time.Second)
	diags = append(diags, d...)
	if s.python == "" {
		s.python = "python3"
	}
	if s.path == "" {
		s.path = "/usr/local/bin:/usr/bin:/bin"
	}
	return s, diags
}

func parseDuration(attr, v string, def time.Duration) (time.Duration, schema.Diagnostics) {
	d, err := duration.PositiveOr(v, def)
	if err != nil {
		return def, schema.Diagnostics{schema.Errorf([]string{attr}, "invalid duration", "%v", err)}
	}
	return d, nil
}
