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
	"sort"
	"strconv"
	"strings"
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

// median returns the median of xs (the mean of the middle two for an even
// count); xs is sorted in place.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// trainVsTorch alternates rounds of: rlhost's all-core sgemm, rlhost's
// fwd+bwd (and AdamW), the same in PyTorch, and OpenBLAS's all-core sgemm.
// Each ratio is taken within a round, so that both sides of it saw the same
// minutes of machine load, and the medians over rounds are reported.
func trainVsTorch(o opts, preset string, B int, adam bool, kind string, emit func(row)) error {
	var tok, stepS, gfl, pTok, pStep, ratio, own, blas, ofBlas, adamS, pAdam, adamRatio []float64
	params, rss := 0, int64(0)
	for range o.rounds {
		g, err := sgemm(kind, runtime.GOMAXPROCS(0), o.gemmN)
		if err != nil {
			return err
		}
		res, err := step(preset, B, o.seq, adam, o.minTime)
		if err != nil {
			return err
		}
		pt, err := o.torch.train(preset, B, o.seq, adam)
		if err != nil {
			return err
		}
		bl, err := o.torch.sgemm(o.gemmN)
		if err != nil {
			return err
		}
		if params == 0 {
			// Later rounds allocate a fresh model while the GC may still
			// hold the last one: only the first round's peak is the step's.
			rss = vmHWM()
		}
		params = res.params
		tok, stepS, gfl = append(tok, res.tokS), append(stepS, res.stepS), append(gfl, res.gflops)
		pTok, pStep, ratio = append(pTok, pt.TokS), append(pStep, pt.StepS), append(ratio, res.tokS/pt.TokS)
		own, blas, ofBlas = append(own, g), append(blas, bl.GFLOPS), append(ofBlas, res.gflops/bl.GFLOPS)
		if adam {
			adamS, pAdam, adamRatio = append(adamS, res.adamS), append(pAdam, pt.AdamWS), append(adamRatio, pt.AdamWS/res.adamS)
		}
	}
	n := o.rounds
	emit(row{fmt.Sprintf("%s fwd+bwd, B=%d T=%d (median of %d rounds)", preset, B, o.seq, n),
		fmt.Sprintf("%.0f tok/s, %.2f s/step, %s", median(tok), median(stepS), gf(median(gfl))),
		fmt.Sprintf("PyTorch %.0f tok/s, %.2f s/step", median(pTok), median(pStep)),
		fmt.Sprintf("%.2f× PyTorch (per round: %s)", median(append([]float64(nil), ratio...)), list(ratio, "%.2f"))})
	emit(row{fmt.Sprintf("%s fwd+bwd against sgemm (median of %d rounds)", preset, n), gf(median(gfl)),
		fmt.Sprintf("%s OpenBLAS all-core sgemm %d³ right after (per round: %s); rlhost's own sgemm right before %s", gf(median(append([]float64(nil), blas...))), o.gemmN, list(blas, "%.0f"), gf(median(own))),
		fmt.Sprintf("%.0f%% of OpenBLAS (per round: %s)", 100*median(append([]float64(nil), ofBlas...)), list(ofBlas, "%.2f"))})
	if adam {
		emit(row{fmt.Sprintf("%s AdamW update (%d params, median of %d rounds)", preset, params, n), fmt.Sprintf("%.3f s", median(adamS)),
			fmt.Sprintf("PyTorch %.3f s (torch.optim.AdamW)", median(pAdam)),
			fmt.Sprintf("%.2f× faster (per round: %s)", median(append([]float64(nil), adamRatio...)), list(adamRatio, "%.2f"))})
	}
	emit(row{fmt.Sprintf("%s peak RSS after the first round's step", preset), mib(rss), fmt.Sprintf("%s params f32", mib(int64(params)*4)), "-"})
	return nil
}

// decodeVsTorch alternates rounds of rlhost's trainer/generate, the
// PyTorch KV-cache decode of the same shape, and rlhost's all-core sgemm
// (the floor's yardstick) right before and after rlhost's run, reporting
// medians: against PyTorch, and against the sgemm-bound floor, the rate at
// which the run's linear-layer work would finish at the better of the two
// sgemm figures (on a shared machine, the more favourable yardstick).
func decodeVsTorch(o opts, preset string, B int, kind string, emit func(row)) error {
	var tok, pTok, ratio, floor, ofFloor []float64
	for range o.rounds {
		before, err := sgemm(kind, runtime.GOMAXPROCS(0), o.gemmN)
		if err != nil {
			return err
		}
		t, gflopTok, err := gen(preset, B, o.genTokens)
		if err != nil {
			return err
		}
		after, err := sgemm(kind, runtime.GOMAXPROCS(0), o.gemmN)
		if err != nil {
			return err
		}
		pt, err := o.torch.decode(preset, B, o.genTokens)
		if err != nil {
			return err
		}
		f := max(before, after) / gflopTok
		tok, pTok, ratio = append(tok, t), append(pTok, pt.TokS), append(ratio, t/pt.TokS)
		floor, ofFloor = append(floor, f), append(ofFloor, t/f)
	}
	name := fmt.Sprintf("%s generate, KV cache, batch %d, %d+%d tokens", preset, B, genPrompt, o.genTokens)
	emit(row{fmt.Sprintf("%s (median of %d rounds)", name, o.rounds),
		fmt.Sprintf("%.1f tok/s", median(tok)), fmt.Sprintf("PyTorch KV-cache decode %.1f tok/s", median(pTok)),
		fmt.Sprintf("%.2f× PyTorch (per round: %s)", median(append([]float64(nil), ratio...)), list(ratio, "%.2f"))})
	emit(row{fmt.Sprintf("%s against the sgemm-bound floor", name),
		fmt.Sprintf("%.1f tok/s", median(append([]float64(nil), tok...))),
		fmt.Sprintf("floor %.1f tok/s: the better of rlhost's all-core sgemm %d³ right before and right after each round (per round: %s tok/s)", median(append([]float64(nil), floor...)), o.gemmN, list(floor, "%.0f")),
		fmt.Sprintf("%.0f%% of the floor (per round: %s)", 100*median(append([]float64(nil), ofFloor...)), list(ofFloor, "%.2f"))})
	return nil
}

// list formats xs in their original order.
func list(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}
