// Package term tells the command-line tools whether their output reaches a
// terminal, where they draw progress bars, and how a launcher that owns the
// terminal (vcclrun) tells its ranks it shows their status lines.
package term

import "os"

// StatusLinesVar is set to "1" by a launcher whose own stderr is a
// terminal and which shows each rank's status line (what the rank writes to
// stderr after a carriage return, with no newline yet: a progress bar) at
// the bottom of that terminal, below the ranks' output lines. A rank whose
// stderr is the launcher's pipe may then draw a progress bar as if on a
// terminal.
const StatusLinesVar = "VCCL_STATUS_LINES"

// StatusLines reports whether a progress bar on stderr would be seen: stderr
// is a terminal, or the launcher shows status lines (setting, the command
// read from StatusLinesVar, is "1").
func StatusLines(stderr *os.File, setting string) bool {
	return IsTerminal(stderr) || setting == "1"
}
