package ui

import (
	"image/color"

	"charm.land/lipgloss/v2"
)

// Colours are given in 24-bit; Bubble Tea's renderer downsamples them to
// what the terminal takes (256 colours, 16, or none with NO_COLOR or a dumb
// terminal). Nothing on screen is told by colour alone: states are words
// (up, DOWN), the selection is reversed and marked, matrix cells carry
// their numbers.
var (
	colGood   = lipgloss.Color("#5fd75f")
	colBad    = lipgloss.Color("#ff5f5f")
	colWarn   = lipgloss.Color("#ffd75f")
	colInfo   = lipgloss.Color("#5fafff")
	colDim    = lipgloss.Color("#808080")
	colAccent = lipgloss.Color("#af87ff")
	colHeadBg = lipgloss.Color("#303a5a")
	colHeadFg = lipgloss.Color("#ffffff")
)

type styles struct {
	header, tab, tabOn, title, dim, sel, up, down, warn, crit, info, accent, key lipgloss.Style
}

func newStyles() styles {
	s := lipgloss.NewStyle()
	return styles{
		header: s.Foreground(colHeadFg).Background(colHeadBg).Bold(true),
		tab:    s.Foreground(colDim),
		tabOn:  s.Bold(true).Reverse(true),
		title:  s.Bold(true),
		dim:    s.Foreground(colDim),
		sel:    s.Reverse(true),
		up:     s.Foreground(colGood),
		down:   s.Foreground(colBad).Bold(true),
		warn:   s.Foreground(colWarn),
		crit:   s.Foreground(colBad).Bold(true),
		info:   s.Foreground(colInfo),
		accent: s.Foreground(colAccent),
		key:    s.Bold(true),
	}
}

// Heat scales: index 0 is "nothing", then rising levels.
var (
	bwHeat = []color.Color{
		lipgloss.Color("#585858"), lipgloss.Color("#005faf"), lipgloss.Color("#0087af"),
		lipgloss.Color("#00af87"), lipgloss.Color("#5fd700"), lipgloss.Color("#d7ff00"),
	}
	backlogHeat = []color.Color{
		lipgloss.Color("#585858"), lipgloss.Color("#5faf5f"), lipgloss.Color("#afd75f"),
		lipgloss.Color("#ffd75f"), lipgloss.Color("#ff8700"), lipgloss.Color("#ff0000"),
	}
)

// heatLevel maps v in [0, hi] to a level of a heat scale of n colours: 0
// for nothing, 1..n-1 rising.
func heatLevel(v, hi float64, n int) int {
	if v <= 0 || hi <= 0 {
		return 0
	}
	l := 1 + int(v/hi*float64(n-1))
	return min(max(l, 1), n-1)
}
