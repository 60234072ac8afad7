package source

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vccl-go/vccl/analyzer"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/flowtel"
	"github.com/vccl-go/vccl/ui"
)

// Endpoint is where one rank's live endpoint is reached.
type Endpoint struct {
	Rank int
	URL  string // http://host:port
}

// Discovery is what a live source knows of its job: its endpoints, and,
// when known, the communicator's id and size.
type Discovery struct {
	UID       string
	Size      int
	Endpoints []Endpoint
}

// LiveConfig configures a Live source.
type LiveConfig struct {
	// Target says what the source reads, for the header ("4 targets",
	// "dir /tmp/trace", "job 10.0.0.1:29500").
	Target string
	// Discover returns the job's endpoints. It is called at the start and
	// again, every RediscoverEvery, while ranks are missing (fewer
	// endpoints than Size, or none yet). Required.
	Discover func(ctx context.Context) (Discovery, error)
	// RediscoverEvery (default 2s).
	RediscoverEvery time.Duration
	// StaleAfter: a rank whose stream has sent nothing for this long is
	// shown down (default 1s; streams send 10 snapshots a second).
	StaleAfter time.Duration
	// StreamInterval asks the endpoints for a snapshot this often
	// (default: the endpoint's own, 100 ms).
	StreamInterval time.Duration
	// MetricsEvery is how often each rank's /metrics is read for the
	// collectives (default 1s; 0 with NoMetrics: never).
	MetricsEvery time.Duration
	NoMetrics    bool
	// Client makes the requests (default: a client of its own). Requests
	// carry their own deadlines.
	Client *http.Client
	// Now is the wall clock (default time.Now).
	Now func() time.Time
	// Analyzer configures the analysis run over the ranks' latest records
	// (the same as vccl-analyze's); NoAnalyzer turns it off.
	Analyzer   analyzer.Options
	NoAnalyzer bool
	// AnalyzeEvery is how often the records are read and judged (default
	// 500ms).
	AnalyzeEvery time.Duration
	// Bearer is presented to endpoints that ask for one (Authorization:
	// Bearer …): jobauth.Bearer of the job token.
	Bearer string
}

// Live reads the live endpoints of a job's ranks.
type Live struct {
	cfg    LiveConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	seq    atomic.Uint64

	mu       sync.Mutex
	disc     Discovery
	jobID    string // from the ranks' /v1/info, once one answered
	discErr  string
	anaErr   string
	ranks    map[int]*rankConn // by the rank asked for
	findings map[string]ui.Finding
}

// rankConn is one rank's endpoint and what it last said.
type rankConn struct {
	ep Endpoint

	// Under Live.mu.
	up     bool
	everUp bool
	since  time.Time
	err    string
	info   *live.Info
	snap   *live.Snapshot

	cursor  uint64     // the last of its records read (analyzeLoop's alone)
	metrics [2]*scrape // the latest two /metrics readings, newest first
}

// NewLive starts reading. Close stops it.
func NewLive(cfg LiveConfig) (*Live, error) {
	if cfg.Discover == nil {
		return nil, errors.New("source: a live source needs Discover")
	}
	if cfg.RediscoverEvery <= 0 {
		cfg.RediscoverEvery = 2 * time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = time.Second
	}
	if cfg.MetricsEvery <= 0 {
		cfg.MetricsEvery = time.Second
	}
	if cfg.AnalyzeEvery <= 0 {
		cfg.AnalyzeEvery = 500 * time.Millisecond
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:                  nil,
			MaxIdleConnsPerHost:    4,
			IdleConnTimeout:        30 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
		}, CheckRedirect: noRedirects}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Live{cfg: cfg, ranks: map[int]*rankConn{}, findings: map[string]ui.Finding{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(2)
	go l.discoverLoop()
	go l.analyzeLoop()
	return l, nil
}

// analyzeLoop follows every rank's latest records (/v1/records) and runs
// the analysis over the last analyzer.DefaultLiveSpan of them, every rank
// merged, every AnalyzeEvery: the analysis vccl-analyze makes of the
// trace, over the job as it runs. Its findings join those the endpoints
// publish.
func (l *Live) analyzeLoop() {
	defer l.wg.Done()
	if l.cfg.NoAnalyzer {
		return
	}
	lv, err := analyzer.NewLive(l.cfg.Analyzer, 0)
	if err != nil {
		l.mu.Lock()
		l.anaErr = err.Error()
		l.mu.Unlock()
		return
	}
	type target struct {
		rc   *rankConn
		rank int
		url  string
	}
	var buf []flowtel.Record
	for sleep(l.ctx, l.cfg.AnalyzeEvery) {
		var targets []target
		var now int64
		l.mu.Lock()
		for rank, rc := range l.ranks {
			if !rc.up {
				continue
			}
			targets = append(targets, target{rc, rank, strings.TrimRight(rc.ep.URL, "/")})
			if rc.snap != nil {
				now = max(now, rc.snap.NowNs)
			}
			if rc.info != nil && rc.info.Size > 0 {
				lv.SetWorldSize(rc.info.CommID, rc.info.Size)
				l.jobID = flowtel.JobID(rc.info.CommID)
			}
		}
		l.mu.Unlock()
		for _, t := range targets {
			var err error
			if buf, err = l.followRecords(t.rc, t.url, buf[:0]); err == nil && len(buf) > 0 {
				lv.AddFrom(t.rank, buf)
			}
		}
		if now == 0 {
			continue
		}
		fs := lv.Update(now)
		if len(fs) == 0 {
			continue
		}
		seen := l.cfg.Now()
		l.mu.Lock()
		for _, f := range fs {
			k := findingKey(&f)
			uf := ui.Finding{Finding: f, Seen: seen}
			if old, ok := l.findings[k]; ok {
				uf.Seen = old.Seen
			}
			l.findings[k] = uf
		}
		trimFindings(l.findings, maxFindings)
		l.mu.Unlock()
		l.seq.Add(1)
	}
}

// maxRecordReads bounds the /v1/records requests to one rank per analysis
// round: a rank that writes faster than that is judged on part of its
// records (the endpoint counts what was missed).
const maxRecordReads = 8

// followRecords appends to dst the records rc's endpoint has written since
// the last call, advancing rc's cursor.
func (l *Live) followRecords(rc *rankConn, base string, dst []flowtel.Record) ([]flowtel.Record, error) {
	for range maxRecordReads {
		ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
		req, err := l.newRequest(ctx, base+"/v1/records?after="+strconv.FormatUint(rc.cursor, 10))
		if err != nil {
			cancel()
			return dst, err
		}
		resp, err := l.cfg.Client.Do(req)
		if err != nil {
			cancel()
			return dst, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, live.MaxRecordsPerRead*flowtel.RecordSize+1))
		resp.Body.Close()
		cancel()
		if err != nil {
			return dst, err
		}
		if resp.StatusCode != http.StatusOK {
			return dst, fmt.Errorf("%s/v1/records: %s", base, resp.Status)
		}
		next, err := strconv.ParseUint(resp.Header.Get(live.HeaderNext), 10, 64)
		if err != nil {
			return dst, fmt.Errorf("%s/v1/records: %s %q: %v", base, live.HeaderNext, resp.Header.Get(live.HeaderNext), err)
		}
		if dst, err = flowtel.DecodeRecords(dst, body); err != nil {
			return dst, fmt.Errorf("%s/v1/records: %w", base, err)
		}
		rc.cursor = next
		if resp.Header.Get(live.HeaderPending) == "0" {
			break
		}
	}
	return dst, nil
}

func findingKey(f *analyzer.Finding) string {
	return fmt.Sprintf("%s/%d/%d/%d/%d", f.Kind, f.Rank, f.Peer, f.Channel, f.StartNs)
}

// Close stops every goroutine of the source and waits for them.
func (l *Live) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}

func (l *Live) discoverLoop() {
	defer l.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(l.ctx, max(l.cfg.RediscoverEvery*2, 5*time.Second))
		d, err := l.cfg.Discover(ctx)
		cancel()
		if err == nil && (d.Size < 0 || d.Size > MaxRanks) {
			err = fmt.Errorf("the job says it has %d ranks: more than vccl-top follows (%d)", d.Size, MaxRanks)
		}
		l.mu.Lock()
		if err != nil {
			l.discErr = err.Error()
		} else {
			l.discErr = ""
			if d.UID != "" {
				l.disc.UID = d.UID
			}
			l.disc.Size = max(l.disc.Size, d.Size)
		}
		for _, ep := range d.Endpoints {
			if ep.Rank < 0 || ep.Rank >= MaxRanks {
				continue
			}
			if rc, ok := l.ranks[ep.Rank]; ok && rc.ep.URL == ep.URL {
				continue
			} else if ok {
				// The rank moved (restarted): its old goroutine keeps
				// the old URL until it fails; the new one takes over.
				rc.ep = ep
				continue
			}
			rc := &rankConn{ep: ep, since: l.cfg.Now(), err: "connecting"}
			l.ranks[ep.Rank] = rc
			l.disc.Size = max(l.disc.Size, ep.Rank+1)
			l.wg.Add(2)
			go l.streamLoop(rc)
			go l.metricsLoop(rc)
		}
		complete := err == nil && l.disc.Size > 0 && len(l.ranks) >= l.disc.Size
		l.mu.Unlock()
		if complete {
			return
		}
		if !sleep(l.ctx, l.cfg.RediscoverEvery) {
			return
		}
	}
}

// sleep waits d or until ctx is done; false if ctx is.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// streamLoop follows the rank's /v1/stream, reconnecting with backoff.
func (l *Live) streamLoop(rc *rankConn) {
	defer l.wg.Done()
	backoff := 100 * time.Millisecond
	for l.ctx.Err() == nil {
		got, err := l.stream(rc)
		if l.ctx.Err() != nil {
			return
		}
		l.setDown(rc, err)
		if got {
			backoff = 100 * time.Millisecond
		}
		if !sleep(l.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (l *Live) url(rc *rankConn) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimRight(rc.ep.URL, "/")
}

// stream reads one connection to the rank's stream until it fails, ends or
// stays silent for StaleAfter; got says whether any event came.
func (l *Live) stream(rc *rankConn) (got bool, err error) {
	base := l.url(rc)
	ictx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
	var info live.Info
	err = l.getJSON(ictx, base+"/v1/info", &info)
	cancel()
	if err != nil {
		return false, err
	}
	if err := checkInfo(&info); err != nil {
		return false, fmt.Errorf("%s/v1/info: %w", base, err)
	}
	l.mu.Lock()
	rc.info = &info
	if info.UID != "" && l.disc.UID == "" {
		l.disc.UID = info.UID
	}
	l.disc.Size = max(l.disc.Size, info.Size)
	l.mu.Unlock()

	ctx, stop := context.WithCancelCause(l.ctx)
	defer stop(nil)
	errStale := fmt.Errorf("no data for %v", l.cfg.StaleAfter)
	watchdog := time.AfterFunc(l.cfg.StaleAfter, func() { stop(errStale) })
	defer watchdog.Stop()
	u := base + "/v1/stream"
	if l.cfg.StreamInterval > 0 {
		u += "?interval=" + l.cfg.StreamInterval.String()
	}
	req, err := l.newRequest(ctx, u)
	if err != nil {
		return false, err
	}
	resp, err := l.cfg.Client.Do(req)
	if err != nil {
		return false, causeOf(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s", u, resp.Status)
	}
	err = readEvents(resp.Body, func(name, data string) {
		watchdog.Reset(l.cfg.StaleAfter)
		if l.event(rc, name, data) {
			got = true
		}
	})
	if err == io.EOF {
		return got, errors.New("the endpoint closed its stream")
	}
	if errors.Is(err, errLongLine) {
		return got, fmt.Errorf("%s: %w", u, err)
	}
	return got, causeOf(ctx, err)
}

// readEvents reads server-sent events from r until it fails (io.EOF at its
// end), calling fn with each event's name and data; no line, and no event,
// may pass maxEventBytes.
func readEvents(r io.Reader, fn func(name, data string)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var event string
	var data strings.Builder
	for {
		line, err := readLine(br, maxEventBytes)
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data.Len() > 0 || event != "" {
				fn(event, data.String())
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			if data.Len()+len(line) > maxEventBytes {
				return fmt.Errorf("%w: an event of more than %d bytes", errLongLine, maxEventBytes)
			}
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(line[len("data:"):], " "))
		}
	}
}

// causeOf prefers the reason ctx was cancelled (the watchdog's) to the
// error the read returned because of it.
func causeOf(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return err
}

// event applies one server-sent event; true if it was data.
func (l *Live) event(rc *rankConn, name, data string) bool {
	switch name {
	case "windows":
		var s live.Snapshot
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			return false
		}
		l.mu.Lock()
		rc.snap = &s
		l.markUpLocked(rc)
		l.mu.Unlock()
		l.seq.Add(1)
		return true
	case "finding", "findings":
		fs, err := parseFindings([]byte(data))
		if err != nil {
			return false
		}
		now := l.cfg.Now()
		l.mu.Lock()
		for _, f := range fs {
			k := findingKey(&f.Finding)
			if old, ok := l.findings[k]; ok {
				f.Seen = old.Seen
			} else {
				f.Seen = now
			}
			l.findings[k] = f
		}
		trimFindings(l.findings, maxFindings)
		l.markUpLocked(rc)
		l.mu.Unlock()
		l.seq.Add(1)
		return true
	}
	return false
}

// maxFindings bounds the findings a source keeps (the oldest go first).
const maxFindings = 500

func trimFindings(m map[string]ui.Finding, n int) {
	if len(m) <= n {
		return
	}
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return m[a].Seen.Compare(m[b].Seen) })
	for _, k := range keys[:len(m)-n] {
		delete(m, k)
	}
}

// parseFindings takes one finding or a list of them, in analyzer.Finding's
// JSON.
func parseFindings(data []byte) ([]ui.Finding, error) {
	var fs []ui.Finding
	if err := json.Unmarshal(data, &fs); err == nil {
		return fs, nil
	}
	var f ui.Finding
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	return []ui.Finding{f}, nil
}

func (l *Live) markUpLocked(rc *rankConn) {
	if rc.up {
		return
	}
	rc.up, rc.since, rc.err = true, l.cfg.Now(), ""
	if !rc.everUp && rc.info != nil && rc.info.StartedUnixNs > 0 {
		// First seen: up since its endpoint started.
		rc.since = time.Unix(0, rc.info.StartedUnixNs)
	}
	rc.everUp = true
}

func (l *Live) setDown(rc *rankConn, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	msg := "unreachable"
	if err != nil {
		msg = shortErr(err)
	}
	if rc.up {
		rc.up, rc.since = false, l.cfg.Now()
		l.seq.Add(1)
	}
	if rc.err != msg {
		rc.err = msg
		l.seq.Add(1)
	}
	rc.snap = nil
}

// shortErr keeps the end of a network error that says what happened:
// "connection refused", "no data for 1s".
func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i > 6 {
		s = s[i+2:]
	}
	return s
}

func (l *Live) getJSON(ctx context.Context, url string, v any) error {
	req, err := l.newRequest(ctx, url)
	if err != nil {
		return err
	}
	resp, err := l.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return decodeBounded(resp.Body, maxInfoBytes, v)
}

// newRequest makes a GET of url, with the bearer when there is one.
func (l *Live) newRequest(ctx context.Context, url string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err == nil && l.cfg.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+l.cfg.Bearer)
	}
	return req, err
}

// metricsLoop reads the rank's /metrics for the collective counters.
func (l *Live) metricsLoop(rc *rankConn) {
	defer l.wg.Done()
	if l.cfg.NoMetrics {
		return
	}
	for {
		l.mu.Lock()
		up := rc.up
		l.mu.Unlock()
		wait := l.cfg.MetricsEvery
		if up {
			ctx, cancel := context.WithTimeout(l.ctx, max(l.cfg.MetricsEvery, time.Second))
			sc, err := l.scrape(ctx, l.url(rc)+"/metrics")
			cancel()
			if err == nil {
				l.mu.Lock()
				rc.metrics[1], rc.metrics[0] = rc.metrics[0], sc
				l.mu.Unlock()
				l.seq.Add(1)
			}
		} else {
			// Read the metrics as soon as the rank answers.
			wait = min(wait, 100*time.Millisecond)
		}
		if !sleep(l.ctx, wait) {
			return
		}
	}
}

func (l *Live) scrape(ctx context.Context, url string) (*scrape, error) {
	req, err := l.newRequest(ctx, url)
	if err != nil {
		return nil, err
	}
	resp, err := l.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseScrape(io.LimitReader(resp.Body, maxMetricsBytes), l.cfg.Now())
}

// Frame returns the job's state now.
func (l *Live) Frame() ui.Frame {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	f := ui.Frame{Source: "live", Target: l.cfg.Target, UID: l.disc.UID, JobID: l.jobID, Time: now, Seq: l.seq.Load(), Size: l.disc.Size}
	var rates []rankRates
	for _, r := range slices.Sorted(maps.Keys(l.ranks)) {
		rc := l.ranks[r]
		rk := ui.Rank{Rank: r, Up: rc.up, Since: rc.since, URL: rc.ep.URL}
		if !rc.up {
			rk.Err = rc.err
		}
		if rc.info != nil {
			// The rank the endpoint says it serves (targets are numbered
			// by their order until they answer).
			rk.Rank, rk.Host, rk.PID = rc.info.Rank, rc.info.Host, rc.info.PID
		}
		if s := rc.snap; s != nil && rc.up {
			rk.Lost = s.Lost
			for _, ln := range s.Links {
				f.Links = append(f.Links, linkOf(&ln, s.Window.TNs))
			}
		}
		if rc.up && rc.metrics[0] != nil {
			var started time.Time
			if rc.info != nil && rc.info.StartedUnixNs > 0 {
				started = time.Unix(0, rc.info.StartedUnixNs)
			}
			rates = append(rates, ratesOf(rc.metrics[0], rc.metrics[1], started))
		}
		f.Ranks = append(f.Ranks, rk)
	}
	known := map[int]bool{}
	for _, rk := range f.Ranks {
		known[rk.Rank] = true
	}
	for r := range f.Size {
		if !known[r] {
			msg := "not found yet"
			if l.discErr != "" {
				msg = l.discErr
			}
			f.Ranks = append(f.Ranks, ui.Rank{Rank: r, Err: msg})
		}
	}
	f.Colls = mergeRates(rates, f.Size)
	if l.anaErr != "" {
		f.Notes = append(f.Notes, "analyzer: "+l.anaErr)
	}
	if len(f.Colls) > 0 {
		f.Notes = append(f.Notes, "~skew: estimated from the spread of the ranks' mean execution times")
	}
	for _, fd := range l.findings {
		f.Findings = append(f.Findings, fd)
	}
	f.Normalize()
	return f
}

func linkOf(l *live.Link, windowNs int64) ui.Link {
	return ui.Link{Rank: l.Rank, Peer: l.Peer, Channel: l.Channel, Path: l.Path, Dir: l.Dir,
		BandwidthBps: l.BandwidthBps, LatP50Ns: l.LatP50Ns, LatP99Ns: l.LatP99Ns, Backlog: l.Backlog,
		PendingWRs: l.PendingWRs, CreditWaitNs: l.CreditWaitNs, CreditWaiting: l.CreditWaiting,
		Completions: l.Completions, Failed: l.Failed, Bytes: l.Bytes, WindowNs: windowNs}
}
