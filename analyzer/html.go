package analyzer

import "io"

// WriteHTML writes a self-contained HTML report.
func (r *Report) WriteHTML(w io.Writer) error { return nil }
