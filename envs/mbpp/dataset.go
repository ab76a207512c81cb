package mbpp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/rlhost/rlhost/core/jsonl"
)

// Problem is one MBPP problem. Text is the task statement (MBPP's "text",
// the sanitized variant's "prompt"); Code is a reference solution.
type Problem struct {
	TaskID            int      `json:"task_id"`
	Text              string   `json:"text"`
	Code              string   `json:"code,omitempty"`
	TestList          []string `json:"test_list"`
	TestSetupCode     string   `json:"test_setup_code,omitempty"`
	ChallengeTestList []string `json:"challenge_test_list,omitempty"`
	TestImports       []string `json:"test_imports,omitempty"` // sanitized variant
	// Files are written into the workspace before the agent's first turn
	// (path relative to the workspace → content). Not an MBPP field: it
	// lets a task hand the agent material it must find with its tools.
	Files map[string]string `json:"files,omitempty"`
}

// rawProblem accepts both MBPP layouts. task_id is a json.Number so both
// 11 and "11" work; unknown fields (source_file, ...) are ignored.
type rawProblem struct {
	TaskID            json.RawMessage   `json:"task_id"`
	Text              *string           `json:"text"`
	Prompt            *string           `json:"prompt"`
	Code              string            `json:"code"`
	TestList          []string          `json:"test_list"`
	TestSetupCode     string            `json:"test_setup_code"`
	ChallengeTestList []string          `json:"challenge_test_list"`
	TestImports       []string          `json:"test_imports"`
	Files             map[string]string `json:"files"`
}

func (r rawProblem) problem() (Problem, error) {
	id, err := parseTaskID(r.TaskID)
	if err != nil {
		return Problem{}, err
	}
	p := Problem{
		TaskID: id, Code: r.Code, TestList: r.TestList, TestSetupCode: r.TestSetupCode,
		ChallengeTestList: r.ChallengeTestList, TestImports: r.TestImports, Files: r.Files,
	}
	switch {
	case r.Text != nil:
		p.Text = *r.Text
	case r.Prompt != nil:
		p.Text = *r.Prompt
	}
	return p, p.validate()
}

func parseTaskID(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("task_id is missing")
	}
	s := string(raw)
	if s[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("task_id %s: %w", raw, err)
		}
	}
	id, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("task_id %s is not an integer", raw)
	}
	return id, nil
}

func (p Problem) validate() error {
	if strings.TrimSpace(p.Text) == "" {
		return fmt.Errorf("task %d: text (or prompt) is empty", p.TaskID)
	}
	if len(p.TestList) == 0 {
		return fmt.Errorf("task %d: test_list is empty", p.TaskID)
	}
	for i, t := range p.TestList {
		if strings.TrimSpace(t) == "" {
			return fmt.Errorf("task %d: test_list[%d] is empty", p.TaskID, i)
		}
	}
	for name := range p.Files {
		if clean := path.Clean(name); name == "" || path.IsAbs(name) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("task %d: files: %q is not a path inside the workspace (relative, without ..)", p.TaskID, name)
		}
	}
	return nil
}

// ParseRecord parses one MBPP record (a JSONL line or one element of the
// sanitized JSON array).
func ParseRecord(data []byte) (Problem, error) {
	var r rawProblem
	if err := json.Unmarshal(data, &r); err != nil {
		return Problem{}, fmt.Errorf("parse MBPP record: %w", err)
	}
	return r.problem()
}

// maxLine bounds one JSONL record; MBPP records are a few KB.
const maxLine = 16 << 20

// ParseJSONL reads one record per non-blank line. Errors name the line.
func ParseJSONL(r io.Reader) ([]Problem, error) {
	var out []Problem
	err := jsonl.Each(r, "", maxLine, func(_ int, line []byte) error {
		p, err := ParseRecord(line)
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read JSONL: %w", err)
	}
	return out, nil
}

// ParseJSONArray reads the sanitized variant: one JSON array of records.
func ParseJSONArray(data []byte) ([]Problem, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, fmt.Errorf("parse JSON array: %w", err)
	}
	out := make([]Problem, 0, len(raws))
	for i, raw := range raws {
		p, err := ParseRecord(raw)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// parquetRow is the Hugging Face datasets layout of both MBPP configs
// ("full" has text/challenge_test_list, "sanitized" prompt/test_imports);
// columns a file lacks stay empty.
type parquetRow struct {
	TaskID            int64    `parquet:"task_id,optional"`
	Text              *string  `parquet:"text,optional"`
	Prompt            *string  `parquet:"prompt,optional"`
	Code              string   `parquet:"code,optional"`
	TestList          []string `parquet:"test_list,list"`
	TestSetupCode     string   `parquet:"test_setup_code,optional"`
	ChallengeTestList []string `parquet:"challenge_test_list,list"`
	TestImports       []string `parquet:"test_imports,list"`
}

// ReadParquet reads an MBPP Parquet file in the Hugging Face layout.
func ReadParquet(path string) ([]Problem, error) {
	rows, err := parquet.ReadFile[parquetRow](path)
	if err != nil {
		return nil, fmt.Errorf("read parquet %s: %w", path, err)
	}
	// A column the file lacks reads back as [""]; look at the file's own
	// schema to tell "absent" from "present".
	has, err := parquetColumns(path)
	if err != nil {
		return nil, err
	}
	out := make([]Problem, 0, len(rows))
	for i, r := range rows {
		if !has["challenge_test_list"] {
			r.ChallengeTestList = nil
		}
		if !has["test_imports"] {
			r.TestImports = nil
		}
		if !has["text"] {
			r.Text = nil
		}
		if !has["prompt"] {
			r.Prompt = nil
		}
		p := Problem{
			TaskID: int(r.TaskID), Code: r.Code, TestList: r.TestList, TestSetupCode: r.TestSetupCode,
			ChallengeTestList: r.ChallengeTestList, TestImports: r.TestImports,
		}
		switch {
		case r.Text != nil:
			p.Text = *r.Text
		case r.Prompt != nil:
			p.Text = *r.Prompt
		}
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("read parquet %s: row %d: %w", path, i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// parquetColumns returns the top-level column names of a Parquet file.
func parquetColumns(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("read parquet %s: %w", path, err)
	}
	out := map[string]bool{}
	for _, field := range pf.Schema().Fields() {
		out[field.Name()] = true
	}
	return out, nil
}

// Dataset formats.
const (
	FormatAuto    = "auto"
	FormatJSONL   = "jsonl"
	FormatJSON    = "json"
	FormatParquet = "parquet"
)

// loadFile reads one file in the given format (auto: by extension, and a
// .json file whose first byte is not '[' is read as JSONL).
func loadFile(path, format string) ([]Problem, error) {
	if format == FormatAuto || format == "" {
		switch strings.ToLower(filepath.Ext(path)) {
		case ".parquet":
			format = FormatParquet
		case ".json":
			format = FormatJSON
		default:
			format = FormatJSONL
		}
	}
	if format == FormatParquet {
		return ReadParquet(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read dataset: %w", err)
	}
	var ps []Problem
	if format == FormatJSON && bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) {
		ps, err = ParseJSONArray(data)
	} else {
		ps, err = ParseJSONL(bytes.NewReader(data))
	}
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	return ps, nil
}

// Splits and MBPP's conventional task_id ranges (Austin et al. 2021), which
// the original JSONL and both Hugging Face configs keep.
var splitRanges = map[string][2]int{
	"prompt":     {1, 10},
	"test":       {11, 510},
	"validation": {511, 600},
	"train":      {601, 974},
}

// splitFile reports whether a file name in a dataset directory belongs to
// split, in the Hugging Face layout ("train-00000-of-00001.parquet") or a
// plain one ("train.jsonl").
func splitFile(name, split string) bool {
	base := strings.ToLower(name)
	return strings.HasPrefix(base, split+"-") || strings.HasPrefix(base, split+".") || strings.HasPrefix(base, split+"_")
}

func isDataFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".parquet", ".jsonl", ".json":
		return true
	}
	return false
}

// DatasetOptions select and order the problems of a dataset.
type DatasetOptions struct {
	Path    string // file, or a directory of split files
	Format  string
	Split   string // "" or "all": everything
	Limit   int    // 0: no limit
	Shuffle bool
	Seed    int64
}

// LoadDataset loads, filters by split, orders (by task_id, or shuffled with
// the seed) and limits. The result is the same on every call.
func LoadDataset(o DatasetOptions) ([]Problem, error) {
	split := strings.ToLower(o.Split)
	if split == "all" {
		split = ""
	}
	if _, ok := splitRanges[split]; split != "" && !ok {
		return nil, fmt.Errorf("unknown split %q (want train, test, validation, prompt or all)", o.Split)
	}
	st, err := os.Stat(o.Path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	var ps []Problem
	if st.IsDir() {
		ps, err = loadDir(o.Path, o.Format, split)
	} else {
		ps, err = loadFile(o.Path, o.Format)
		if err == nil && split != "" {
			ps = filterRange(ps, splitRanges[split])
		}
	}
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("dataset %s has no problems for split %q", o.Path, o.Split)
	}
	slices.SortStableFunc(ps, func(a, b Problem) int { return a.TaskID - b.TaskID })
	for i := 1; i < len(ps); i++ {
		if ps[i].TaskID == ps[i-1].TaskID {
			return nil, fmt.Errorf("dataset %s: task_id %d appears twice", o.Path, ps[i].TaskID)
		}
	}
	if o.Shuffle {
		r := rand.New(rand.NewPCG(uint64(o.Seed), 0x6d627070)) // "mbpp"
		r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	}
	if o.Limit > 0 && o.Limit < len(ps) {
		ps = ps[:o.Limit]
	}
	return ps, nil
}

// loadDir reads the data files of a directory: with a split, the files named
// for it (Hugging Face layout); without, all of them.
func loadDir(dir, format, split string) ([]Problem, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	var ps []Problem
	found := false
	for _, e := range ents {
		if e.IsDir() || !isDataFile(e.Name()) || (split != "" && !splitFile(e.Name(), split)) {
			continue
		}
		found = true
		more, err := loadFile(filepath.Join(dir, e.Name()), format)
		if err != nil {
			return nil, err
		}
		ps = append(ps, more...)
	}
	if !found {
		return nil, fmt.Errorf("dataset directory %s has no data files for split %q", dir, split)
	}
	return ps, nil
}

func filterRange(ps []Problem, r [2]int) []Problem {
	out := ps[:0]
	for _, p := range ps {
		if p.TaskID >= r[0] && p.TaskID <= r[1] {
			out = append(out, p)
		}
	}
	return out
}
