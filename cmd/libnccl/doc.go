// Command libnccl is VCCL-Go as a drop-in for NCCL: built with
//
//	go build -buildmode=c-shared -o libnccl.so.2 ./cmd/libnccl
//
// it exports NCCL's C API (include/nccl.h), so that PyTorch (LD_PRELOAD),
// nccl-tests (linked against it) and any program built for NCCL run their
// collectives on VCCL's GPU engine, with VCCL's telemetry when
// VCCL_TELEMETRY=1. The logic lives in package capi; this package is the
// cgo boundary. docs/nccl-abi.md says what is supported.
//
// Without cgo (cross builds, vet for other systems) it builds as an empty
// program.
package main

func main() {}
