package labels

import "testing"

func TestMatch(t *testing.T) {
	tests := []struct {
		name       string
		have, want map[string]string
		match      bool
	}{
		{"empty want", map[string]string{"a": "1"}, nil, true},
		{"both empty", nil, nil, true},
		{"subset", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}, true},
		{"other value", map[string]string{"a": "1"}, map[string]string{"a": "2"}, false},
		{"missing key", map[string]string{"a": "1"}, map[string]string{"b": "1"}, false},
		{"empty value is a value", map[string]string{}, map[string]string{"a": ""}, false},
	}
	for _, tt := range tests {
		if got := Match(tt.have, tt.want); got != tt.match {
			t.Errorf("%s: Match = %v", tt.name, got)
		}
	}
}

func TestReserved(t *testing.T) {
	for k, want := range map[string]bool{Run: true, OwnerPID: true, "team": false, "rlhostx": false} {
		if Reserved(k) != want {
			t.Errorf("Reserved(%q) != %v", k, want)
		}
	}
}
