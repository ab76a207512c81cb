package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"time"
)

// torchRef runs torch_qwen2.py, the PyTorch yardstick: the same Qwen2
// shapes written by hand in PyTorch (with OpenBLAS underneath), on all
// cores. A zero value (no python) runs nothing.
type torchRef struct {
	python, script string
	minTime        time.Duration
}

// torchResult is one JSON line the script prints.
type torchResult struct {
	What    string  `json:"what"`
	TokS    float64 `json:"tok_s"`
	StepS   float64 `json:"step_s"`
	AdamWS  float64 `json:"adamw_s"`
	GFLOPS  float64 `json:"gflops"`
	Threads int     `json:"threads"`
}

func (t torchRef) enabled() bool { return t.python != "" }

// run runs the script with args and returns its one result line.
func (t torchRef) run(ctx context.Context, args ...string) (torchResult, error) {
	args = append([]string{t.script, "--min-time", strconv.FormatFloat(t.minTime.Seconds(), 'f', 1, 64)}, args...)
	cmd := exec.CommandContext(ctx, t.python, args...)
	// All cores, and OpenMP threads that sleep rather than spin while
	// they wait: on a shared, loaded machine spinning threads burn their
	// time slices waiting for descheduled partners (torch.mm measured 19
	// GFLOP/s spinning against 137 passive, minutes apart).
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+strconv.Itoa(runtime.NumCPU()))
	if os.Getenv("OMP_WAIT_POLICY") == "" {
		cmd.Env = append(cmd.Env, "OMP_WAIT_POLICY=PASSIVE")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return torchResult{}, fmt.Errorf("pytorch yardstick %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r torchResult
		if err := json.Unmarshal(sc.Bytes(), &r); err == nil && r.What != "" {
			return r, nil
		}
	}
	return torchResult{}, fmt.Errorf("pytorch yardstick %v printed no result: %q", args, out)
}

func (t torchRef) sgemm(n int) (torchResult, error) {
	return t.run(context.Background(), "--sgemm", strconv.Itoa(n))
}

func (t torchRef) train(preset string, B, T int, adam bool) (torchResult, error) {
	args := []string{"--train", preset, "--batch", strconv.Itoa(B), "--seq", strconv.Itoa(T)}
	if adam {
		args = append(args, "--adam")
	}
	return t.run(context.Background(), args...)
}

func (t torchRef) decode(preset string, B, tokens int) (torchResult, error) {
	return t.run(context.Background(), "--decode", preset, "--batch", strconv.Itoa(B), "--tokens", strconv.Itoa(tokens))
}

// times formats a/b as "1.7×".
func times(a, b float64) string { return fmt.Sprintf("%.2f×", a/b) }
