// Package flowtel is VCCL-Go's flow telemetry core: the 64-byte Record every
// work-request post and completion produces, the single-producer rings those
// records are written to, the Recorder the data path calls, the Collector that
// drains rings into Sinks, the clock that puts every rank on one time base, and
// the per-link sliding Window statistics computed from the records.
//
// The data path never blocks on telemetry and never allocates for it. When a
// ring is full the producer drops the record and counts it; the loss reaches
// consumers in band, as a KindLost record in the order it happened, so no loss
// is silent. A nil or disabled Recorder costs the caller one branch.
//
// flowtel imports nothing else of this module and no heavy dependency:
// exporters, the analyzer and the UI build on it, never the other way round.
package flowtel
