//go:build cgo && !vccl_notelemetry

package main

// VCCL_TELEMETRY=1 attaches the exporters the environment asks for (Arrow
// traces, the live endpoint, OpenTelemetry spans) to every communicator,
// as in a Go program. The tag vccl_notelemetry leaves them out (the ABI
// test builds the library that way: a fifth of the packages to compile).
import _ "github.com/vccl-go/vccl/telemetry"
