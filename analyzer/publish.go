package analyzer

import (
	"context"
	"time"

	"github.com/vccl-go/vccl/flowtel"
)

// FindingsEvent is the server-sent event name under which a Publisher
// sends the findings in progress (a JSON list of Finding), as vccl-top's
// live source reads them.
const FindingsEvent = "findings"

// Publisher runs the live detectors over one rank's window while the job
// runs and publishes the findings in progress, so that whoever watches the
// rank's live endpoint (/v1/stream of exporter/live) sees the diagnosis
// without gathering every rank's windows itself. A rank's window holds its
// own links only (the sending side of its outgoing links, the receiving
// side of its incoming ones), so a Publisher judges those; vccl-top, which
// gathers every rank, also runs the detectors over all of them.
//
// A Publisher is not safe for concurrent use; Run is its loop.
type Publisher struct {
	lv      *Live
	win     *flowtel.Window
	publish func(name string, v any) error
	stats   []flowtel.LinkStats
}

// NewPublisher returns a publisher of the findings in win, through publish
// (exporter/live's Server.Publish), with opts' thresholds.
func NewPublisher(win *flowtel.Window, publish func(name string, v any) error, opts Options) (*Publisher, error) {
	lv, err := NewLive(opts, win.Config().T)
	if err != nil {
		return nil, err
	}
	return &Publisher{lv: lv, win: win, publish: publish}, nil
}

// Step judges the window now and publishes the findings in progress, if
// any (nothing is published while every link is healthy); it returns them.
func (p *Publisher) Step() ([]Finding, error) {
	now := p.win.Now()
	p.stats = p.win.AppendSnapshot(p.stats[:0], now)
	fs := p.lv.Update(now, p.stats)
	if len(fs) == 0 {
		return nil, nil
	}
	return fs, p.publish(FindingsEvent, fs)
}

// Run steps every interval until ctx ends.
func (p *Publisher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Step()
		}
	}
}

// LiveEndpoint is a rank's live endpoint as PublishLive needs it
// (exporter/live's *Server).
type LiveEndpoint interface {
	Window() *flowtel.Window
	Publish(name string, v any) error
	Go(fn func(ctx context.Context))
}

// PublishLive publishes the findings in ep's window on ep every interval
// (0: 100 ms, the endpoint's default stream rate) until ep closes.
func PublishLive(ep LiveEndpoint, opts Options, interval time.Duration) error {
	p, err := NewPublisher(ep.Window(), ep.Publish, opts)
	if err != nil {
		return err
	}
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	ep.Go(func(ctx context.Context) { p.Run(ctx, interval) })
	return nil
}
