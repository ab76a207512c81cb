// Package device picks the compute device the trainer runs on from the
// user's setting: "cpu", "cuda" or "auto" (CUDA when this binary has it
// and a GPU answers, else the CPU). It reports what it chose and why, so
// the host can log it.
//
// It does not configure the backends beyond opening them; the model and
// the trainer take the compute.Device it returns.
package device

import (
	"errors"
	"fmt"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/compute/cpu"
	"github.com/rlhost/rlhost/trainer/compute/cuda"
)

// CUDABuilt reports whether this binary has the CUDA backend (make
// build-cuda): a setting that needs it can be refused before any device
// is opened.
func CUDABuilt() bool { return cuda.Built }

// Names are the accepted settings.
var Names = []string{"auto", "cpu", "cuda"}

// Precisions are the accepted precision settings: "fp32" everywhere, and
// "bf16" (BF16 matmul operands with FP32 accumulation and FP32 master
// weights) on CUDA only.
var Precisions = []string{"fp32", "bf16"}

// OpenPrecision is Open with a precision. "bf16" needs the CUDA device:
// with "cpu", or with "auto" when CUDA is unavailable, it is an error
// saying so rather than a silent FP32 run. "" means "fp32".
func OpenPrecision(name, precision string) (compute.Device, string, error) {
	switch precision {
	case "", "fp32":
		return Open(name)
	case "bf16":
	default:
		return nil, "", fmt.Errorf("unknown precision %q (want fp32 or bf16)", precision)
	}
	if name == "cpu" {
		return nil, "", fmt.Errorf("precision \"bf16\" needs device \"cuda\": the CPU backend computes in fp32")
	}
	be, why, err := Open(name)
	if err != nil {
		return nil, "", err
	}
	g, ok := be.(*cuda.Device)
	if !ok {
		be.Close()
		return nil, "", fmt.Errorf("precision \"bf16\" needs a CUDA device, and device %q chose %s", name, why)
	}
	if err := g.SetPrecision("bf16"); err != nil {
		g.Close()
		return nil, "", err
	}
	return g, why + ", bf16 mixed precision", nil
}

// Open returns the backend for name and a sentence saying which device
// was chosen and why. "" means "auto".
func Open(name string) (compute.Device, string, error) {
	switch name {
	case "cpu":
		b, err := cpu.New(cpu.Options{})
		if err != nil {
			return nil, "", fmt.Errorf("device cpu: %w", err)
		}
		return b, fmt.Sprintf("cpu (%s, %d workers): requested", b.Name(), b.Workers()), nil
	case "cuda":
		b, err := cuda.Open(0)
		if err != nil {
			return nil, "", fmt.Errorf("device \"cuda\": %w", err)
		}
		return b, fmt.Sprintf("cuda (%s on %s): requested", b.Name(), b.DeviceName()), nil
	case "", "auto":
		if !cuda.Built {
			b, err := cpu.New(cpu.Options{})
			if err != nil {
				return nil, "", fmt.Errorf("device auto: %w", err)
			}
			return b, fmt.Sprintf("cpu (%s, %d workers): auto, and this binary has no CUDA support", b.Name(), b.Workers()), nil
		}
		g, gerr := cuda.Open(0)
		if gerr == nil {
			return g, fmt.Sprintf("cuda (%s on %s): auto, GPU 0 answered", g.Name(), g.DeviceName()), nil
		}
		b, err := cpu.New(cpu.Options{})
		if err != nil {
			return nil, "", fmt.Errorf("device auto: %w", errors.Join(gerr, err))
		}
		return b, fmt.Sprintf("cpu (%s, %d workers): auto, CUDA unavailable: %v", b.Name(), b.Workers(), gerr), nil
	default:
		return nil, "", fmt.Errorf("unknown device %q (want auto, cpu or cuda)", name)
	}
}
