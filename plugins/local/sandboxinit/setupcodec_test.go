package sandboxinit

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// fullSetup has every field of Setup set to a value other than its zero,
// and fails the test if a field is added that it does not set: the codec
// must then learn it too.
func fullSetup(t testing.TB) Setup {
	s := Setup{
		Proto:          ProtocolVersion,
		Rootfs:         "/srv/root",
		Binds:          []Bind{{Src: "/usr", Dst: "/usr"}, {Src: "/etc/hosts", Dst: "/etc/hosts", RW: true, Copy: true, Optional: true}},
		Links:          []Link{{Dst: "/bin", Target: "usr/bin"}},
		Files:          []File{{Dst: "/etc/passwd", Data: []byte("root:x:0:0::/:/bin/sh\n")}},
		Hide:           []string{"/run/secrets", ""},
		TmpBytes:       64 << 20,
		WorkspaceBytes: 1 << 40,
		WorkspaceDir:   "/var/lib/rlhost/ws",
		Network:        true,
		Trace:          true,
		Hostname:       "sandbox",
		FileSize:       -1,
		OpenFiles:      1024,
		Seccomp:        bytes.Repeat([]byte{0x20, 0, 0, 0, 4, 0, 0, 0}, 3),
		CgroupTaskFDs:  []int{5, 6},
		CgroupProcsFD:  7,
		Isolation:      "namespaces (seccomp off)",
		Template:       "/var/lib/rlhost/local/launcher/root",
	}
	v := reflect.ValueOf(s)
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Fatalf("fullSetup leaves Setup.%s zero: set it, and encode it in setupcodec.go", v.Type().Field(i).Name)
		}
	}
	return s
}

func TestSetupRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Setup
	}{
		{"every field", fullSetup(t)},
		{"only the version", Setup{Proto: ProtocolVersion}},
		{"the launcher's shape", Setup{Proto: ProtocolVersion, TmpBytes: 1, Hostname: "sandbox", Template: "/t", CgroupTaskFDs: []int{5}}},
	} {
		t.Run(tc.name, func(t *testing.T) { roundTrip(t, tc.in, WriteSetup, ReadSetup, nil) })
	}
}

// A backend of another protocol version must get an answer naming its
// version, whichever encoding it sent: the init then refuses it cleanly.
func TestReadSetupOtherVersions(t *testing.T) {
	var jsonFrame bytes.Buffer
	body := []byte(`{"proto":3,"rootfs":"/"}`)
	sendFrame(&jsonFrame, append(make([]byte, 4), body...))
	var newer bytes.Buffer
	WriteSetup(&newer, &Setup{Proto: ProtocolVersion + 1})
	// A newer layout may follow the version with anything.
	newerFrame := append(newer.Bytes(), 0xff, 0xfe)
	newerFrame[0] += 2
	for _, tc := range []struct {
		name  string
		frame []byte
		proto int
	}{
		{"JSON, protocol 3", jsonFrame.Bytes(), 3},
		{"binary, a newer protocol", newerFrame, ProtocolVersion + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadSetup(bytes.NewReader(tc.frame))
			if err != nil {
				t.Fatal(err)
			}
			if got.Proto != tc.proto {
				t.Fatalf("proto %d, want %d", got.Proto, tc.proto)
			}
		})
	}
}

func TestReadSetupMalformed(t *testing.T) {
	var good bytes.Buffer
	full := fullSetup(t)
	WriteSetup(&good, &full)
	frame := func(payload []byte) []byte {
		return append([]byte{byte(len(payload)), byte(len(payload) >> 8), 0, 0}, payload...)
	}
	payload := good.Bytes()[4:]
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"truncated in the middle", frame(payload[:len(payload)/2]), "truncated or malformed"},
		{"trailing bytes", frame(append(append([]byte(nil), payload...), 0)), "after the last field"},
		{"a wrong first byte", frame(append([]byte{0x01}, payload[1:]...)), "not a binary setup"},
		{"a huge list count", frame([]byte{setupMagic, byte(ProtocolVersion * 2), 0, 0xff, 0xff, 0xff, 0xff, 0x0f}), "malformed list"},
		{"a boolean of 2", frame(bytes.Replace(payload, []byte("/var/lib/rlhost/ws\x01"), []byte("/var/lib/rlhost/ws\x02"), 1)), "malformed boolean"},
		{"an empty frame", frame(nil), "not a binary setup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadSetup(bytes.NewReader(tc.frame))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func FuzzReadSetup(f *testing.F) {
	var buf bytes.Buffer
	full := fullSetup(f)
	WriteSetup(&buf, &full)
	f.Add(buf.Bytes())
	buf.Reset()
	WriteSetup(&buf, &Setup{Proto: ProtocolVersion})
	f.Add(buf.Bytes())
	f.Add([]byte{3, 0, 0, 0, setupMagic, 8, 0})
	f.Add([]byte{2, 0, 0, 0, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadSetup(bytes.NewReader(data))
		if err != nil || s.Proto != ProtocolVersion {
			return
		}
		var out bytes.Buffer
		if err := WriteSetup(&out, &s); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		s2, err := ReadSetup(&out)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip: %+v vs %+v (%v)", s, s2, err)
		}
	})
}
