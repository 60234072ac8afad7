// Command vcclrun starts N local ranks of a program with the torchrun-style
// environment VCCL reads, tags their output with their rank, forwards
// SIGINT and SIGTERM to them, and stops the job when one rank fails.
//
//	vcclrun -n 4 [--grace 5s] [--timeout 0] [--tag-output=true] [--] PROG ARGS...
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/vccl-go/vccl/cmd/vcclrun/internal/launch"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	os.Exit(launch.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr, sig))
}
