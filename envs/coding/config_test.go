package coding

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// configJSON builds a block's JSON the way the host does: every attribute
// at its schema default, overridden by set, and "task" as a list.
func configJSON(t *testing.T, set map[string]any) []byte {
	t.Helper()
	m := map[string]any{"task": []any{}}
	for _, a := range New().Info().Config.Attributes {
		var v any
		if err := json.Unmarshal(a.Default, &v); err != nil {
			t.Fatalf("default of %s: %v", a.Name, err)
		}
		m[a.Name] = v
	}
	for k, v := range set {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func configure(t *testing.T, dir string, set map[string]any) (*Env, schema.Diagnostics) {
	t.Helper()
	e := New()
	diags := e.Configure(context.Background(), schema.Config{Name: "coding", JSON: configJSON(t, set), BaseDir: dir})
	return e, diags
}

func TestInfoSchemaDefaultsHaveTheirTypes(t *testing.T) {
	info := New().Info()
	if info.Name != "coding" || info.Kind != pluginbase.KindEnv || info.Version == "" {
		t.Fatalf("info = %+v", info)
	}
	check := func(attrs []schema.Attribute) {
		for _, a := range attrs {
			if len(a.Default) == 0 {
				continue
			}
			if _, err := ctyjson.Unmarshal(a.Default, a.Type); err != nil {
				t.Errorf("attribute %s: default %s is not a %s: %v", a.Name, a.Default, a.Type.FriendlyName(), err)
			}
		}
	}
	check(info.Config.Attributes)
	for _, b := range info.Config.Blocks {
		check(b.Spec.Attributes)
	}
	// The schema must survive the wire encoding the plugin protocol uses.
	if _, err := json.Marshal(info.Config); err != nil {
		t.Fatalf("marshal schema: %v", err)
	}
}

func taskIDs(t *testing.T, e *Env) []string {
	t.Helper()
	ts, err := e.Tasks(context.Background())
	if err != nil {
		t.Fatalf("Tasks: %v", err)
	}
	var ids []string
	for _, x := range ts {
		ids = append(ids, x.ID)
		if x.Prompt == "" {
			t.Errorf("task %s has no prompt", x.ID)
		}
	}
	return ids
}

func TestConfigureTasks(t *testing.T) {
	dir := t.TempDir()
	line := `{"id":"abs","prompt":"Write absolute(x).","func_name":"absolute","tests":["-1","2"],"reference":"abs"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	block := map[string]any{"id": "neg", "prompt": "Write neg(x).", "func_name": "neg",
		"banned_patterns": []string{}, "tests": []string{"1"}, "reference": "lambda x: -x"}
	tests := []struct {
		name string
		set  map[string]any
		want string
	}{
		{"default is builtin", nil, "sort_list,max_subarray"},
		{"blocks replace builtin", map[string]any{"task": []any{block}}, "neg"},
		{"builtin plus blocks", map[string]any{"tasks": "builtin", "task": []any{block}}, "sort_list,max_subarray,neg"},
		{"file relative to config dir", map[string]any{"tasks": "t.jsonl"}, "abs"},
		{"file plus blocks", map[string]any{"tasks": "t.jsonl", "task": []any{block}}, "abs,neg"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, diags := configure(t, dir, tc.set)
			if diags.HasErrors() {
				t.Fatalf("Configure: %v", diags.Err())
			}
			if got := strings.Join(taskIDs(t, e), ","); got != tc.want {
				t.Fatalf("tasks = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestConfigureErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.jsonl"), []byte(`{"id":"x","prompt":"p","func_name":"f"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dup := map[string]any{"id": "sort_list", "prompt": "p", "func_name": "f", "banned_patterns": []string{}, "tests": []string{"1"}, "reference": "abs"}
	tests := []struct {
		name     string
		set      map[string]any
		wantPath string
		wantText string
	}{
		{"bad extract", map[string]any{"extract": []string{"fenced", "xml"}}, "extract", "xml"},
		{"bad reward", map[string]any{"reward": "vibes"}, "reward", "vibes"},
		{"bad timeout", map[string]any{"timeout": "soon"}, "timeout", "soon"},
		{"negative timeout", map[string]any{"timeout": "-1s"}, "timeout", "-1s"},
		{"bad on_test_exception", map[string]any{"on_test_exception": "ignore"}, "on_test_exception", "ignore"},
		{"missing file", map[string]any{"tasks": "nope.jsonl"}, "tasks", "nope.jsonl"},
		{"invalid task in file", map[string]any{"tasks": "bad.jsonl"}, "tasks", "no tests"},
		{"empty file", map[string]any{"tasks": "empty.jsonl"}, "tasks", "no tasks"},
		{"duplicate id", map[string]any{"tasks": "builtin", "task": []any{dup}}, "task", "sort_list"},
		{"invalid second task block", map[string]any{"task": []any{
			map[string]any{"id": "a", "prompt": "p", "func_name": "f", "tests": []string{"1"}, "reference": "abs"},
			map[string]any{"id": "b", "prompt": "p", "func_name": "f"},
		}}, "task.1", "no tests"},
		{"unknown attribute", map[string]any{"colour": "red"}, "", "colour"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, diags := configure(t, dir, tc.set)
			if !diags.HasErrors() {
				t.Fatal("Configure accepted the config")
			}
			found := false
			for _, d := range diags {
				if strings.Join(d.Path, ".") == tc.wantPath && strings.Contains(d.Summary+" "+d.Detail, tc.wantText) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no diagnostic at %q mentioning %q in %v", tc.wantPath, tc.wantText, diags.Err())
			}
			if e.byID != nil {
				t.Fatal("a rejected config was applied")
			}
		})
	}
}
