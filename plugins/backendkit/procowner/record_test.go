package procowner

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

func TestSweep(t *testing.T) {
	me := Current()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	r := Records{Dir: t.TempDir()}
	type rec struct {
		Owner Owner    `json:"owner"`
		Left  []string `json:"left"`
	}
	owner := func(x rec) Owner { return x.Owner }
	done := Owner{Host: me.Host, PID: cmd.Process.Pid}
	stuck := Owner{Host: me.Host, PID: cmd.Process.Pid, Start: "x/1"}
	alive := me
	for _, x := range []rec{{Owner: done, Left: []string{"a"}}, {Owner: alive, Left: []string{"b"}}} {
		if err := r.Write(r.Path(x.Owner), x); err != nil {
			t.Fatal(err)
		}
	}
	stuckPath := filepath.Join(r.Dir, "stuck.json")
	if err := r.Write(stuckPath, rec{Owner: stuck, Left: []string{"c", "d"}}); err != nil {
		t.Fatal(err)
	}
	var reaped []string
	err := Sweep(r, me.Host, owner, nil, func(x rec) (*rec, error) {
		reaped = append(reaped, x.Left...)
		if len(x.Left) == 2 {
			x.Left = x.Left[1:] // "c" deleted, "d" not
			return &x, errors.New("d: refused")
		}
		return nil, nil
	})
	if err == nil || err.Error() != "d: refused" {
		t.Errorf("Sweep error %v, want the reaper's", err)
	}
	slices.Sort(reaped)
	if !slices.Equal(reaped, []string{"a", "c", "d"}) {
		t.Errorf("reaped %v; a live owner's record was reaped, or a dead one's missed", reaped)
	}
	if _, err := os.Stat(r.Path(done)); !os.IsNotExist(err) {
		t.Errorf("a record left with nothing is still there: %v", err)
	}
	if _, err := os.Stat(r.Path(alive)); err != nil {
		t.Errorf("a live owner's record is gone: %v", err)
	}
	left, err := Dead(r, me.Host, owner, nil)
	if err != nil || len(left) != 1 || !slices.Equal(left[stuckPath].Left, []string{"d"}) {
		t.Errorf("after the sweep, dead records %v, %v; want stuck.json with d", left, err)
	}
}
