// Package cli is vccl-analyze's flag parsing and output wiring.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/vccl-go/vccl/analyzer"
)

// Main runs vccl-analyze with args and returns its exit status: 0 when the
// analysis ran (whatever it found), 1 when it could not, 2 for bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "convert", "export":
			return convert(args[1:], stdout, stderr)
		case "repair":
			return repair(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("vccl-analyze", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.Bool("json", false, "write one JSON object (findings, collectives, job, warnings) instead of the tables")
	htmlOut := fs.String("html", "", "also write a self-contained HTML report with charts to `FILE`")
	verbose := fs.Bool("v", false, "print every finding's evidence numbers after the table")
	quiet := fs.Bool("q", false, "do not print warnings about the input")
	minSev := fs.String("min-severity", "warning", "leave out findings below this severity (info, warning, critical); info lists those under the noise floor too")
	var sets optList
	fs.Var(&sets, "set", "set a detector threshold, `name=value` (repeatable; see -list-options)")
	list := fs.Bool("list-options", false, "list the thresholds -set takes, with their defaults, and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: vccl-analyze [flags] TRACE…\n"+
			"       vccl-analyze convert [-format parquet|stream|file] -o DIR TRACE…\n"+
			"       vccl-analyze repair TRACE…\n\n"+
			"TRACE is a trace file (Arrow file, Arrow stream or Parquet) or a directory of them\n"+
			"(all ranks of one job). convert (or export) rewrites traces in another format;\n"+
			"repair finishes the files of killed writers for other tools.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *list {
		for _, n := range analyzer.OptionNames() {
			fmt.Fprintln(stdout, n)
		}
		return 0
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	sev, err := analyzer.ParseSeverity(*minSev)
	if err != nil {
		fmt.Fprintln(stderr, "vccl-analyze:", err)
		return 2
	}
	// Info findings are the noise floor, which the analyzer counts but
	// does not list unless asked.
	opts := analyzer.Options{ListBelowFloor: sev == analyzer.SeverityInfo}
	for _, s := range sets {
		name, value, ok := strings.Cut(s, "=")
		if !ok {
			fmt.Fprintf(stderr, "vccl-analyze: -set %q: want name=value\n", s)
			return 2
		}
		if err := opts.Set(name, value); err != nil {
			fmt.Fprintln(stderr, "vccl-analyze:", err)
			return 2
		}
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(stderr, "vccl-analyze:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := analyzer.AnalyzeFiles(ctx, fs.Args(), opts)
	if err != nil {
		fmt.Fprintln(stderr, "vccl-analyze:", err)
		return 1
	}
	r.Filter(sev)
	if !*quiet {
		for _, w := range r.Warnings {
			fmt.Fprintln(stderr, "vccl-analyze: warning:", w)
		}
	}
	if *htmlOut != "" {
		if err := writeHTML(*htmlOut, r); err != nil {
			fmt.Fprintln(stderr, "vccl-analyze:", err)
			return 1
		}
	}
	if *jsonOut {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteText(stdout, *verbose)
		if err == nil && *htmlOut != "" {
			_, err = fmt.Fprintf(stdout, "HTML report: %s\n", *htmlOut)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "vccl-analyze:", err)
		return 1
	}
	return 0
}

func writeHTML(path string, r *analyzer.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

type optList []string

func (o *optList) String() string     { return strings.Join(*o, ",") }
func (o *optList) Set(s string) error { *o = append(*o, s); return nil }
