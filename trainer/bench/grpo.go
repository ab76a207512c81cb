package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/grpo"
	"github.com/rlhost/rlhost/trainer/hfconfig"
	"github.com/rlhost/rlhost/trainer/model"
)

// grpoStep times one trainer/grpo Step on a random model of preset: one
// group of two samples of seq tokens (a 32-token prompt, the rest
// trained), micro-batch 1, after a warm-up step. It reports the step
// time split into forward+backward and optimiser, and the process's peak
// RSS against grpo.EstimateMemory. Run it in a fresh process for a clean
// peak.
//
// With lora set it trains a LoRA adapter on the frozen model instead.
func grpoStep(preset string, seq int, lora *grpo.LoRA, emit func(row)) error {
	hf, err := hfconfig.Preset(preset)
	if err != nil {
		return err
	}
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		return err
	}
	defer be.Close()
	m, err := model.New(be, hf)
	if err != nil {
		return err
	}
	m.Init(1, 0.02)
	cfg := grpo.DefaultConfig()
	cfg.MicroBatch, cfg.MaxSeqLen, cfg.LoRA = 1, seq, lora
	tr, err := grpo.New(m, cfg)
	if err != nil {
		return err
	}
	group := make([]grpo.Sample, 2)
	for i := range group {
		s := grpo.Sample{Tokens: make([]int32, seq), Trained: make([]bool, seq), Reward: float64(i)}
		for k := range s.Tokens {
			s.Tokens[k] = int32((k*7919 + i*104729) % hf.VocabSize)
			s.Trained[k] = k >= 32
		}
		group[i] = s
	}
	batch := [][]grpo.Sample{group}
	// The peak is the step's: what building the model left as garbage is
	// returned to the OS and the high-water mark restarts from here.
	debug.FreeOSMemory()
	resetPeakRSS()
	if _, err := tr.Step(context.Background(), batch); err != nil { // warm-up: scratch, page faults
		return err
	}
	cpu0 := cpuTime()
	st, err := tr.Step(context.Background(), batch)
	if err != nil {
		return err
	}
	stepCPU := cpuTime() - cpu0
	if st.Skipped != "" {
		return fmt.Errorf("grpo step skipped: %s", st.Skipped)
	}
	est := grpo.EstimateMemory(hf, cfg)
	tok := float64(2 * seq)
	if lora != nil {
		preset += " " + loraName(lora)
	}
	emit(row{fmt.Sprintf("%s GRPO step, 1 group × 2 samples × %d tokens, micro-batch 1", preset, seq),
		fmt.Sprintf("%.2f s wall (%.0f tok/s), %.1f CPU-s", secs(st.Total), tok/secs(st.Total), stepCPU),
		fmt.Sprintf("%.2f s fwd+bwd, %.2f s AdamW+clip", secs(st.ForwardBackward), secs(st.Optimizer)),
		pct(secs(st.ForwardBackward), secs(st.Total))})
	rss := vmHWM()
	fmt.Fprintf(os.Stderr, "measure: rss %d cpu %.3f wall %.3f\n", rss, stepCPU, secs(st.Total))
	emit(row{fmt.Sprintf("%s GRPO peak RSS", preset), mib(rss), mib(est.Total) + " grpo.EstimateMemory", fmt.Sprintf("%.2fx", float64(rss)/float64(est.Total))})
	// Yardstick, after the peak was read: the same two sequences through a
	// bare model run (forward, log-probs, backward), no GRPO around it.
	r, err := m.NewRun(1, seq)
	if err != nil {
		return err
	}
	ids, tgt, lp, dlp := make([]int32, seq), make([]int32, seq), make([]float32, seq), make([]float32, seq)
	for i := range group {
		copy(ids, group[i].Tokens)
		for k := range tgt {
			tgt[k] = -1
			if k+1 < seq && group[i].Trained[k+1] {
				tgt[k], dlp[k] = ids[k+1], 1/float32(seq)
			}
		}
	}
	start, bareCPU := time.Now(), cpuTime()
	for i := range group {
		copy(ids, group[i].Tokens)
		if err := r.Forward(ids, []int{seq}); err != nil {
			return err
		}
		if err := r.LogProbs(tgt, 1, lp); err != nil {
			return err
		}
		if err := r.Backward(dlp); err != nil {
			return err
		}
	}
	bare, bareCPU := time.Since(start), cpuTime()-bareCPU
	// CPU seconds compare better than wall time on a shared machine.
	emit(row{fmt.Sprintf("%s GRPO step vs bare model, CPU time", preset), fmt.Sprintf("%.1f CPU-s whole step", stepCPU),
		fmt.Sprintf("%.1f CPU-s (%.2f s wall) bare fwd+bwd of the same 2 sequences, same process, after", bareCPU, secs(bare)),
		fmt.Sprintf("%.2fx", stepCPU/bareCPU)})
	return nil
}

// cpuTime is the process's user+system CPU seconds so far: on a shared
// machine it moves less with other load than wall time does.
func cpuTime() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// parseLoRA reads "16:q,v" (rank 16, alpha 32 as the docs' example, on
// q_proj and v_proj) or "16:all".
func parseLoRA(spec string) (*grpo.LoRA, error) {
	r, mods, ok := strings.Cut(spec, ":")
	rank, err := strconv.Atoi(r)
	if !ok || err != nil || rank < 1 {
		return nil, fmt.Errorf("lora spec %q: want RANK:MODULES, e.g. 16:q,v or 16:all", spec)
	}
	l := &grpo.LoRA{AdapterConfig: model.AdapterConfig{Rank: rank, Alpha: float64(2 * rank)}}
	if mods == "all" {
		l.Targets = model.Modules()
		return l, nil
	}
	for _, name := range strings.Split(mods, ",") {
		m, ok := model.ParseModule(name)
		if !ok {
			return nil, fmt.Errorf("lora spec %q: unknown module %q", spec, name)
		}
		l.Targets = append(l.Targets, m)
	}
	return l, nil
}

func loraName(l *grpo.LoRA) string {
	var mods []string
	for _, m := range l.Targets {
		mods = append(mods, strings.TrimSuffix(m.String(), "_proj"))
	}
	return fmt.Sprintf("LoRA r=%d %s", l.Rank, strings.Join(mods, ","))
}

// compareLoRA runs one GRPO step per configuration, full fine-tuning first,
// each in a fresh process of this program (peak RSS only grows within a
// process), and reports each LoRA configuration's peak RSS and CPU time
// against full fine-tuning's from the same run.
func compareLoRA(preset string, seq int, specs []string, emit func(row)) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	type result struct{ rss, cpu, wall float64 }
	measure := func(spec string) (result, error) {
		args := []string{"--grpo", preset, "--seq", strconv.Itoa(seq)}
		if spec != "" {
			args = append(args, "--lora", spec)
		}
		cmd := exec.Command(self, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return result{}, fmt.Errorf("%s %v: %w\n%s", self, args, err, stderr.String())
		}
		os.Stdout.Write(out)
		for _, line := range strings.Split(stderr.String(), "\n") {
			var r result
			if _, err := fmt.Sscanf(line, "measure: rss %g cpu %g wall %g", &r.rss, &r.cpu, &r.wall); err == nil {
				return r, nil
			}
		}
		return result{}, fmt.Errorf("%v printed no measurement:\n%s", args, stderr.String())
	}
	full, err := measure("")
	if err != nil {
		return err
	}
	for _, spec := range specs {
		l, err := parseLoRA(spec)
		if err != nil {
			return err
		}
		r, err := measure(spec)
		if err != nil {
			return err
		}
		emit(row{fmt.Sprintf("%s %s vs full fine-tuning, peak RSS of one GRPO step", preset, loraName(l)),
			mib(int64(r.rss)), mib(int64(full.rss)) + " full fine-tuning, same run", fmt.Sprintf("%.2fx", r.rss/full.rss)})
		emit(row{fmt.Sprintf("%s %s vs full fine-tuning, CPU time of one GRPO step", preset, loraName(l)),
			fmt.Sprintf("%.1f CPU-s (%.1f s wall)", r.cpu, r.wall), fmt.Sprintf("%.1f CPU-s (%.1f s wall) full fine-tuning, same run", full.cpu, full.wall), fmt.Sprintf("%.2fx", r.cpu/full.cpu)})
	}
	return nil
}

// resetPeakRSS restarts VmHWM at the current RSS (Linux's clear_refs "5");
// where that is not possible the peak includes the setup.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}
