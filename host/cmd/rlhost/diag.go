package main

import (
	"io"

	"github.com/hashicorp/hcl/v2"
	"golang.org/x/term"

	"github.com/rlhost/rlhost/host/config"
)

// printDiags renders diagnostics with source context and a caret, the way
// users of HCL tools expect.
func printDiags(w io.Writer, f *config.File, diags hcl.Diagnostics) {
	if len(diags) == 0 {
		return
	}
	files := map[string]*hcl.File{}
	if f != nil && f.Files != nil {
		files = f.Files
	}
	width, color := uint(100), false
	if fd, ok := w.(interface{ Fd() uintptr }); ok && term.IsTerminal(int(fd.Fd())) {
		color = true
		if cols, _, err := term.GetSize(int(fd.Fd())); err == nil && cols > 20 {
			width = uint(cols)
		}
	}
	wr := hcl.NewDiagnosticTextWriter(w, files, width, color)
	_ = wr.WriteDiagnostics(diags)
}
