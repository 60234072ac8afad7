// Package telemetry connects a communicator's flow telemetry to the
// exporters the environment asks for. It is the one import a program needs
// to make its telemetry visible, as net/http/pprof is for profiles:
//
//	import _ "github.com/vccl-go/vccl/telemetry"
//
// Its init registers an attacher with collective.RegisterTelemetry, so that
// every communicator made with telemetry on (VCCL_TELEMETRY=1, or
// collective.WithTelemetry(true)) gets, before its first record is drained:
//
//   - an Arrow trace per rank in VCCL_TELEMETRY_DIR, when it is set
//     (exporter/arrow; a directory it creates gets a .gitignore of "*", so
//     a trace written in a work tree is not committed by accident);
//   - the rank's live endpoint at VCCL_TELEMETRY_ADDR (default 127.0.0.1
//     and a free port; "off": none), serving /metrics from the Prometheus
//     exporter, the link windows and the latest records, which vccl-top
//     reads and analyses (exporter/live, exporter/prom), announced in the
//     rendezvous store and in VCCL_TELEMETRY_DIR/endpoints.json;
//   - OpenTelemetry spans (exporter/otel) only where the standard OTEL_*
//     variables ask for them: OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, or OTEL_TRACES_EXPORTER set
//     to otlp or console. The specification's defaults apply (OTLP over
//     http/protobuf; an endpoint without a scheme is plain HTTP). With none
//     of them set no span exporter starts and nothing is printed.
//
// Close of the communicator finishes it all: its collector delivers the last
// records (the Arrow files are finished, the last spans sent), then the live
// endpoint stops. With telemetry off the package does nothing.
//
// A program that wants a handle on its exporters (to print where the trace
// went, or to choose them by flag) makes its communicator with
// collective.WithTelemetryAttachers(false) and calls Attach with a Config,
// from ConfigFromEnv or its own.
package telemetry
