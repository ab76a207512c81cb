package schema

import (
	"errors"
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

// Diagnostic is a problem found in a block's settings, by a plugin or by
// the host. It is the one diagnostic type below the HCL layer: Path names
// the setting (["limits", "memory"], ["task", "2", "id"]) as the job file
// writes it, and the host places the diagnostic at that setting's source
// range later (host/config.InConfigBody), the way Terraform's tfdiags
// attaches an attribute path first and a body afterwards. An empty Path
// points at the whole block.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Summary  string   `json:"summary"`
	Detail   string   `json:"detail,omitempty"`
	Path     []string `json:"path,omitempty"`

	cause error // what %w wrapped, for errors.Is/As; never crosses a process
}

// Diagnostics is a list of problems.
type Diagnostics []Diagnostic

// Errorf builds an error diagnostic about the setting at path. An error
// wrapped with %w stays reachable through Diagnostics.Err.
func Errorf(path []string, summary string, detailFormat string, args ...any) Diagnostic {
	err := fmt.Errorf(detailFormat, args...)
	d := Diagnostic{Severity: Error, Summary: summary, Detail: err.Error(), Path: path}
	if strings.Contains(detailFormat, "%w") {
		d.cause = err
	}
	return d
}

// Warnf builds a warning about the setting at path.
func Warnf(path []string, summary string, detailFormat string, args ...any) Diagnostic {
	d := Errorf(path, summary, detailFormat, args...)
	d.Severity = Warning
	return d
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

// Err folds the error diagnostics into one error, or nil. The diagnostics
// survive inside it, paths included: FromError gets them back from the
// error (or from one that wraps it), so code that can only return an error
// loses no location.
func (d Diagnostics) Err() error {
	if !d.HasErrors() {
		return nil
	}
	return &diagnosticsError{diags: d}
}

type diagnosticsError struct{ diags Diagnostics }

func (e *diagnosticsError) Error() string {
	var parts []string
	for _, x := range e.diags {
		if x.Severity != Error {
			continue
		}
		var s []string
		if len(x.Path) > 0 {
			s = append(s, strings.Join(x.Path, "."))
		}
		if x.Summary != "" {
			s = append(s, x.Summary)
		}
		if x.Detail != "" {
			s = append(s, x.Detail)
		}
		parts = append(parts, strings.Join(s, ": "))
	}
	return strings.Join(parts, "; ")
}

func (e *diagnosticsError) Unwrap() []error {
	var out []error
	for _, x := range e.diags {
		if x.cause != nil {
			out = append(out, x.cause)
		}
	}
	return out
}

// FromError returns the diagnostics err carries (made by Diagnostics.Err,
// possibly wrapped), or else one error diagnostic without a path whose
// detail is err's text. A nil err gives nil.
func FromError(err error) Diagnostics {
	if err == nil {
		return nil
	}
	var de *diagnosticsError
	if errors.As(err, &de) {
		return de.diags
	}
	return Diagnostics{{Severity: Error, Detail: err.Error(), cause: err}}
}
