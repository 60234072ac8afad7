package ui

import (
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
)

// Screen is one of vccl-top's screens.
type Screen int

// Screens, in tab order; Detail is reached from the others with enter.
const (
	ScreenOverview Screen = iota
	ScreenMatrix
	ScreenLinks
	ScreenFindings
	ScreenGPU
	ScreenDetail
	screenCount
)

var screenNames = [...]string{"Overview", "Matrix", "Links", "Findings", "GPU", "Link"}

func (s Screen) String() string { return screenNames[s] }

// DefaultInterval is how often the model takes a frame from its source:
// 10 Hz, so the link detail's sparklines move at 10 Hz.
const DefaultInterval = 100 * time.Millisecond

// historyLen is how many frames of history the sparklines keep per link.
const historyLen = 300

// maxHistoryPairs bounds the pairs of ranks whose history is kept for every
// frame; in larger jobs only the pair on the detail screen keeps one.
const maxHistoryPairs = 4096

// Options configure a Model.
type Options struct {
	// Interval between two frames (default DefaultInterval).
	Interval time.Duration
	// Screen to start on.
	Screen Screen
}

// Model is vccl-top's Bubble Tea model.
type Model struct {
	src      Source
	player   Player // src, when it replays
	interval time.Duration

	frame  Frame
	frames uint64 // frames applied
	width  int
	height int

	screen Screen
	back   []Screen // esc returns along it

	// Per list screen: the selected row (by id, and its last index), the
	// filter and the sort order.
	sel     [screenCount]selection
	filters [screenCount]string
	sorts   [screenCount]int

	// Matrix cursor (ranks), and what it colours by.
	mRow, mCol int
	mBacklog   bool

	// Link detail: the pair of ranks shown (bytes flow from -> to).
	detail pairKey

	filtering bool
	input     textinput.Model

	paused   bool
	speed    float64
	showHelp bool
	quitting bool

	hist    map[pairKey]*series
	gpuHist map[int]*series

	keys keyMap
	help help.Model
	st   styles
}

type selection struct {
	id  string
	idx int
}

// series is a link's (or a GPU's) recent history, oldest first.
type series struct {
	bw, p50, p99, backlog []float64
	last                  uint64 // frame number of the latest sample
}

func (s *series) push(frame uint64, bw float64, p50, p99 int64, backlog uint32) {
	push := func(xs []float64, v float64) []float64 {
		if len(xs) >= historyLen {
			copy(xs, xs[1:])
			xs = xs[:len(xs)-1]
		}
		return append(xs, v)
	}
	s.bw = push(s.bw, bw)
	s.p50 = push(s.p50, float64(p50))
	s.p99 = push(s.p99, float64(p99))
	s.backlog = push(s.backlog, float64(backlog))
	s.last = frame
}

// frameMsg carries a frame from the source into Update.
type frameMsg struct{ f Frame }

// New returns a model reading src.
func New(src Source, o Options) Model {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	in := textinput.New()
	in.Prompt = "/"
	in.Placeholder = "filter: words to match, e.g. 3 or down"
	in.CharLimit = 64
	m := Model{
		src:      src,
		interval: o.Interval,
		width:    80,
		height:   24,
		screen:   o.Screen,
		input:    in,
		speed:    1,
		hist:     map[pairKey]*series{},
		gpuHist:  map[int]*series{},
		keys:     newKeyMap(),
		help:     help.New(),
		st:       newStyles(),
		detail:   pairKey{0, 1},
		mCol:     1,
	}
	m.player, _ = src.(Player)
	return m
}

// Frame returns the frame the model shows.
func (m Model) Frame() Frame { return m.frame }

// Screen returns the screen the model shows.
func (m Model) Screen() Screen { return m.screen }

// fetch takes the next frame after d (at once if d is 0). The source's
// Frame returns at once, so this never waits on the job.
func (m Model) fetch(d time.Duration) tea.Cmd {
	src := m.src
	if d <= 0 {
		return func() tea.Msg { return frameMsg{src.Frame()} }
	}
	return tea.Tick(d, func(time.Time) tea.Msg { return frameMsg{src.Frame()} })
}

// Init takes the first frame.
func (m Model) Init() tea.Cmd { return m.fetch(0) }

// Update applies a message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.help.SetWidth(msg.Width)
		return m, nil
	case frameMsg:
		if !m.paused || m.frames == 0 {
			m.apply(msg.f)
		}
		return m, m.fetch(m.interval)
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	if m.filtering {
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return m, cmd
	}
	return m, nil
}

// apply makes f the frame shown and records the links' history.
func (m *Model) apply(f Frame) {
	f.Normalize()
	m.frame = f
	m.frames++
	if f.Replay != nil && f.Replay.Speed > 0 {
		m.speed = f.Replay.Speed
	}
	ps := pairs(&m.frame)
	all := len(ps) <= maxHistoryPairs
	for k, p := range ps {
		if !all && k != m.detail {
			continue
		}
		s := m.hist[k]
		if s == nil {
			s = &series{}
			m.hist[k] = s
		}
		s.push(m.frames, p.bw, p.p50, p.p99, p.backlog)
	}
	// A pair gone from the frame (its ranks died) keeps moving, at zero.
	for k, s := range m.hist {
		if s.last != m.frames {
			if _, ok := ps[k]; !ok && (all || k == m.detail) {
				s.push(m.frames, 0, 0, 0, 0)
			}
		}
	}
	for _, g := range f.GPUs {
		s := m.gpuHist[g.Index]
		if s == nil {
			s = &series{}
			m.gpuHist[g.Index] = s
		}
		s.push(m.frames, g.NVLinkTxBps+g.NVLinkRxBps, 0, 0, 0)
	}
	if m.screen == ScreenGPU && len(f.GPUs) == 0 {
		m.screen = ScreenOverview
	}
}

// tabs are the screens the tab keys cycle through: the GPU panel only with
// a GPU source.
func (m *Model) tabs() []Screen {
	ts := []Screen{ScreenOverview, ScreenMatrix, ScreenLinks, ScreenFindings}
	if len(m.frame.GPUs) > 0 {
		ts = append(ts, ScreenGPU)
	}
	return ts
}

func (m *Model) goTo(s Screen) {
	if s == m.screen {
		return
	}
	if s == ScreenGPU && len(m.frame.GPUs) == 0 {
		return
	}
	m.back = append(m.back, m.screen)
	if len(m.back) > 32 {
		m.back = m.back[1:]
	}
	m.screen = s
}

func (m Model) key(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	k := m.keys
	if m.filtering {
		switch msg.String() {
		case "enter":
			m.filtering = false
			m.input.Blur()
			m.filters[m.screen] = m.input.Value()
			return m, nil
		case "esc":
			m.filtering = false
			m.input.Blur()
			m.input.SetValue("")
			m.filters[m.screen] = ""
			return m, nil
		case "ctrl+c":
			m.quitting = true
			return m, tea.Quit
		}
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		m.filters[m.screen] = m.input.Value()
		m.sel[m.screen].idx = 0
		return m, cmd
	}
	if m.showHelp {
		switch {
		case key.Matches(msg, k.Quit):
			m.quitting = true
			return m, tea.Quit
		case key.Matches(msg, k.Help, k.Back):
			m.showHelp = false
		}
		return m, nil
	}
	switch {
	case key.Matches(msg, k.Quit):
		m.quitting = true
		return m, tea.Quit
	case key.Matches(msg, k.Help):
		m.showHelp = true
	case key.Matches(msg, k.Pause):
		m.paused = !m.paused
		if m.player != nil {
			m.player.SetPaused(m.paused)
		}
	case key.Matches(msg, k.Faster, k.Slower):
		if m.player != nil {
			s := m.speed * 2
			if key.Matches(msg, k.Slower) {
				s = m.speed / 2
			}
			m.speed = m.player.SetSpeed(s)
		}
	case key.Matches(msg, k.Filter):
		if m.screen == ScreenDetail {
			return m, nil
		}
		m.filtering = true
		m.input.SetValue(m.filters[m.screen])
		m.input.CursorEnd()
		return m, m.input.Focus()
	case key.Matches(msg, k.Back):
		switch {
		case m.filters[m.screen] != "":
			m.filters[m.screen] = ""
		case len(m.back) > 0:
			m.screen = m.back[len(m.back)-1]
			m.back = m.back[:len(m.back)-1]
		}
	case key.Matches(msg, k.Sort):
		if n := len(sortModes[m.screen]); n > 0 {
			m.sorts[m.screen] = (m.sorts[m.screen] + 1) % n
		}
	case key.Matches(msg, k.Metric):
		if m.screen == ScreenMatrix || m.screen == ScreenDetail {
			m.mBacklog = !m.mBacklog
		}
	case key.Matches(msg, k.Reverse):
		if m.screen == ScreenDetail {
			m.detail = pairKey{m.detail.to, m.detail.from}
		}
	case key.Matches(msg, k.NextTab, k.PrevTab):
		ts := m.tabs()
		i := 0
		for j, s := range ts {
			if s == m.screen {
				i = j
			}
		}
		if key.Matches(msg, k.NextTab) {
			i = (i + 1) % len(ts)
		} else {
			i = (i + len(ts) - 1) % len(ts)
		}
		m.goTo(ts[i])
	case key.Matches(msg, k.Tab1):
		m.goTo(ScreenOverview)
	case key.Matches(msg, k.Tab2):
		m.goTo(ScreenMatrix)
	case key.Matches(msg, k.Tab3):
		m.goTo(ScreenLinks)
	case key.Matches(msg, k.Tab4):
		m.goTo(ScreenFindings)
	case key.Matches(msg, k.Tab5):
		m.goTo(ScreenGPU)
	case key.Matches(msg, k.Enter):
		m.enter()
	case key.Matches(msg, k.Up):
		m.move(0, -1)
	case key.Matches(msg, k.Down):
		m.move(0, 1)
	case key.Matches(msg, k.Left):
		m.move(-1, 0)
	case key.Matches(msg, k.Right):
		m.move(1, 0)
	case key.Matches(msg, k.PageUp):
		m.move(0, -max(m.bodyHeight()-4, 1))
	case key.Matches(msg, k.PageDown):
		m.move(0, max(m.bodyHeight()-4, 1))
	case key.Matches(msg, k.Home):
		m.move(0, -1<<30)
	case key.Matches(msg, k.End):
		m.move(0, 1<<30)
	}
	return m, nil
}

// move moves the cursor of the screen shown.
func (m *Model) move(dx, dy int) {
	switch m.screen {
	case ScreenMatrix:
		ranks := m.matrixRows()
		cols := m.matrixCols()
		if len(ranks) == 0 || len(cols) == 0 {
			return
		}
		ri := clampIdx(indexOf(ranks, m.mRow)+dy, len(ranks))
		ci := clampIdx(indexOf(cols, m.mCol)+dx, len(cols))
		m.mRow, m.mCol = ranks[ri], cols[ci]
	case ScreenDetail:
	default:
		if dy == 0 {
			return
		}
		rows := m.rows(m.screen)
		if len(rows) == 0 {
			return
		}
		s := &m.sel[m.screen]
		i := clampIdx(m.selected(m.screen, rows)+dy, len(rows))
		s.idx, s.id = i, rows[i].id
	}
}

// enter drills down from the row or cell selected.
func (m *Model) enter() {
	switch m.screen {
	case ScreenOverview:
		rows := m.rows(ScreenOverview)
		if len(rows) == 0 {
			return
		}
		r := rows[m.selected(ScreenOverview, rows)].rank
		m.mRow = r
		// The column of the rank's first peer with traffic.
		m.mCol = (r + 1) % max(m.size(), 1)
		ps := pairs(&m.frame)
		for c := range m.size() {
			if _, ok := ps[pairKey{int32(r), int32(c)}]; ok && c != r {
				m.mCol = c
				break
			}
		}
		m.goTo(ScreenMatrix)
	case ScreenMatrix:
		if m.mRow == m.mCol {
			return
		}
		m.showDetail(pairKey{int32(m.mRow), int32(m.mCol)})
	case ScreenLinks:
		rows := m.rows(ScreenLinks)
		if len(rows) == 0 {
			return
		}
		l := rows[m.selected(ScreenLinks, rows)].link
		m.showDetail(pairKey{l.From(), l.To()})
	case ScreenFindings:
		rows := m.rows(ScreenFindings)
		if len(rows) == 0 {
			return
		}
		f := rows[m.selected(ScreenFindings, rows)].finding
		if f.Peer < 0 {
			// A rank, not a link: the overview, on that rank.
			m.sel[ScreenOverview] = selection{id: rankID(int(f.Rank))}
			m.filters[ScreenOverview] = ""
			m.goTo(ScreenOverview)
			return
		}
		m.showDetail(pairKey{f.Rank, f.Peer})
	}
}

func (m *Model) showDetail(p pairKey) {
	m.detail = p
	m.goTo(ScreenDetail)
}

// size is the number of ranks the frame knows.
func (m *Model) size() int {
	n := m.frame.Size
	for _, r := range m.frame.Ranks {
		n = max(n, r.Rank+1)
	}
	return n
}

func (m *Model) bodyHeight() int { return max(m.height-4, 1) }

func clampIdx(i, n int) int { return min(max(i, 0), n-1) }

func indexOf(xs []int, x int) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return 0
}
