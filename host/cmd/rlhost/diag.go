package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"golang.org/x/term"

	"github.com/rlhost/rlhost/host/config"
)

// printDiags renders each diagnostic as "file:line:col: " followed by HCL's
// own rendering (summary, the offending source line with a caret, detail),
// so both editors and people can find the spot. A diagnostic about a value
// read from a variable ends with that variable's description.
func printDiags(w io.Writer, f *config.File, diags hcl.Diagnostics) {
	if len(diags) == 0 {
		return
	}
	files := map[string]*hcl.File{}
	if f != nil && f.Files != nil {
		files = f.Files
	}
	// Width 0 disables word wrapping, which would split messages that
	// scripts grep for; wrap only for a terminal.
	width, color := uint(0), false
	if fd, ok := w.(interface{ Fd() uintptr }); ok && term.IsTerminal(int(fd.Fd())) {
		color = true
		if cols, _, err := term.GetSize(int(fd.Fd())); err == nil && cols > 20 {
			width = uint(cols)
		}
	}
	wr := hcl.NewDiagnosticTextWriter(w, files, width, color)
	for _, d := range diags {
		if d.Subject != nil && d.Subject.Filename == "" {
			// Placed in no file (a block made from flags): nothing to show.
			nd := *d
			nd.Subject, nd.Context = nil, nil
			d = &nd
		}
		if d.Subject != nil {
			if notes := f.VariableNotes(*d.Subject); len(notes) > 0 {
				nd := *d
				nd.Detail = strings.TrimSpace(d.Detail + "\n\n" + strings.Join(notes, "\n"))
				d = &nd
			}
			fmt.Fprintf(w, "%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		_ = wr.WriteDiagnostic(d)
	}
}
