package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a byte size: a plain integer, or a number with a unit
// (KiB, MiB, GiB, TiB in powers of two; KB, MB, GB, TB in powers of ten).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty size")
	}
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
	}
	mult := 1.0
	num := s
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			mult = u.mult
			num = strings.TrimSpace(strings.TrimSuffix(s, u.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid size %q: want a number with an optional unit such as 512MiB or 1GB", s)
	}
	v := f * mult
	if v > 1<<62 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}
