package procowner

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

type testRecord struct {
	Owner   Owner  `json:"owner"`
	Service string `json:"service"`
}

func TestRecordsDead(t *testing.T) {
	me := Current()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := Owner{Host: me.Host, PID: cmd.Process.Pid}
	r := Records{Dir: filepath.Join(t.TempDir(), "state")}
	recs := map[string]testRecord{
		"alive":         {Owner: me, Service: "a"},
		"dead":          {Owner: gone, Service: "a"},
		"other service": {Owner: Owner{Host: me.Host, PID: gone.PID + 100000000}, Service: "b"},
		"other host":    {Owner: Owner{Host: "elsewhere", PID: gone.PID}, Service: "a"},
	}
	for name, rec := range recs {
		p := r.Path(rec.Owner)
		if name == "other service" || name == "other host" {
			p = filepath.Join(r.Dir, name+".json")
		}
		if err := r.Write(p, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "garbage.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Dead(r, me.Host, func(x testRecord) Owner { return x.Owner }, func(x testRecord) bool { return x.Service == "a" })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[r.Path(gone)].Owner != gone {
		t.Fatalf("dead records = %v, want only %v's", got, gone)
	}
	if err := r.Remove(r.Path(gone)); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(r.Path(gone)); err != nil {
		t.Errorf("removing a missing record: %v", err)
	}
	if got, err := Dead[testRecord](Records{Dir: filepath.Join(r.Dir, "none")}, me.Host, func(x testRecord) Owner { return x.Owner }, nil); err != nil || len(got) != 0 {
		t.Errorf("missing dir: %v, %v", got, err)
	}
}

func TestLabelsRoundTrip(t *testing.T) {
	o := Owner{Host: "h", PID: 42, Start: "abcdef01/99"}
	got, ok := FromLabels(o.Labels())
	if !ok || got != o {
		t.Errorf("FromLabels(Labels()) = %v, %v", got, ok)
	}
	for _, l := range []map[string]string{nil, {"rlhost.owner.pid": "x", "rlhost.owner.host": "h"}, {"rlhost.owner.pid": "1"}} {
		if _, ok := FromLabels(l); ok {
			t.Errorf("FromLabels(%v) read an owner", l)
		}
	}
}
