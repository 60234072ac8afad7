package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vccl-go/vccl/exporter/arrow"
)

// convert is `vccl-analyze convert`: trace files into another format.
func convert(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vccl-analyze convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "parquet", "the format to write: parquet, stream (Arrow IPC stream, .arrows) or file (Arrow IPC file, .arrow)")
	out := fs.String("o", "", "the `DIR`ectory to write into (required; created if missing); each file keeps its name, with the new extension")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: vccl-analyze convert [-format parquet|stream|file] -o DIR TRACE…\n\n"+
			"Rewrites trace files (Arrow file, Arrow stream or Parquet, told by their first bytes;\n"+
			"directories by their trace files) in another format: the same records and metadata.\n"+
			"A killed writer's file converts up to its last complete batch.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	f, err := arrow.ParseFormat(*format)
	if err != nil || *format == "" {
		fmt.Fprintf(stderr, "vccl-analyze convert: -format %q: want parquet, stream or file\n", *format)
		return 2
	}
	if *out == "" || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	files, code := traceFiles(fs.Args(), stderr, "convert")
	if code != 0 {
		return code
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(stderr, "vccl-analyze convert:", err)
		return 1
	}
	status := 0
	for _, src := range files {
		dst := filepath.Join(*out, arrow.ConvertedName(src, f))
		info, err := arrow.ConvertFile(src, dst, f)
		if err != nil {
			fmt.Fprintln(stderr, "vccl-analyze convert:", err)
			status = 1
			continue
		}
		note := ""
		if !info.Finished {
			note = " (unfinished: read up to its last complete batch)"
		}
		fmt.Fprintf(stdout, "%s -> %s: %d records%s\n", src, dst, info.Records, note)
	}
	return status
}

// repair is `vccl-analyze repair`: finish the files killed writers left.
func repair(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vccl-analyze repair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: vccl-analyze repair TRACE…\n\n"+
			"Finishes trace files that a killed writer left unfinished, in place, so that any\n"+
			"Arrow or Parquet tool opens them: an Arrow file's complete batches are rewritten\n"+
			"with a footer, a Parquet file is cut after its last complete footer. Finished\n"+
			"files are left alone.\n")
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	files, code := traceFiles(fs.Args(), stderr, "repair")
	if code != 0 {
		return code
	}
	status := 0
	for _, p := range files {
		before, err := arrow.OpenFiles(p)
		if err != nil {
			fmt.Fprintln(stderr, "vccl-analyze repair:", err)
			status = 1
			continue
		}
		for {
			if _, err := before.Next(); err != nil {
				break
			}
		}
		was := before.File()
		before.Close()
		if was.Finished {
			fmt.Fprintf(stdout, "%s: finished, left alone\n", p)
			continue
		}
		info, err := arrow.Repair(p)
		if err != nil {
			fmt.Fprintln(stderr, "vccl-analyze repair:", err)
			status = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: repaired, %d records in %d batches\n", p, info.Records, info.Batches)
	}
	return status
}

// traceFiles lists the files named by paths, directories by their trace
// files.
func traceFiles(paths []string, stderr io.Writer, cmd string) ([]string, int) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(stderr, "vccl-analyze %s: %v\n", cmd, err)
			return nil, 1
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		fs, err := arrow.ListFiles(p)
		if err != nil {
			fmt.Fprintf(stderr, "vccl-analyze %s: %v\n", cmd, err)
			return nil, 1
		}
		files = append(files, fs...)
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "vccl-analyze %s: no trace files (*.arrow, *.arrows, *.parquet)\n", cmd)
		return nil, 1
	}
	return files, 0
}
