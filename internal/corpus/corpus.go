// Package corpus reads the labels of the analyzer's labelled corpus
// (testdata/scenarios/gen.sh writes one label.json per run: what it
// injected, and what the analyzer must name) and scores findings against
// them. It knows findings only as (kind, rank, peer), so the analyzer's own
// tests can use it as well as the tests that generate fresh runs.
package corpus

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Label is a run's label.json.
type Label struct {
	Injected string   `json:"injected"`
	Expect   []Expect `json:"expect"` // empty: a clean run
}

// Expect is a culprit the analyzer must name: a link (Rank -> Peer) or a
// rank (Peer -1), as a finding of one of the kinds.
type Expect struct {
	Kind  string   `json:"kind,omitempty"`
	Kinds []string `json:"kinds,omitempty"`
	Rank  int32    `json:"rank"`
	Peer  int32    `json:"peer"`
}

// AnyOf returns the kinds the expectation accepts.
func (e Expect) AnyOf() []string {
	if e.Kind != "" {
		return append([]string{e.Kind}, e.Kinds...)
	}
	return e.Kinds
}

// Names reports whether a finding of kind naming rank and peer is this
// culprit: its kind, or its culprit alone (kindOK false).
func (e Expect) Names(kind string, rank, peer int32) (culprit, kindOK bool) {
	culprit = e.Rank == rank && e.Peer == peer
	return culprit, culprit && slices.Contains(e.AnyOf(), kind)
}

// ReadLabel reads dir/label.json.
func ReadLabel(dir string) (Label, error) {
	var l Label
	b, err := os.ReadFile(filepath.Join(dir, "label.json"))
	if err != nil {
		return l, err
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return l, fmt.Errorf("%s: %w", filepath.Join(dir, "label.json"), err)
	}
	for _, e := range l.Expect {
		if len(e.AnyOf()) == 0 {
			return l, fmt.Errorf("%s: an expectation with no kind", dir)
		}
	}
	return l, nil
}

// Found is a finding as the score sees it.
type Found struct {
	Kind       string
	Rank, Peer int32
}

// Score is how a run's findings meet its label.
type Score struct {
	Hit       []bool  // by expectation: named with an accepted kind
	WrongKind []Found // findings naming an expected culprit with another kind
	Extra     []Found // findings naming no expected culprit
}

// Judge scores findings against l.
func Judge(l Label, fs []Found) Score {
	s := Score{Hit: make([]bool, len(l.Expect))}
	for _, f := range fs {
		culprit := false
		for i, e := range l.Expect {
			c, ok := e.Names(f.Kind, f.Rank, f.Peer)
			culprit = culprit || c
			if ok {
				s.Hit[i] = true
			}
		}
		switch {
		case !culprit:
			s.Extra = append(s.Extra, f)
		case !slices.ContainsFunc(l.Expect, func(e Expect) bool { _, ok := e.Names(f.Kind, f.Rank, f.Peer); return ok }):
			s.WrongKind = append(s.WrongKind, f)
		}
	}
	return s
}

// Missed returns the expectations not named.
func (s Score) Missed(l Label) []Expect {
	var out []Expect
	for i, hit := range s.Hit {
		if !hit {
			out = append(out, l.Expect[i])
		}
	}
	return out
}

// OK reports whether every culprit was named with an accepted kind and
// nothing else was named.
func (s Score) OK() bool {
	return !slices.Contains(s.Hit, false) && len(s.Extra) == 0
}
