package schema

import (
	"fmt"
	"strings"
)

// Severity of a diagnostic.
type Severity int

// Diagnostic severities.
const (
	Error Severity = iota
	Warning
)

// Diagnostic is a problem a plugin found in its configuration. Path names
// the attribute (["limits", "memory"]) so the host can point at its source
// range; an empty Path points at the whole block.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Summary  string   `json:"summary"`
	Detail   string   `json:"detail,omitempty"`
	Path     []string `json:"path,omitempty"`
}

// Diagnostics is a list of problems.
type Diagnostics []Diagnostic

// Errorf builds an error diagnostic about the attribute at path.
func Errorf(path []string, summary string, detailFormat string, args ...any) Diagnostic {
	return Diagnostic{Severity: Error, Summary: summary, Detail: fmt.Sprintf(detailFormat, args...), Path: path}
}

// HasErrors reports whether any diagnostic is an error.
func (d Diagnostics) HasErrors() bool {
	for _, x := range d {
		if x.Severity == Error {
			return true
		}
	}
	return false
}

// Err folds the error diagnostics into one error, or nil.
func (d Diagnostics) Err() error {
	var parts []string
	for _, x := range d {
		if x.Severity != Error {
			continue
		}
		s := x.Summary
		if len(x.Path) > 0 {
			s = strings.Join(x.Path, ".") + ": " + s
		}
		if x.Detail != "" {
			s += ": " + x.Detail
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(parts, "; "))
}
