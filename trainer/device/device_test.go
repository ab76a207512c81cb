package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/trainer/compute/cuda"
)

func TestOpen(t *testing.T) {
	cases := []struct {
		name    string
		setting string
		// wantWhy is a fragment of the explanation; wantErr one of the error.
		wantWhy, wantErr string
		needCUDA         bool // case only holds in a build without CUDA
	}{
		{name: "cpu", setting: "cpu", wantWhy: "cpu (cpu-f32"},
		{name: "auto without CUDA", setting: "auto", wantWhy: "no CUDA support", needCUDA: true},
		{name: "empty is auto", setting: "", wantWhy: "cpu (", needCUDA: true},
		{name: "cuda without CUDA", setting: "cuda", wantErr: "built without CUDA support", needCUDA: true},
		{name: "unknown", setting: "tpu", wantErr: `unknown device "tpu"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.needCUDA && cuda.Built {
				t.Skip("this case describes a build without the cuda tag")
			}
			b, why, err := Open(c.setting)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Open(%q) error = %v, want it to contain %q", c.setting, err, c.wantErr)
				}
				if c.setting == "cuda" && !errors.Is(err, cuda.ErrNotBuilt) {
					t.Fatalf("Open(cuda) error %v does not wrap ErrNotBuilt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", c.setting, err)
			}
			defer b.Close()
			if !strings.Contains(why, c.wantWhy) {
				t.Fatalf("Open(%q) says %q, want it to contain %q", c.setting, why, c.wantWhy)
			}
			if err := b.Sync(); err != nil {
				t.Fatalf("Sync: %v", err)
			}
		})
	}
}

func TestOpenPrecision(t *testing.T) {
	cases := []struct {
		name, setting, precision string
		wantWhy, wantErr         string
		needCUDA                 bool // case only holds in a build without CUDA
	}{
		{name: "cpu fp32", setting: "cpu", precision: "fp32", wantWhy: "cpu (cpu-f32"},
		{name: "empty is fp32", setting: "cpu", precision: "", wantWhy: "cpu (cpu-f32"},
		{name: "cpu bf16", setting: "cpu", precision: "bf16", wantErr: `precision "bf16" needs device "cuda"`},
		{name: "auto bf16 without CUDA", setting: "auto", precision: "bf16", wantErr: `needs a CUDA device, and device "auto" chose cpu`, needCUDA: true},
		{name: "cuda bf16 without CUDA", setting: "cuda", precision: "bf16", wantErr: "built without CUDA support", needCUDA: true},
		{name: "unknown", setting: "cpu", precision: "fp8", wantErr: `unknown precision "fp8"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.needCUDA && cuda.Built {
				t.Skip("this case describes a build without the cuda tag")
			}
			b, why, err := OpenPrecision(c.setting, c.precision)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("OpenPrecision(%q, %q) error = %v, want it to contain %q", c.setting, c.precision, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if !strings.Contains(why, c.wantWhy) {
				t.Fatalf("why = %q, want it to contain %q", why, c.wantWhy)
			}
		})
	}
}
