package source

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/vccl-go/vccl/exporter/live"
)

// Bounds on what a source takes from an endpoint, a store or a trace: a
// hostile or broken one makes vccl-top refuse what it says, never allocate
// or loop beyond these.
const (
	// MaxRanks bounds the world size and rank numbers a source follows
	// (the analyzer's bound too).
	MaxRanks = 1 << 14
	// maxInfoBytes bounds a JSON answer (/v1/info, discovery).
	maxInfoBytes = 1 << 20
	// maxEventBytes bounds a line, and an event, of /v1/stream.
	maxEventBytes = 4 << 20
	// maxMetricsBytes bounds a /metrics answer, and maxSeries the series
	// of the collective metrics taken from it.
	maxMetricsBytes = 8 << 20
	maxSeries       = 1 << 16
)

// noRedirects keeps the client where discovery pointed it: an endpoint
// that redirects is not followed.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// errLongLine: a stream line longer than its bound.
var errLongLine = errors.New("a stream line longer than the bound")

// readLine reads one line (with its "\n") of at most max bytes.
func readLine(br *bufio.Reader, max int) (string, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > max {
			return "", fmt.Errorf("%w (%d bytes)", errLongLine, max)
		}
		buf = append(buf, frag...)
		switch err {
		case nil:
			return string(buf), nil
		case bufio.ErrBufferFull:
			continue
		default:
			if len(buf) > 0 && err == io.EOF {
				return string(buf), nil
			}
			return "", err
		}
	}
}

// decodeBounded decodes one JSON value of at most max bytes from r.
func decodeBounded(r io.Reader, max int64, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return err
	}
	if int64(len(b)) > max {
		return fmt.Errorf("an answer of more than %d bytes", max)
	}
	return json.Unmarshal(b, v)
}

// checkInfo refuses a /v1/info whose numbers no job has.
func checkInfo(info *live.Info) error {
	if info.Size < 0 || info.Size > MaxRanks {
		return fmt.Errorf("world size %d out of range [0, %d]", info.Size, MaxRanks)
	}
	if info.Rank < 0 || info.Rank >= MaxRanks || (info.Size > 0 && info.Rank >= info.Size) {
		return fmt.Errorf("rank %d out of range for %d ranks", info.Rank, info.Size)
	}
	return nil
}

// checkEndpointURL admits a discovered endpoint's URL only as a live
// endpoint's base: http(s)://host:port, with no credentials, path, query
// or fragment; what a store or a file names is not followed anywhere else.
func checkEndpointURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("endpoint %.100q: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("endpoint %.100q: scheme %q, want http", raw, u.Scheme)
	case u.User != nil, u.RawQuery != "", u.Fragment != "", u.Opaque != "", u.Path != "" && u.Path != "/":
		return fmt.Errorf("endpoint %.100q: want http://host:port and nothing more", raw)
	case u.Hostname() == "":
		return fmt.Errorf("endpoint %.100q: no host", raw)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("endpoint %.100q: no port", raw)
	}
	return nil
}

// collectiveMetrics are the metric families parseScrape keeps.
var collectiveMetrics = [][]byte{
	[]byte("vccl_collectives_total"),
	[]byte("vccl_bus_bandwidth_bytes_per_second"),
	[]byte("vccl_algorithm_bandwidth_bytes_per_second"),
	[]byte("vccl_collective_exec_time_seconds"),
}

// filterMetrics keeps the lines of the Prometheus text format that belong
// to the collective metrics (their samples, # HELP and # TYPE), at most
// maxSeries samples: the parser then holds those alone, whatever else an
// endpoint sends.
func filterMetrics(r io.Reader) (io.Reader, error) {
	var out bytes.Buffer
	br := bufio.NewReaderSize(r, 64<<10)
	series := 0
	for {
		line, err := readLine(br, 64<<10)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("/metrics: %w", err)
		}
		b := []byte(line)
		name, sample := b, true
		if bytes.HasPrefix(b, []byte("# HELP ")) || bytes.HasPrefix(b, []byte("# TYPE ")) {
			name, sample = b[7:], false
		} else if len(b) > 0 && b[0] == '#' {
			continue
		}
		for _, m := range collectiveMetrics {
			if bytes.HasPrefix(name, m) {
				if sample {
					if series++; series > maxSeries {
						return nil, fmt.Errorf("/metrics: more than %d series of the collective metrics", maxSeries)
					}
				}
				out.Write(b)
				if b[len(b)-1] != '\n' {
					out.WriteByte('\n')
				}
				break
			}
		}
	}
	return &out, nil
}
