// Package bootstrap is how the ranks of a job find each other before any
// transport exists: a small TCP key-value store hosted by rank 0 (Serve) that
// every rank reaches with a Client (Dial), and the parsing of the environment
// that launchers set (FromEnv).
//
// The store speaks a length-prefixed binary protocol (see proto.go). Every
// connection starts by presenting the job token, so two jobs that happen to
// share a host and port refuse each other instead of mixing their keys. Gets,
// waits and barriers block on the server until the keys they need are set;
// they are woken by key, never by polling, and every one of them is bounded
// by the caller's context. The client also measures the offset of its
// monotonic clock from rank 0's (ClockOffset), which puts every rank's
// telemetry on one time base.
package bootstrap
