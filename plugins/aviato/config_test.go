package aviato

import (
	"strings"
	"testing"
)

func TestQuantities(t *testing.T) {
	for _, tc := range []struct {
		cpus float64
		want string
	}{{0.5, "500m"}, {1, "1"}, {2, "2"}, {0.25, "250m"}, {1.5, "1500m"}, {0.0001, "1m"}} {
		if got := cpuQuantity(tc.cpus); got != tc.want {
			t.Errorf("cpuQuantity(%g) = %q, want %q", tc.cpus, got, tc.want)
		}
	}
	for _, tc := range []struct {
		bytes int64
		want  string
	}{{512 << 20, "512Mi"}, {1 << 30, "1Gi"}, {1536 << 20, "1536Mi"}, {3 << 10, "3Ki"}, {1000, "1000"}} {
		if got := memQuantity(tc.bytes); got != tc.want {
			t.Errorf("memQuantity(%d) = %q, want %q", tc.bytes, got, tc.want)
		}
	}
}

func TestGRPCTarget(t *testing.T) {
	for _, tc := range []struct {
		url, target string
		secure, ok  bool
	}{
		{"https://atc.cw-sandbox.com", "atc.cw-sandbox.com:443", true, true},
		{"https://atc.cw-sandbox.com/", "atc.cw-sandbox.com:443", true, true},
		{"http://127.0.0.1:8080", "127.0.0.1:8080", false, true},
		{"http://[::1]:9", "::1:9", false, true},
		{"http://localhost", "localhost:80", false, true},
		{"grpc://x:1", "", false, false},
		{"https://x/api", "", false, false},
		{"https://", "", false, false},
		{"atc.cw-sandbox.com:443", "", false, false},
	} {
		target, secure, err := grpcTarget(tc.url)
		if (err == nil) != tc.ok || target != tc.target || secure != tc.secure {
			t.Errorf("grpcTarget(%q) = %q, %v, %v; want %q, %v, ok=%v", tc.url, target, secure, err, tc.target, tc.secure, tc.ok)
		}
	}
}

func FuzzGRPCTarget(f *testing.F) {
	for _, s := range []string{"https://atc.cw-sandbox.com", "http://127.0.0.1:1", "http://x/y", "::", "http://[::1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		target, _, err := grpcTarget(s)
		if err != nil {
			return
		}
		i := strings.LastIndexByte(target, ':')
		if i <= 0 || i == len(target)-1 {
			t.Errorf("grpcTarget(%q) = %q: no host:port", s, target)
		}
	})
}
