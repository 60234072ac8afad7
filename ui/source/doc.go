// Package source holds vccl-top's data sources, each a ui.Source whose
// Frame returns at once while its goroutines do the I/O:
//
//   - Live reads every rank's live endpoint (exporter/live): the
//     /v1/stream server-sent events (a window snapshot every 100 ms, and
//     the findings the analyzer publishes), /v1/info, and the Prometheus
//     metrics each rank serves on /metrics for the collectives. The
//     endpoints come from a list (Targets), from endpoints.json (Dir) or
//     from the job's rendezvous store (Job). A rank whose stream stops for
//     StaleAfter is shown down, with since when, and retried with backoff;
//     nothing waits on it.
//   - Prometheus queries a Prometheus server that scrapes the ranks, for
//     jobs too large to poll every rank.
//   - Replay replays Arrow traces (exporter/arrow) through a flowtel.Window
//     at a chosen speed, with pause: the same screens, post mortem.
//
// WithGPUs adds the GPUs of this host (gpu/nvml) to any source's frames.
package source
