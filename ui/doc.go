// Package ui is vccl-top's model: a Bubble Tea program that shows a running
// job (or a replayed trace) as it happens: a job overview (ranks up and
// down with since when, collectives per second, bus bandwidth per
// operation, arrival skew), a rank × peer matrix coloured by bandwidth or
// backlog, a link detail with sparklines refreshed at 10 Hz, the analyzer's
// findings, and a GPU panel when a GPU source is present.
//
// Data comes through Source, a small interface whose Frame returns the
// latest state at once: the sources (package ui/source: live endpoints,
// Prometheus, Arrow replays) do their I/O in their own goroutines, so the
// screen never waits on a rank that died. This package opens no socket and
// no file; it turns Frames into screens and keys into moves, and its views
// are pure functions of the model, which the golden tests pin down.
package ui
