package mbpp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// hfFullRow and hfSanitizedRow are the column layouts of the Hugging Face
// "mbpp" dataset's two configs, as pyarrow writes them (nullable columns,
// int32 task ids, LIST<string> test columns).
type hfFullRow struct {
	TaskID            int32    `parquet:"task_id,optional"`
	Text              string   `parquet:"text,optional"`
	Code              string   `parquet:"code,optional"`
	TestList          []string `parquet:"test_list,list"`
	TestSetupCode     string   `parquet:"test_setup_code,optional"`
	ChallengeTestList []string `parquet:"challenge_test_list,list"`
}

type hfSanitizedRow struct {
	SourceFile  string   `parquet:"source_file,optional"`
	TaskID      int32    `parquet:"task_id,optional"`
	Prompt      string   `parquet:"prompt,optional"`
	Code        string   `parquet:"code,optional"`
	TestImports []string `parquet:"test_imports,list"`
	TestList    []string `parquet:"test_list,list"`
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ids(ps []Problem) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.TaskID
	}
	return out
}

func jsonlOf(t *testing.T, ids ...int) string {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		rec, _ := json.Marshal(map[string]any{
			"task_id": id, "text": "task " + string(rune('a'+id%26)), "code": "def f():\n    return 1\n",
			"test_list": []string{"assert f() == 1"}, "test_setup_code": "", "challenge_test_list": []string{},
		})
		b.Write(rec)
		b.WriteString("\n")
	}
	return b.String()
}

func TestParseFormats(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "full.jsonl"),
		`{"task_id": 11, "text": "Remove first and last.", "code": "def r(s): return s", "test_list": ["assert r('a') == 'a'"], "test_setup_code": "import math", "challenge_test_list": ["assert r('') == ''"]}`+"\n\n"+
			`{"task_id": "12", "text": "Second.", "code": "", "test_list": ["assert 1"], "test_setup_code": "", "challenge_test_list": []}`+"\n")
	writeFile(t, filepath.Join(dir, "sanitized.json"),
		`[{"source_file": "x.py", "task_id": 2, "prompt": "Write f.", "code": "def f(): return 1", "test_imports": ["import math"], "test_list": ["assert f() == 1"]}]`)
	writeFile(t, filepath.Join(dir, "lines.json"), jsonlOf(t, 5, 6))
	if err := parquet.WriteFile(filepath.Join(dir, "full.parquet"), []hfFullRow{
		{TaskID: 601, Text: "Parquet full.", Code: "def g(): return 2", TestList: []string{"assert g() == 2", "assert g() != 3"}, ChallengeTestList: []string{"assert g() > 1"}},
		{TaskID: 602, Text: "Second row.", TestList: []string{"assert True"}, TestSetupCode: "x = 1"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := parquet.WriteFile(filepath.Join(dir, "sanitized.parquet"), []hfSanitizedRow{
		{SourceFile: "s.py", TaskID: 7, Prompt: "Parquet sanitized.", Code: "def h(): return 3", TestImports: []string{"import re"}, TestList: []string{"assert h() == 3"}},
	}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		file, format string
		want         []Problem
	}{
		{"full.jsonl", FormatAuto, []Problem{
			{TaskID: 11, Text: "Remove first and last.", Code: "def r(s): return s", TestList: []string{"assert r('a') == 'a'"}, TestSetupCode: "import math", ChallengeTestList: []string{"assert r('') == ''"}},
			{TaskID: 12, Text: "Second.", TestList: []string{"assert 1"}, ChallengeTestList: []string{}},
		}},
		{"sanitized.json", FormatAuto, []Problem{{TaskID: 2, Text: "Write f.", Code: "def f(): return 1", TestList: []string{"assert f() == 1"}, TestImports: []string{"import math"}}}},
		{"lines.json", FormatJSON, nil}, // JSONL in a .json file
		{"full.parquet", FormatAuto, []Problem{
			{TaskID: 601, Text: "Parquet full.", Code: "def g(): return 2", TestList: []string{"assert g() == 2", "assert g() != 3"}, ChallengeTestList: []string{"assert g() > 1"}},
			{TaskID: 602, Text: "Second row.", TestList: []string{"assert True"}, TestSetupCode: "x = 1"},
		}},
		{"sanitized.parquet", FormatParquet, []Problem{{TaskID: 7, Text: "Parquet sanitized.", Code: "def h(): return 3", TestList: []string{"assert h() == 3"}, TestImports: []string{"import re"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			got, err := loadFile(filepath.Join(dir, tc.file), tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if !slices.Equal(ids(got), []int{5, 6}) {
					t.Fatalf("got ids %v", ids(got))
				}
				return
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if string(gj) != string(wj) {
				t.Fatalf("got  %s\nwant %s", gj, wj)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"bad json", "{\"task_id\": 1,", "line 1"},
		{"no id", `{"text": "x", "test_list": ["assert 1"]}`, "task_id is missing"},
		{"id not int", `{"task_id": "abc", "text": "x", "test_list": ["assert 1"]}`, "not an integer"},
		{"no text", `{"task_id": 1, "test_list": ["assert 1"]}`, "text (or prompt) is empty"},
		{"no tests", `{"task_id": 1, "text": "x", "test_list": []}`, "test_list is empty"},
		{"blank test", `{"task_id": 1, "text": "x", "test_list": [" "]}`, "test_list[0] is empty"},
		{"second line", jsonlOf(t, 1) + `{"task_id": 2}`, "line 2"},
		{"file outside the workspace", `{"task_id": 1, "text": "x", "test_list": ["assert 1"], "files": {"../etc/x": "y"}}`, `files: "../etc/x" is not a path inside the workspace`},
		{"absolute file", `{"task_id": 1, "text": "x", "test_list": ["assert 1"], "files": {"/etc/x": "y"}}`, `files: "/etc/x"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJSONL(strings.NewReader(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := ParseJSONArray([]byte(`[{"task_id": 1, "prompt": "x", "test_list": ["assert 1"]}, {"task_id": 2}]`)); err == nil || !strings.Contains(err.Error(), "element 1") {
		t.Fatalf("array error %v", err)
	}
}

func TestLoadDatasetSplitsLimitShuffle(t *testing.T) {
	dir := t.TempDir()
	// The original JSONL: one file, splits by MBPP's task_id ranges.
	orig := filepath.Join(dir, "mbpp.jsonl")
	writeFile(t, orig, jsonlOf(t, 1, 10, 11, 510, 511, 600, 601, 974))
	// Hugging Face layout: one file per split.
	hf := filepath.Join(dir, "full")
	for split, id := range map[string]int32{"train": 700, "test": 20, "validation": 550, "prompt": 3} {
		if err := os.MkdirAll(hf, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := parquet.WriteFile(filepath.Join(hf, split+"-00000-of-00001.parquet"), []hfFullRow{
			{TaskID: id, Text: "t", TestList: []string{"assert 1"}}, {TaskID: id + 1, Text: "u", TestList: []string{"assert 1"}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(hf, "README.md"), "not data")
	cases := []struct {
		name string
		o    DatasetOptions
		want []int
	}{
		{"all", DatasetOptions{Path: orig}, []int{1, 10, 11, 510, 511, 600, 601, 974}},
		{"explicit all", DatasetOptions{Path: orig, Split: "all"}, []int{1, 10, 11, 510, 511, 600, 601, 974}},
		{"test range", DatasetOptions{Path: orig, Split: "test"}, []int{11, 510}},
		{"train range", DatasetOptions{Path: orig, Split: "train"}, []int{601, 974}},
		{"validation range", DatasetOptions{Path: orig, Split: "validation"}, []int{511, 600}},
		{"prompt range", DatasetOptions{Path: orig, Split: "Prompt"}, []int{1, 10}},
		{"limit", DatasetOptions{Path: orig, Limit: 3}, []int{1, 10, 11}},
		{"hf dir split", DatasetOptions{Path: hf, Split: "train"}, []int{700, 701}},
		{"hf dir all", DatasetOptions{Path: hf}, []int{3, 4, 20, 21, 550, 551, 700, 701}},
		{"hf file", DatasetOptions{Path: filepath.Join(hf, "validation-00000-of-00001.parquet")}, []int{550, 551}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadDataset(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tc.want) {
				t.Fatalf("got %v, want %v", ids(got), tc.want)
			}
		})
	}

	t.Run("shuffle is seeded and a permutation", func(t *testing.T) {
		a, err := LoadDataset(DatasetOptions{Path: orig, Shuffle: true, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := LoadDataset(DatasetOptions{Path: orig, Shuffle: true, Seed: 7})
		c, _ := LoadDataset(DatasetOptions{Path: orig, Shuffle: true, Seed: 8})
		if !slices.Equal(ids(a), ids(b)) {
			t.Fatalf("same seed, different orders: %v %v", ids(a), ids(b))
		}
		if slices.Equal(ids(a), ids(c)) {
			t.Fatalf("seeds 7 and 8 gave the same order %v", ids(a))
		}
		sorted := slices.Sorted(slices.Values(ids(a)))
		if !slices.Equal(sorted, []int{1, 10, 11, 510, 511, 600, 601, 974}) {
			t.Fatalf("shuffle is not a permutation: %v", ids(a))
		}
		lim, _ := LoadDataset(DatasetOptions{Path: orig, Shuffle: true, Seed: 7, Limit: 2})
		if !slices.Equal(ids(lim), ids(a)[:2]) {
			t.Fatalf("limit after shuffle: %v vs %v", ids(lim), ids(a))
		}
	})

	errCases := []struct {
		name string
		o    DatasetOptions
		want string
	}{
		{"unknown split", DatasetOptions{Path: orig, Split: "dev"}, "unknown split"},
		{"empty split", DatasetOptions{Path: filepath.Join(hf, "train-00000-of-00001.parquet"), Split: "test"}, "no problems"},
		{"missing", DatasetOptions{Path: filepath.Join(dir, "nope.jsonl")}, "no such file"},
		{"dir without split files", DatasetOptions{Path: dir, Split: "train"}, "no data files"},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadDataset(tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("duplicate ids", func(t *testing.T) {
		p := filepath.Join(dir, "dup.jsonl")
		writeFile(t, p, jsonlOf(t, 3, 4, 3))
		if _, err := LoadDataset(DatasetOptions{Path: p}); err == nil || !strings.Contains(err.Error(), "appears twice") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestSampleDataset(t *testing.T) {
	ps, err := LoadDataset(DatasetOptions{Path: "../../examples/mbpp/sample.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) < 20 {
		t.Fatalf("%d sample problems, want at least 20", len(ps))
	}
	for _, p := range ps {
		if p.Code == "" {
			t.Errorf("task %d has no reference code", p.TaskID)
		}
	}
}

// Fuzz targets: the parsers must never panic, and what they accept must be
// a valid problem that survives a JSON round trip.

func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"task_id": 11, "text": "x", "code": "c", "test_list": ["assert 1"], "test_setup_code": "", "challenge_test_list": []}`))
	f.Add([]byte(`{"task_id": "3", "prompt": "p", "test_imports": ["import math"], "test_list": ["assert 1"]}`))
	f.Add([]byte(`{"task_id": 1e3, "text": "x", "test_list": ["a"]}`))
	f.Add([]byte(`{"task_id": null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseRecord(data)
		if err != nil {
			return
		}
		if p.validate() != nil {
			t.Fatalf("accepted an invalid problem: %+v", p)
		}
		rt, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParseRecord(rt)
		if err != nil || q.TaskID != p.TaskID || q.Text != p.Text || !slices.Equal(q.TestList, p.TestList) {
			t.Fatalf("round trip: %v %+v vs %+v", err, q, p)
		}
	})
}

func FuzzParseJSONL(f *testing.F) {
	f.Add([]byte(`{"task_id": 1, "text": "x", "test_list": ["assert 1"]}` + "\n\n" + `{"task_id": 2, "prompt": "y", "test_list": ["assert 2"]}`))
	f.Add([]byte("\n\n"))
	f.Add([]byte("{\"task_id\": 1,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParseJSONL(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		for _, p := range ps {
			if p.validate() != nil {
				t.Fatalf("accepted an invalid problem: %+v", p)
			}
		}
	})
}

func FuzzParseJSONArray(f *testing.F) {
	f.Add([]byte(`[{"task_id": 1, "prompt": "x", "test_list": ["assert 1"]}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[null]`))
	f.Add([]byte(`{"task_id": 1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParseJSONArray(data)
		if err != nil {
			return
		}
		for _, p := range ps {
			if p.validate() != nil {
				t.Fatalf("accepted an invalid problem: %+v", p)
			}
		}
	})
}
