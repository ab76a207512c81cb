// Command cuda-bench is the Go side of scripts/cuda/gpu-check.sh. It
// measures training fwd+bwd tokens/s of the trainer's model on a device
// ("train"), and writes a model's logits for given token ids so they can be
// compared with transformers' ("logits"). Results are one JSON object on
// stdout.
//
// It checks no results itself: gpu-check.sh compares them with PyTorch's.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/device"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cuda-bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cuda-bench", flag.ContinueOnError)
	mode := fs.String("mode", "train", "train (fwd+bwd tokens/s) or logits (write logits of -ids)")
	dev := fs.String("device", "cuda", "auto, cpu or cuda")
	prec := fs.String("precision", "fp32", "fp32 or bf16 (BF16 matmuls with FP32 accumulation; cuda only)")
	flash := fs.Bool("flash", false, "flash-style attention (row log-sum-exps, no T×T probabilities; cuda only)")
	preset := fs.String("preset", "qwen2.5-0.5b", "model shape for -mode train")
	batch := fs.Int("batch", 4, "sequences per step")
	seq := fs.Int("seq", 512, "tokens per sequence")
	steps := fs.Int("steps", 10, "timed steps (after 2 warm-up steps)")
	peak := fs.Float64("peak-tflops", 0, "device peak TFLOPS at this precision, for MFU (0: not reported)")
	dir := fs.String("dir", "", "Hugging Face model directory for -mode logits")
	ids := fs.String("ids", "", "comma-separated token ids for -mode logits (one sequence)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	be, why, err := device.OpenPrecision(*dev, *prec)
	if err != nil {
		return err
	}
	defer be.Close()
	if *flash {
		g, ok := be.(interface{ SetFlashAttention(bool) })
		if !ok {
			return fmt.Errorf("-flash needs the cuda device, and %s was chosen", why)
		}
		g.SetFlashAttention(true)
		why += ", flash attention"
	}
	fmt.Fprintln(os.Stderr, "device:", why)
	var out any
	switch *mode {
	case "train":
		out, err = train(be, *preset, *batch, *seq, *steps, *peak)
	case "logits":
		out, err = logits(be, *dir, *ids)
	default:
		err = fmt.Errorf("unknown -mode %q", *mode)
	}
	if err != nil {
		return err
	}
	if err := be.Sync(); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(out)
}

type trainResult struct {
	Device       string  `json:"device"`
	Flash        bool    `json:"flash,omitempty"`
	Preset       string  `json:"preset"`
	Batch        int     `json:"batch"`
	Seq          int     `json:"seq"`
	StepMS       float64 `json:"step_ms"`
	TokensPerSec float64 `json:"tokens_per_s"`
	TFLOPS       float64 `json:"tflops"`
	MFU          float64 `json:"mfu,omitempty"`
	PeakBytes    int64   `json:"peak_bytes,omitempty"`
}

func train(be compute.Device, preset string, B, T, steps int, peak float64) (*trainResult, error) {
	cfg, err := hfconfig.Preset(preset)
	if err != nil {
		return nil, err
	}
	m, err := model.New(be, cfg)
	if err != nil {
		return nil, err
	}
	m.Init(1, 0.02)
	m.AllocGrads()
	run, err := m.NewRun(B, T)
	if err != nil {
		return nil, err
	}
	N := B * T
	ids, targets := make([]int32, N), make([]int32, N)
	lens := make([]int, B)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % cfg.VocabSize)
	}
	for i := range targets {
		targets[i] = -1
		if (i+1)%T != 0 {
			targets[i] = ids[i+1]
		}
	}
	for b := range lens {
		lens[b] = T
	}
	logp, dlogp := make([]float32, N), make([]float32, N)
	for i := range dlogp {
		dlogp[i] = -1 / float32(N)
	}
	step := func() error {
		if err := run.Forward(ids, lens); err != nil {
			return err
		}
		if err := run.LogProbs(targets, 1, logp); err != nil {
			return err
		}
		m.ZeroGrads()
		if err := run.Backward(dlogp); err != nil {
			return err
		}
		return be.Sync()
	}
	for range 2 {
		if err := step(); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	for range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	el := time.Since(t0).Seconds() / float64(steps)
	lse, _ := be.(compute.LSEAttention)
	r := &trainResult{Device: be.Name(), Flash: lse != nil && lse.LSEAttention(), Preset: preset, Batch: B, Seq: T, StepMS: el * 1e3, TokensPerSec: float64(N) / el}
	r.TFLOPS = 3 * m.FlopsPerToken(T) * r.TokensPerSec / 1e12
	if peak > 0 {
		r.MFU = r.TFLOPS / peak
	}
	if p, ok := be.(interface{ PeakBytes() int64 }); ok {
		r.PeakBytes = p.PeakBytes()
	}
	return r, nil
}

type logitsResult struct {
	Device string    `json:"device"`
	Vocab  int       `json:"vocab"`
	Logits []float32 `json:"logits"` // [len(ids), vocab]
}

func logits(be compute.Device, dir, idList string) (*logitsResult, error) {
	if dir == "" || idList == "" {
		return nil, errors.New("-mode logits needs -dir and -ids")
	}
	var ids []int32
	for _, f := range strings.Split(idList, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-ids: %w", err)
		}
		ids = append(ids, int32(v))
	}
	m, err := model.Load(be, dir)
	if err != nil {
		return nil, err
	}
	run, err := m.NewRun(1, len(ids))
	if err != nil {
		return nil, err
	}
	if err := run.Forward(ids, []int{len(ids)}); err != nil {
		return nil, err
	}
	out := make([]float32, len(ids)*m.Cfg.VocabSize)
	be.Download(out, run.Logits())
	return &logitsResult{Device: be.Name(), Vocab: m.Cfg.VocabSize, Logits: out}, nil
}
