package mbpp

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/duration"
	"github.com/rlhost/rlhost/core/schema"
)

// config is the decoded `env "..." { plugin = "mbpp" ... }` block.
type config struct {
	Dataset               string   `json:"dataset"`
	Format                string   `json:"format"`
	Split                 string   `json:"split"`
	Limit                 int      `json:"limit"`
	Shuffle               bool     `json:"shuffle"`
	Seed                  int64    `json:"seed"`
	Tools                 []string `json:"tools"`
	MaxAttempts           int      `json:"max_attempts"`
	AttemptDiscount       float64  `json:"attempt_discount"`
	IncludeChallengeTests bool     `json:"include_challenge_tests"`
	ShowTests             bool     `json:"show_tests"`
	ToolOutputCap         int      `json:"tool_output_cap"`
	FeedbackCap           int      `json:"feedback_cap"`
	BashTimeout           string   `json:"bash_timeout"`
	TestTimeout           string   `json:"test_timeout"`
	SolutionPath          string   `json:"solution_path"`
	Workspace             string   `json:"workspace"`
	Python                string   `json:"python"`
	SystemPrompt          string   `json:"system_prompt"`

	bashTimeout time.Duration
	testTimeout time.Duration
}

// Tool names.
const (
	ToolBash      = "bash"
	ToolReadFile  = "read_file"
	ToolWriteFile = "write_file"
)

var allTools = []string{ToolBash, ToolReadFile, ToolWriteFile}

func defaultConfig() config {
	return config{
		Format: FormatAuto, Tools: slices.Clone(allTools), MaxAttempts: 3, AttemptDiscount: 1,
		ShowTests: true, ToolOutputCap: 16 << 10, FeedbackCap: 4 << 10,
		BashTimeout: "30s", TestTimeout: "10s", SolutionPath: "/workspace/solution.py",
		Workspace: core.DefaultWorkdir, Python: "python3",
	}
}

// spec is the HCL schema; its defaults mirror defaultConfig.
func spec() schema.Spec {
	d := defaultConfig()
	return schema.Spec{Attributes: []schema.Attribute{
		schema.String("dataset", "MBPP file (.jsonl, .json, .parquet) or directory of split files, relative to the config file").MarkRequired(),
		schema.String("format", "auto | jsonl | json | parquet").WithDefault(d.Format),
		schema.String("split", "train | test | validation | prompt | all; a file is filtered by MBPP task_id ranges, a directory selects <split>-*.parquet etc.").WithDefault(""),
		schema.Number("limit", "use at most this many problems (0: all)").WithDefault(0),
		schema.Bool("shuffle", "shuffle problems with seed before limit").WithDefault(false),
		schema.Number("seed", "shuffle seed").WithDefault(0),
		schema.StringList("tools", "tools offered: bash, read_file, write_file").WithDefault(d.Tools),
		schema.Number("max_attempts", "test runs before the episode ends unsolved").WithDefault(d.MaxAttempts),
		schema.Number("attempt_discount", "reward = attempt_discount^(attempt-1) when solved").WithDefault(d.AttemptDiscount),
		schema.Bool("include_challenge_tests", "also run challenge_test_list (hidden from the prompt)").WithDefault(false),
		schema.Bool("show_tests", "show test_list in the first user message").WithDefault(d.ShowTests),
		schema.Number("tool_output_cap", "bytes of tool output shown to the model").WithDefault(d.ToolOutputCap),
		schema.Number("feedback_cap", "bytes of test-failure feedback").WithDefault(d.FeedbackCap),
		schema.String("bash_timeout", "wall-clock limit of one bash call").WithDefault(d.BashTimeout),
		schema.String("test_timeout", "wall-clock limit of one test").WithDefault(d.TestTimeout),
		schema.String("solution_path", "file the agent must write, inside workspace").WithDefault(d.SolutionPath),
		schema.String("workspace", "the sandbox workspace as the agent sees it").WithDefault(d.Workspace),
		schema.String("python", "interpreter for tests; resolved to an absolute path at episode start").WithDefault(d.Python),
		schema.String("system_prompt", "override; {solution_path}, {max_attempts} and {tools} are replaced").WithDefault(""),
	}}
}

// check validates c and fills its parsed fields.
func (c *config) check() schema.Diagnostics {
	var ds schema.Diagnostics
	bad := func(attr, summary, format string, args ...any) {
		ds = append(ds, schema.Errorf([]string{attr}, summary, format, args...))
	}
	if c.Dataset == "" {
		bad("dataset", "dataset is required", "set dataset to an MBPP .jsonl, .json or .parquet file")
	}
	if !slices.Contains([]string{FormatAuto, FormatJSONL, FormatJSON, FormatParquet}, c.Format) {
		bad("format", "unknown format", "%q: want auto, jsonl, json or parquet", c.Format)
	}
	if s := strings.ToLower(c.Split); s != "" && s != "all" {
		if _, ok := splitRanges[s]; !ok {
			bad("split", "unknown split", "%q: want train, test, validation, prompt or all", c.Split)
		}
	}
	if c.Limit < 0 {
		bad("limit", "limit must be >= 0", "got %d", c.Limit)
	}
	if len(c.Tools) == 0 {
		bad("tools", "no tools", "offer at least one of %v", allTools)
	}
	for _, t := range c.Tools {
		if !slices.Contains(allTools, t) {
			bad("tools", "unknown tool", "%q: want one of %v", t, allTools)
		}
	}
	if c.MaxAttempts < 1 {
		bad("max_attempts", "max_attempts must be >= 1", "got %d", c.MaxAttempts)
	}
	if c.AttemptDiscount <= 0 || c.AttemptDiscount > 1 || math.IsNaN(c.AttemptDiscount) {
		bad("attempt_discount", "attempt_discount must be in (0, 1]", "got %v", c.AttemptDiscount)
	}
	if c.ToolOutputCap < 256 {
		bad("tool_output_cap", "tool_output_cap too small", "got %d bytes; want at least 256", c.ToolOutputCap)
	}
	if c.FeedbackCap < 256 {
		bad("feedback_cap", "feedback_cap too small", "got %d bytes; want at least 256", c.FeedbackCap)
	}
	for _, d := range []struct {
		attr string
		s    string
		dst  *time.Duration
	}{{"bash_timeout", c.BashTimeout, &c.bashTimeout}, {"test_timeout", c.TestTimeout, &c.testTimeout}} {
		v, err := duration.Positive(d.s)
		if err != nil {
			bad(d.attr, "invalid duration", "%v", err)
			continue
		}
		*d.dst = v
	}
	if !path.IsAbs(c.Workspace) {
		bad("workspace", "workspace must be absolute", "got %q", c.Workspace)
	}
	if _, err := c.workspaceRel(c.SolutionPath); err != nil || path.Base(c.SolutionPath) == "." || strings.HasSuffix(c.SolutionPath, "/") {
		bad("solution_path", "solution_path must be a file inside the workspace", "got %q (workspace %s)", c.SolutionPath, c.Workspace)
	} else if !strings.HasSuffix(c.SolutionPath, ".py") {
		bad("solution_path", "solution_path must end in .py", "got %q", c.SolutionPath)
	}
	if c.Python == "" {
		bad("python", "python must not be empty", "use \"python3\" or an absolute path")
	}
	return ds
}

// workspaceRel maps a path the agent uses (absolute under the workspace, or
// relative to it) to a clean relative one, or fails for paths outside it.
func (c *config) workspaceRel(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path")
	}
	ws := path.Clean(c.Workspace)
	if path.IsAbs(p) {
		cp := path.Clean(p)
		if cp == ws {
			return ".", nil
		}
		rel, ok := strings.CutPrefix(cp, ws+"/")
		if !ok {
			return "", fmt.Errorf("%s is outside the workspace %s", p, ws)
		}
		return rel, nil
	}
	cp := path.Clean(p)
	if cp == ".." || strings.HasPrefix(cp, "../") {
		return "", fmt.Errorf("%s is outside the workspace %s", p, ws)
	}
	return cp, nil
}

// runtimeInfo is what the env learns about a sandbox before the agent acts.
type runtimeInfo struct {
	python   string // absolute interpreter path
	workdir  string // the workspace's real path inside the sandbox
	solution string // the solution file's real path
	// isolation is what the backend reported for the probe exec; with
	// "namespaces" the env may kill every process in the sandbox.
	isolation string
}
