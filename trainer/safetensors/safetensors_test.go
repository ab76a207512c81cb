package safetensors

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBF16Conversion(t *testing.T) {
	cases := []struct {
		name string
		f32  uint32 // input bits
		bf16 uint16 // expected RNE result
	}{
		{"one", 0x3f800000, 0x3f80},
		{"exact", 0x40490000, 0x4049},
		{"round down below half", 0x3f807fff, 0x3f80},
		{"tie to even stays even", 0x3f808000, 0x3f80},
		{"tie to even rounds up odd", 0x3f818000, 0x3f82},
		{"above half rounds up", 0x3f808001, 0x3f81},
		{"negative", 0xbf80c000, 0xbf81},
		{"max float rounds to inf", 0x7f7fffff, 0x7f80},
		{"inf", 0x7f800000, 0x7f80},
		{"-inf", 0xff800000, 0xff80},
		{"nan stays nan", 0x7f800001, 0x7fc0},
		{"smallest subnormal rounds to 0", 0x00000001, 0x0000},
		{"-0", 0x80000000, 0x8000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := F32ToBF16(math.Float32frombits(c.f32)); got != c.bf16 {
				t.Fatalf("F32ToBF16(%#08x) = %#04x, want %#04x", c.f32, got, c.bf16)
			}
		})
	}
	// bf16 → f32 is exact for every one of the 65536 patterns.
	for h := range 1 << 16 {
		f := BF16ToF32(uint16(h))
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) bits %#08x", h, math.Float32bits(f))
		}
		if !math.IsNaN(float64(f)) && F32ToBF16(f) != uint16(h) {
			t.Fatalf("bf16 %#04x does not round-trip", h)
		}
	}
}

func TestF16Conversion(t *testing.T) {
	cases := []struct {
		h    uint16
		want float64
	}{
		{0x3c00, 1},
		{0xc000, -2},
		{0x7bff, 65504},
		{0x0400, math.Ldexp(1, -14)},           // smallest normal
		{0x0001, math.Ldexp(1, -24)},           // smallest subnormal
		{0x03ff, 1023 * math.Ldexp(1, -24)},    // largest subnormal
		{0x8200, -512 * math.Ldexp(1, -24)},    // negative subnormal
		{0x3555, math.Ldexp(1+341.0/1024, -2)}, // 0 01101 0101010101
		{0x0000, 0},
		{0x7c00, math.Inf(1)},
		{0xfc00, math.Inf(-1)},
	}
	for _, c := range cases {
		if got := float64(F16ToF32(c.h)); got != c.want {
			t.Fatalf("F16ToF32(%#04x) = %g, want %g", c.h, got, c.want)
		}
	}
	if f := F16ToF32(0x8000); f != 0 || !math.Signbit(float64(f)) {
		t.Fatalf("-0 converted to %g", f)
	}
	if f := F16ToF32(0x7e01); !math.IsNaN(float64(f)) || math.Float32bits(f)&(0x3ff<<13) != 0x201<<13 {
		t.Fatalf("nan payload lost: %#08x", math.Float32bits(f))
	}
	// Every finite half value is an exact float32 value: check by rebuilding
	// it from sign·mantissa·2^exp with float64 arithmetic.
	for h := range 1 << 16 {
		e, m := (h>>10)&0x1f, h&0x3ff
		if e == 0x1f {
			continue
		}
		var v float64
		if e == 0 {
			v = math.Ldexp(float64(m), -24)
		} else {
			v = math.Ldexp(float64(1024+m), e-25)
		}
		if h&0x8000 != 0 {
			v = -v
		}
		if got := float64(F16ToF32(uint16(h))); got != v {
			t.Fatalf("F16ToF32(%#04x) = %g, want %g", h, got, v)
		}
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a := []float32{1, -2.5, float32(math.Pi), 1e-40, float32(math.Inf(1)), 3.0000002}
	b := []float32{7, 8}
	ts := []Tensor{{"a", []int{2, 3}, a}, {"b.weight", []int{2}, b}, {"empty", []int{0, 4}, nil}}
	for _, dt := range []DType{F32, BF16} {
		p := filepath.Join(dir, string(dt)+".safetensors")
		if err := Write(p, ts, dt, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 6)
		if err := f.ReadF32("a", got); err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			want := a[i]
			if dt == BF16 {
				want = BF16ToF32(F32ToBF16(want))
			}
			if math.Float32bits(v) != math.Float32bits(want) {
				t.Fatalf("%s: a[%d] = %g, want %g", dt, i, v, want)
			}
		}
		if info, _ := f.Info("a"); info.DType != dt || info.Shape[1] != 3 {
			t.Fatalf("info %+v", info)
		}
		if f.Header.Metadata["format"] != "pt" {
			t.Fatalf("metadata %v", f.Header.Metadata)
		}
		if err := f.ReadF32("a", make([]float32, 5)); err == nil {
			t.Fatal("want size mismatch error")
		}
		f.Close()
	}
}

func TestShardedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "model-00001-of-00002.safetensors"), []Tensor{{"x", []int{2}, []float32{1, 2}}}, F32, nil); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "model-00002-of-00002.safetensors"), []Tensor{{"y", []int{1}, []float32{3}}, {"z", []int{1}, []float32{4}}}, BF16, nil); err != nil {
		t.Fatal(err)
	}
	wm := map[string]string{"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"}
	if err := WriteIndex(dir, wm, 12); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := c.Names(); strings.Join(n, ",") != "x,y,z" {
		t.Fatalf("names %v", n)
	}
	for name, want := range map[string][]float32{"x": {1, 2}, "y": {3}, "z": {4}} {
		got := make([]float32, len(want))
		if err := c.ReadF32(name, got); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s = %v want %v", name, got, want)
			}
		}
	}
	// An index naming a tensor its shard does not hold is rejected.
	wm["w"] = "model-00001-of-00002.safetensors"
	if err := WriteIndex(dir, wm, 12); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("err = %v, want missing tensor w", err)
	}
	wm = map[string]string{"x": "../escape.safetensors"}
	if err := WriteIndex(dir, wm, 12); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(dir); err == nil {
		t.Fatal("want error for shard path outside the directory")
	}
}

func file(hdr string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(b, hdr...)
	return append(b, make([]byte, data)...)
}

func TestParseHeaderHostile(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", []byte{1, 2}, "shorter"},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds"},
		{"header past end", binary.LittleEndian.AppendUint64(nil, 10), "past the end"},
		{"not json", file("{", 0), "JSON"},
		{"unknown dtype", file(`{"a":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}}`, 4), "unknown dtype"},
		{"length mismatch", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), "needs 8 bytes"},
		{"out of range", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), "outside"},
		{"negative offset", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, 4), "outside"},
		{"reversed offsets", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4), "outside"},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "overlaps"},
		{"hole", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "hole"},
		{"trailing bytes", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), "cover"},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "negative"},
		{"overflowing shape", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}}`, 0), "too large"},
		{"one offset", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 4), "2 entries"},
		{"bad metadata", file(`{"__metadata__":{"a":1}}`, 0), "metadata"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ParseHeader(c.b, int64(len(c.b)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want containing %q", err, c.want)
			}
		})
	}
	ok := file(`{"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8)
	h, start, err := ParseHeader(ok, int64(len(ok)))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tensors) != 2 || h.Tensors[0].Name != "a" || start != int64(len(ok)-8) {
		t.Fatalf("header %+v start %d", h, start)
	}
}

func TestOpenRejectsTruncatedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := Write(p, []Tensor{{"a", []int{4}, []float32{1, 2, 3, 4}}}, F32, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if err := os.WriteFile(p, b[:len(b)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(p); err == nil {
		t.Fatal("want error for truncated data")
	}
}

// FuzzParseHeader checks that no input makes the parser panic or accept a
// header whose tensors fall outside the data or overlap.
func FuzzParseHeader(f *testing.F) {
	f.Add(file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4))
	f.Add(file(`{"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, start, err := ParseHeader(b, int64(len(b)))
		if err != nil {
			return
		}
		var at int64
		for _, ti := range h.Tensors {
			if ti.Begin != at || ti.End > h.DataSize || start+ti.End > int64(len(b)) {
				t.Fatalf("accepted bad layout %+v", h.Tensors)
			}
			at = ti.End
			if ti.DType == F32 || ti.DType == BF16 || ti.DType == F16 {
				dst := make([]float32, ti.Elems)
				if err := Decode(dst, b[start+ti.Begin:start+ti.End], ti.DType); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
