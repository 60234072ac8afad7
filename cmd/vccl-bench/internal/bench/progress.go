package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress is a one-line progress bar on stderr for long sweeps. It redraws
// in place with a carriage return, at most every interval; Clear erases it
// so that a table line written to the same terminal never mixes with it.
type Progress struct {
	mu       sync.Mutex
	w        io.Writer
	width    int
	interval time.Duration
	total    float64
	done     float64
	start    time.Time
	last     time.Time
	shown    bool
	finished bool
	label    string
}

// NewProgress returns a progress bar drawing on w.
func NewProgress(w io.Writer, label string) *Progress {
	return &Progress{w: w, width: 30, interval: 100 * time.Millisecond, label: label}
}

// Start begins a sweep of total units of work.
func (p *Progress) Start(total float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total, p.done, p.start, p.finished = total, 0, time.Now(), false
	p.drawLocked(true)
}

// Add records finished work and redraws when the interval has passed.
func (p *Progress) Add(units float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += units
	p.drawLocked(false)
}

// Draw redraws the bar now (after a Clear).
func (p *Progress) Draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawLocked(true)
}

// Clear erases the bar from its line.
func (p *Progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

// Finish erases the bar for good. It may be called more than once.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	p.finished = true
}

func (p *Progress) clearLocked() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

func (p *Progress) drawLocked(force bool) {
	if p.finished || p.total <= 0 {
		return
	}
	now := time.Now()
	if !force && now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	frac := min(max(p.done/p.total, 0), 1)
	fill := int(frac * float64(p.width))
	eta := ""
	if frac > 0.02 && frac < 1 {
		el := now.Sub(p.start)
		eta = " ETA " + (time.Duration(float64(el)/frac) - el).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s [%s%s] %3.0f%%%s", p.label, strings.Repeat("#", fill), strings.Repeat(" ", p.width-fill), frac*100, eta)
	p.shown = true
}
