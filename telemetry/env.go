package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/arrow"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/exporter/otel"
	"github.com/vccl-go/vccl/flowtel"
)

// The exporters' environment is read here and nowhere else (the layering
// test checks it): ConfigFromEnv parses it, through each exporter's own
// parser, into one Config, and Attach passes the values down; the exporters
// read none themselves.

func init() {
	collective.RegisterTelemetry(Name, attachFromEnv)
}

// attachFromEnv is the registered attacher: the exporters ConfigFromEnv
// asks for, detached by the communicator's Close.
func attachFromEnv(ctx context.Context, c *collective.Comm) (func(context.Context) error, error) {
	e, err := attachEnv(ctx, c, os.Getenv)
	if err != nil {
		return nil, err
	}
	return e.Close, nil
}

func attachEnv(ctx context.Context, c *collective.Comm, getenv func(string) string) (*Exporters, error) {
	cfg, err := configFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	return Attach(ctx, c, cfg)
}

// Environment variables ConfigFromEnv reads, besides the OTEL_* ones that
// decide Spans.
const (
	EnvDir  = arrow.EnvDir // VCCL_TELEMETRY_DIR
	EnvAddr = live.EnvAddr // VCCL_TELEMETRY_ADDR
)

// ConfigFromEnv is the Config the environment asks for: traces in
// VCCL_TELEMETRY_DIR when it is set, in the format and with the rotation
// VCCL_TELEMETRY_FORMAT and VCCL_TELEMETRY_ARROW_ROTATE ask for; the
// window VCCL_TELEMETRY_WINDOW sizes; the live endpoint unless
// VCCL_TELEMETRY_ADDR is "off"; spans when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set or OTEL_TRACES_EXPORTER names
// an exporter (otlp, console), unless OTEL_SDK_DISABLED is true or
// OTEL_TRACES_EXPORTER is none. Its errors name the variable.
func ConfigFromEnv() (Config, error) { return configFromEnv(os.Getenv) }

func configFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{Dir: strings.TrimSpace(getenv(EnvDir)), Addr: strings.TrimSpace(getenv(EnvAddr))}
	var errs []error
	var err error
	if cfg.ArrowOptions, err = arrow.OptionsFromEnv(getenv); err != nil {
		errs = append(errs, fmt.Errorf("telemetry: %w", err))
	}
	if cfg.Window, err = flowtel.ParseWindowEnv(getenv(flowtel.EnvWindow)); err != nil {
		errs = append(errs, fmt.Errorf("telemetry: %w", err))
	}
	// Rank 0's address says whether the value parses; each rank resolves
	// its own port when it attaches.
	if _, on, err := live.AddrFromEnv(getenv, 0); err != nil {
		errs = append(errs, fmt.Errorf("telemetry: %w", err))
	} else {
		cfg.Live = on
	}
	spans, err := spansFromEnv(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Spans = spans
	cfg.SpanOptions = []otel.Option{otel.WithEnv(getenv)}
	return cfg, errors.Join(errs...)
}

// spansFromEnv reports whether the OTEL_* variables ask for spans. Unlike
// an OpenTelemetry SDK, which exports to localhost by default, it wants
// them to ask: a program that links the comm library sends nothing
// anywhere unless told to.
func spansFromEnv(getenv func(string) string) (bool, error) {
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); strings.EqualFold(v, "true") {
		return false, nil
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); v {
	case "none":
		return false, nil
	case "otlp", "console", "stdout":
		return true, nil
	case "":
	default:
		return false, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q: want otlp, console or none", v)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if strings.TrimSpace(getenv(name)) != "" {
			return true, nil
		}
	}
	return false, nil
}
