// Package views checks that every consumer of telemetry records tells the
// same story: fed one record stream, the per-link Window, the Prometheus
// collector, the OpenTelemetry spans and the analyzer report the same
// per-link bytes, WR latency percentiles and credit-wait time. They are all
// views over flowtel's fold; this test is what keeps them so.
package views
