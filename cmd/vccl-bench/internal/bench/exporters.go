package bench

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/exporter/otel"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/telemetry"
)

// scrapeEvery is how often the bench fetches its rank's /metrics: a
// Prometheus server scrapes every 15 to 60 s; once a second makes serving
// the metrics count without making it the cost measured.
const scrapeEvery = time.Second

// startExporters turns on the exporters a job has in production, through
// the telemetry package as any program gets them: Arrow traces in dir and
// the live endpoint with Prometheus metrics (as VCCL_TELEMETRY_ADDR says),
// which the bench scrapes itself, so that the sweep measures what telemetry
// costs with them attached. With spans, OpenTelemetry spans are built from
// the records, encoded and thrown away. The communicator must be made with
// collective.WithTelemetryAttachers(false) and col, which startExporters
// starts. It returns what shuts everything down, what settles the
// pipeline (every record so far delivered to every exporter and the trace
// handed to the OS: Options.Settle), and the exporters' names for the
// report. With dir "" (--attach) it attaches what the environment asks
// for, as --telemetry on does, and scrapes nothing: telemetry as a job
// turns it on, with nobody watching.
func startExporters(ctx context.Context, comm *collective.Comm, col *flowtel.Collector, dir string, spans bool) (stop, settle func(context.Context) error, names string, err error) {
	cfg, err := telemetry.ConfigFromEnv()
	if err != nil {
		return nil, nil, "", err
	}
	asked := dir == ""
	if !asked {
		cfg.Dir = dir
	}
	if spans {
		cfg.Spans, cfg.SpanOptions = true, append(cfg.SpanOptions, otel.WithProtocol("stdout"), otel.WithStdout(io.Discard))
	}
	ex, err := telemetry.Attach(ctx, comm, cfg)
	if err != nil {
		return nil, nil, "", err
	}
	col.Start()
	stopScrape := func() {}
	var list []string
	if ex.Arrow != nil {
		list = append(list, "trace ("+ex.Arrow.Format().String()+" format)")
	}
	if ex.Live != nil {
		if asked {
			list = append(list, "the live endpoint (its fold of every record, not scraped)")
		} else {
			stopScrape = scrape(ex.Live.URL() + "/metrics")
			list = append(list, "/metrics scraped every "+scrapeEvery.String())
		}
	}
	if ex.Spans != nil {
		list = append(list, "OpenTelemetry spans")
	}
	names = "exporters writing: " + strings.Join(list, ", ")
	if asked {
		names = "the exporters --telemetry on attaches: " + cmp.Or(strings.Join(list, ", "), "none (the environment asks for none)")
	}
	stop = func(ctx context.Context) error {
		stopScrape()
		// The collector first: its Shutdown finishes the trace.
		return errors.Join(col.Shutdown(ctx), ex.Close(ctx))
	}
	settle = func(ctx context.Context) error {
		if err := col.Flush(ctx); err != nil {
			return err
		}
		if ex.Arrow == nil {
			return nil
		}
		return ex.Arrow.Flush(ctx)
	}
	return stop, settle, names, nil
}

// scrape fetches url every scrapeEvery until the returned func is called
// (which waits for the last fetch). A failed fetch is not the benchmark's
// concern: the live endpoint's own tests cover it.
func scrape(url string) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	client := &http.Client{Timeout: scrapeEvery}
	go func() {
		defer close(done)
		t := time.NewTicker(scrapeEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if resp, err := client.Get(url); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}
