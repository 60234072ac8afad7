package analyzer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Kind is what a finding is about.
type Kind uint8

// Finding kinds, defined in the package documentation.
const (
	KindBackpressure Kind = iota + 1 // a link whose sender backs up while its rate falls (the root of a backed-up chain)
	KindHOLBlocking                  // WRs waiting behind an earlier WR on one ordered queue pair
	KindStraggler                    // a rank that arrives late at collectives
	KindSlowLink                     // a link slower than its peers in the same collectives
	KindStall                        // a link idle in the middle of a collective with nothing backed up, or a rank that did not run
	KindFailover                     // traffic moved to the backup path and back
	KindDeadRank                     // a rank whose records stop in the middle of a call while its peers go on
	kindEnd
)

var kindNames = [...]string{"", "backpressure", "hol_blocking", "straggler", "slow_link", "stall", "failover", "dead_rank"}

func (k Kind) String() string {
	if k == 0 || k >= kindEnd {
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// ParseKind returns the kind named s, as String prints it.
func ParseKind(s string) (Kind, error) {
	for k := KindBackpressure; k < kindEnd; k++ {
		if kindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("analyzer: unknown finding kind %q (want one of %s)", s, strings.Join(kindNames[1:], ", "))
}

// Kinds returns every finding kind.
func Kinds() []Kind {
	var ks []Kind
	for k := KindBackpressure; k < kindEnd; k++ {
		ks = append(ks, k)
	}
	return ks
}

func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	*k = v
	return err
}

// Severity ranks findings by how much of the job they cost.
type Severity uint8

// Severities: Impact over the analysed span of the job (see Finding).
const (
	SeverityInfo     Severity = iota // under SeverityWarningShare of the span
	SeverityWarning                  // at least SeverityWarningShare
	SeverityCritical                 // at least SeverityCriticalShare
)

// Shares of the analysed span at which a finding's Impact makes it a
// warning or critical.
const (
	SeverityWarningShare  = 0.01
	SeverityCriticalShare = 0.10
)

var severityNames = [...]string{"info", "warning", "critical"}

func (s Severity) String() string {
	if int(s) < len(severityNames) {
		return severityNames[s]
	}
	return fmt.Sprintf("severity(%d)", uint8(s))
}

// ParseSeverity returns the severity named s.
func ParseSeverity(s string) (Severity, error) {
	for i, n := range severityNames {
		if n == s {
			return Severity(i), nil
		}
	}
	return 0, fmt.Errorf("analyzer: unknown severity %q (want info, warning or critical)", s)
}

func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	*s = v
	return err
}

func severityOf(impactNs, spanNs int64) Severity {
	if spanNs <= 0 {
		return SeverityInfo
	}
	share := float64(impactNs) / float64(spanNs)
	switch {
	case share >= SeverityCriticalShare:
		return SeverityCritical
	case share >= SeverityWarningShare:
		return SeverityWarning
	}
	return SeverityInfo
}

// Finding is one diagnosis, with the numbers that support it.
//
// Rank, Peer and Channel name the culprit: for link kinds the sending rank,
// the receiving peer and the channel of the link (rank -> peer); for a
// straggler the late rank (Peer and Channel -1). Times are ns on the job's
// common time base (the records' ts_ns). Impact estimates the time the
// finding cost the job (defined per kind in the package documentation); it
// orders findings and sets Severity.
type Finding struct {
	Kind     Kind     `json:"kind"`
	Severity Severity `json:"severity"`
	ImpactNs int64    `json:"impact_ns"`
	Comm     uint32   `json:"comm"`
	Rank     int32    `json:"rank"`
	Peer     int32    `json:"peer"`    // -1: none
	Channel  int32    `json:"channel"` // -1: every channel, or none
	Path     int32    `json:"path"`    // 0 primary, 1 backup; -1: not path-specific
	StartNs  int64    `json:"start_ns"`
	EndNs    int64    `json:"end_ns"`

	// Collectives affected: their coll_seq numbers (at most
	// Options.MaxListed of them, the first ones) and how many there were.
	Collectives    []uint64 `json:"collectives"`
	NumCollectives int      `json:"num_collectives"`

	Summary  string             `json:"summary"`
	Evidence map[string]float64 `json:"evidence"`

	// Related links: for backpressure, the links upstream that backed up
	// behind this one; for a stall or slow link, what it explains; for a
	// dead rank, the ranks that stopped after it (Peer -1: a whole rank).
	Related []LinkRef `json:"related,omitempty"`

	// Head-of-line blocking: the blocking WR and (at most
	// Options.MaxListed of) the WRs blocked behind it.
	Blocking *WRRef  `json:"blocking,omitempty"`
	Blocked  []WRRef `json:"blocked,omitempty"`
}

// LinkRef names one direction of a link: rank -> peer on a channel.
type LinkRef struct {
	Rank    int32 `json:"rank"`
	Peer    int32 `json:"peer"`
	Channel int32 `json:"channel"`
}

func (l LinkRef) String() string {
	if l.Peer < 0 {
		return fmt.Sprintf("rank %d", l.Rank)
	}
	return fmt.Sprintf("%d->%d ch%d", l.Rank, l.Peer, l.Channel)
}

// WRRef identifies one work request and says how it went.
type WRRef struct {
	Rank    int32  `json:"rank"`
	Peer    int32  `json:"peer"`
	QP      uint32 `json:"qp"`
	Channel uint16 `json:"channel"`
	WrID    uint64 `json:"wr_id"`
	CollSeq uint64 `json:"coll_seq"`
	Bytes   uint64 `json:"bytes"`
	PostNs  int64  `json:"post_ns"`
	DoneNs  int64  `json:"done_ns"`
	// WaitNs: for a blocked WR, the part of its latency spent behind the
	// blocking one (from its post to the blocking WR's completion).
	WaitNs int64 `json:"wait_ns,omitempty"`
}

// LatencyNs is the WR's time from post to completion.
func (w WRRef) LatencyNs() int64 { return w.DoneNs - w.PostNs }

// Link returns the link the finding is about.
func (f *Finding) Link() LinkRef { return LinkRef{Rank: f.Rank, Peer: f.Peer, Channel: f.Channel} }

// DurationNs is EndNs - StartNs.
func (f *Finding) DurationNs() int64 { return f.EndNs - f.StartNs }

// Culprit names what the finding blames: "rank 3" or "link 2->3 ch0".
func (f *Finding) Culprit() string {
	switch {
	case f.Peer < 0 && f.Rank < 0:
		return "-"
	case f.Peer < 0:
		return fmt.Sprintf("rank %d", f.Rank)
	case f.Channel < 0:
		return fmt.Sprintf("link %d->%d", f.Rank, f.Peer)
	}
	return fmt.Sprintf("link %d->%d ch%d", f.Rank, f.Peer, f.Channel)
}

// EvidenceKeys returns the evidence names in order.
func (f *Finding) EvidenceKeys() []string {
	keys := make([]string, 0, len(f.Evidence))
	for k := range f.Evidence {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sortFindings orders findings worst first: severity, impact, then start
// time and culprit so the order is stable.
func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(b.Severity, a.Severity),
			cmp.Compare(b.ImpactNs, a.ImpactNs),
			cmp.Compare(a.StartNs, b.StartNs),
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Comm, b.Comm),
			cmp.Compare(a.Rank, b.Rank),
			cmp.Compare(a.Peer, b.Peer),
			cmp.Compare(a.Channel, b.Channel),
		)
	})
}

// MarshalJSON writes a nil Collectives as an empty list.
func (f Finding) MarshalJSON() ([]byte, error) {
	type plain Finding
	p := plain(f)
	if p.Collectives == nil {
		p.Collectives = []uint64{}
	}
	if p.Evidence == nil {
		p.Evidence = map[string]float64{}
	}
	return json.Marshal(p)
}

// collList keeps the first max coll_seq numbers added and counts them all.
type collList struct {
	seqs []uint64
	n    int
	last uint64
	have bool
}

func (c *collList) add(seq uint64, max int) {
	if c.have && seq == c.last {
		return
	}
	if slices.Contains(c.seqs, seq) {
		return
	}
	c.have, c.last = true, seq
	c.n++
	if len(c.seqs) < max {
		c.seqs = append(c.seqs, seq)
	}
}

func (c *collList) merge(o *collList, max int) {
	for _, s := range o.seqs {
		c.add(s, max)
	}
	if extra := o.n - len(o.seqs); extra > 0 {
		c.n += extra
	}
}
