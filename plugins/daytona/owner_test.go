package daytona

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"

	"github.com/rlhost/rlhost/plugins/backendkit/procowner"
)

// The state file read back after every change names exactly the sandboxes
// the backend holds, while the journal stays within a bounded length of
// the live entries; the last removal leaves no file.
func TestStateFileJournal(t *testing.T) {
	dir := t.TempDir()
	f, err := openState(dir, procowner.Owner{Host: "h", PID: 42}, "http://api", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	readBack := func(step string) stateRecord {
		t.Helper()
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		var r stateRecord
		if err := r.DecodeRecord(b); err != nil {
			t.Fatalf("%s: decode: %v", step, err)
		}
		if !reflect.DeepEqual(r, f.rec) {
			t.Fatalf("%s: read back %d sandboxes, hold %d", step, len(r.Sandboxes), len(f.rec.Sandboxes))
		}
		// The journal: the lines after the snapshot.
		dec := json.NewDecoder(bytes.NewReader(b))
		var snap stateRecord
		if err := dec.Decode(&snap); err != nil {
			t.Fatalf("%s: snapshot: %v", step, err)
		}
		journal := bytes.Count(b[dec.InputOffset():], []byte("\n")) // each change ends in one
		if limit := max(compactAfter, 2*len(f.rec.Sandboxes)); journal > limit {
			t.Fatalf("%s: %d journal lines for %d sandboxes, want at most %d: not compacted", step, journal, len(f.rec.Sandboxes), limit)
		}
		return r
	}
	// Many in flight, then a churn of creates and deletes, then drained.
	name := func(i int) string { return fmt.Sprintf("rlhost-%d", i) }
	for i := 0; i < 300; i++ {
		mustDo(t, f.put(name(i), ""))
		mustDo(t, f.put(name(i), fmt.Sprintf("id-%d", i)))
		readBack(fmt.Sprintf("create %d", i))
	}
	for i := 0; i < 600; i++ {
		mustDo(t, f.remove(name(i)))
		mustDo(t, f.put(name(300+i), ""))
		mustDo(t, f.put(name(300+i), fmt.Sprintf("id-%d", 300+i)))
		readBack(fmt.Sprintf("churn %d", i))
	}
	if r := readBack("after churn"); r.Owner.PID != 42 || r.APIURL != "http://api" || r.RunID != "run-1" {
		t.Errorf("header %+v", r)
	}
	for i := 600; i < 900; i++ {
		mustDo(t, f.remove(name(i)))
		if i < 899 {
			readBack(fmt.Sprintf("drain %d", i))
		}
	}
	if _, err := os.Stat(f.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after the last sandbox went: %v", err)
	}
	// A later create starts a new file.
	mustDo(t, f.put("again", ""))
	readBack("new file")
}

// What a crash or another writer can leave is read as well as it can be.
func TestStateRecordDecode(t *testing.T) {
	plain := stateRecord{Owner: procowner.Owner{Host: "h", PID: 7}, APIURL: "u",
		Sandboxes: map[string]stateEntry{"a": {ID: "1"}, "b": {}}}
	dir := t.TempDir()
	store := procowner.Records{Dir: dir}
	path := dir + "/plain.json"
	if err := store.Write(path, plain); err != nil { // as procowner.Sweep writes back
		t.Fatal(err)
	}
	indented, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data string
		want map[string]stateEntry // nil: an error
	}{
		{"indented snapshot", string(indented), map[string]stateEntry{"a": {ID: "1"}, "b": {}}},
		{"journal", string(indented) + `{"name":"b","id":"2"}` + "\n" + `{"name":"a","removed":true}` + "\n",
			map[string]stateEntry{"b": {ID: "2"}}},
		{"torn last line", string(indented) + `{"name":"c","id":"3"}` + "\n" + `{"name":"b","remo`,
			map[string]stateEntry{"a": {ID: "1"}, "b": {}, "c": {ID: "3"}}},
		{"no sandboxes field", `{"owner":{"host":"h","pid":7}}`, map[string]stateEntry{}},
		{"not a record", `not json`, nil},
		{"empty", ``, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r stateRecord
			err := r.DecodeRecord([]byte(tc.data))
			if tc.want == nil {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", r)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(r.Sandboxes, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", r.Sandboxes, err, tc.want)
			}
		})
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
