// Package scripts holds the build's helper scripts; this test checks the
// one that writes BENCHMARKS.md.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchDir is a copy of bench.sh with fake section scripts, in a directory
// of its own with a Makefile whose build does nothing.
func benchDir(t *testing.T, sections map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scripts", "bench.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh, err := os.ReadFile("bench.sh")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"scripts/bench.sh": string(sh), "Makefile": "build:\n\t@true\n"}
	for name, body := range sections {
		files["scripts/bench.d/"+name] = body
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func bench(t *testing.T, dir, only string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "scripts/bench.sh")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "BENCH_ONLY="+only), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), err
	}
	b, rerr := os.ReadFile(filepath.Join(dir, "BENCHMARKS.md"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	return string(b), nil
}

// Each section files its summary rows with summary_row, from the figures
// its benchmark printed; a section re-run alone replaces its own rows and
// section, and keeps the others, in section order.
func TestBenchSummaryRows(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	dir := benchDir(t, map[string]string{
		"10-alpha.sh": `run_block "Alpha: widgets" "How long a widget takes." sh -c 'echo "| widget | ${ALPHA:-5} ms | bare: 10 ms | 0.50x |"'
summary_row "widget time" "$(cell widget 2)" "$(cell widget 3)" "$(cell widget 4)"
`,
		"20-beta.sh": `run_block "Beta: gadgets" "Gadgets per second." sh -c 'echo "BenchmarkGadget-2 	 30	 2000000 ns/op"; echo "BenchmarkBare-2 	 30	 1000000 ns/op"'
g=$(bench_value BenchmarkGadget ns/op) b=$(bench_value BenchmarkBare ns/op)
summary_row "one gadget" "$(ms_of "$g")" "bare: $(ms_of "$b")" "$(ratio "$g" "$b")"
`,
		"30-empty.sh": `run_block "Gamma: nothing" "Prints no figure." true
summary_row "nothing" "$(cell nothing 2)" "-" "-"
`,
	})
	const (
		alphaRow = "| [Alpha: widgets](#alpha-widgets) | widget time | 5 ms | bare: 10 ms | 0.50x |"
		betaRow  = "| [Beta: gadgets](#beta-gadgets) | one gadget | 2.0 ms | bare: 1.0 ms | 2.00x |"
	)
	got, err := bench(t, dir, "alpha")
	if err != nil {
		t.Fatalf("bench alpha: %v\n%s", err, got)
	}
	if !strings.Contains(got, "## Summary\n\n| section |") || !strings.Contains(got, alphaRow) || !strings.Contains(got, "## Alpha: widgets") {
		t.Fatalf("first run:\n%s", got)
	}
	if got, err = bench(t, dir, "beta"); err != nil {
		t.Fatalf("bench beta: %v\n%s", err, got)
	}
	if !strings.Contains(got, alphaRow+"\n"+betaRow+"\n") || !strings.Contains(got, "## Beta: gadgets") {
		t.Fatalf("after beta, want both rows in section order:\n%s", got)
	}
	// Alpha again, with another figure: its row is replaced in place.
	if got, err = bench(t, dir, "alpha", "ALPHA=7"); err != nil {
		t.Fatalf("bench alpha again: %v\n%s", err, got)
	}
	newAlpha := strings.Replace(alphaRow, "| 5 ms |", "| 7 ms |", 1)
	if !strings.Contains(got, newAlpha+"\n"+betaRow+"\n") || strings.Contains(got, alphaRow) || strings.Count(got, "## Alpha: widgets") != 1 {
		t.Fatalf("after alpha again:\n%s", got)
	}
	// A row without a figure stops the run, naming it.
	if out, err := bench(t, dir, "empty"); err == nil || !strings.Contains(out, `summary row "nothing" of "Gamma: nothing" has no figure`) {
		t.Fatalf("a row without figures: %v\n%s", err, out)
	}
}

// The summary of the BENCHMARKS.md in the repository links every row to a
// section of the file.
func TestBenchmarksSummaryLinks(t *testing.T) {
	b, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	_, summary, ok := strings.Cut(text, "## Summary\n")
	summary, _, _ = strings.Cut(summary, "\n## ")
	if !ok || !strings.Contains(summary, "| section |") {
		t.Fatal("BENCHMARKS.md has no summary table")
	}
	rows := 0
	for _, l := range strings.Split(summary, "\n") {
		if !strings.HasPrefix(l, "| [") {
			continue
		}
		rows++
		title := strings.TrimPrefix(l, "| [")
		title, _, _ = strings.Cut(title, "](#")
		if !strings.Contains(text, "\n## "+title+"\n") {
			t.Errorf("summary row for %q has no section", title)
		}
	}
	if rows == 0 {
		t.Error("the summary has no rows")
	}
}
