// Package benchhook reaches the knobs of the comm library that exist for
// its benchmarks, not its users: they stay off collective's API, and the
// internal path keeps them inside this module.
package benchhook

// SetTelemetry pauses (false) or resumes (true) the telemetry records of
// comm, a *collective.Comm made with telemetry on, so that a benchmark
// times the same calls of one job with telemetry off and on, alternately:
// launches differ more on a shared machine than telemetry costs. Paused,
// the data path does what it does with telemetry off but for one atomic
// load per check, and the collector idles. Switch between calls: a call
// running meanwhile may keep only part of its records. It fails for a
// communicator made with telemetry off, which has no recorders. Package
// collective sets it when it is linked in.
var SetTelemetry func(comm any, on bool) error
