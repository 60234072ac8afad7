package ui

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/vccl-go/vccl/analyzer"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// t0 is the wall time the test frames start at.
var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// fakeSource hands out the frames it is given, the last one again when
// they run out.
type fakeSource struct {
	frames []Frame
	i      int
	paused bool
	speed  float64
	closed bool
}

func (s *fakeSource) Frame() Frame {
	f := s.frames[min(s.i, len(s.frames)-1)]
	s.i++
	return f
}
func (s *fakeSource) Close() error { s.closed = true; return nil }

type fakePlayer struct{ fakeSource }

func (p *fakePlayer) SetPaused(b bool) { p.paused = b }
func (p *fakePlayer) SetSpeed(s float64) float64 {
	p.speed = min(max(s, 0.25), 64)
	return p.speed
}

// jobFrame is a 4-rank ring job at step i (bandwidth varies with i), rank 3
// down from step down on if down > 0.
func jobFrame(i, down int) Frame {
	f := Frame{Source: "live", Target: "4 endpoints", UID: "3f2a1b4c5d6e7f80", Time: t0.Add(time.Duration(i) * 100 * time.Millisecond),
		Seq: uint64(i + 1), Size: 4}
	isDown := func(r int) bool { return down > 0 && i >= down && r == 3 }
	for r := range 4 {
		rk := Rank{Rank: r, Up: true, Since: t0.Add(-90 * time.Second), Host: "node1", PID: 1000 + r, URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+r)}
		if isDown(r) {
			rk.Up, rk.Since, rk.Err = false, t0.Add(time.Duration(down)*100*time.Millisecond), "connection refused"
		}
		f.Ranks = append(f.Ranks, rk)
	}
	for r := range 4 {
		if isDown(r) {
			continue
		}
		for _, peer := range []int{(r + 1) % 4, (r + 3) % 4} {
			bw := float64(1e9 + 1e8*float64((i*(r+1)+peer)%7))
			if isDown(peer) {
				bw = 0
			}
			for _, dir := range []string{"send", "recv"} {
				f.Links = append(f.Links, Link{Rank: int32(r), Peer: int32(peer), Channel: 0, Dir: dir,
					BandwidthBps: bw, LatP50Ns: int64(12_000 + 1000*r), LatP99Ns: int64(35_000 + 5000*((i+r)%5)),
					Backlog: uint32((i + r) % 4), PendingWRs: (i + r) % 4, CreditWaitNs: int64(3_000_000 * r), WindowNs: 100_000_000,
					Completions: 1024, Bytes: 1 << 30})
			}
		}
	}
	f.Colls = []Coll{
		{Op: "allreduce", Calls: uint64(812 * (i + 1)), PerSec: 812, BusBWBps: 1.23e9, AlgBWBps: 0.82e9, AvgTimeNs: 1_200_000, SkewNs: 120_000},
		{Op: "allgather", Calls: uint64(40 * (i + 1)), PerSec: 40, BusBWBps: 0.95e9, AlgBWBps: 1.27e9, AvgTimeNs: 3_400_000, SkewNs: 80_000},
	}
	f.Findings = []Finding{
		{Seen: t0.Add(-5 * time.Second), Finding: analyzer.Finding{Kind: analyzer.KindBackpressure, Severity: analyzer.SeverityCritical,
			Rank: 2, Peer: 3, Channel: 0, ImpactNs: 420_000_000,
			Summary: "link 2->3 ch0 backs up: 12 WRs outstanding, credit waits 38% of the time, rate down 61%"}},
		{Seen: t0.Add(-20 * time.Second), Finding: analyzer.Finding{Kind: analyzer.KindStraggler, Severity: analyzer.SeverityWarning,
			Rank: 1, Peer: -1, Channel: -1, ImpactNs: 30_000_000, Summary: "rank 1 arrives 2.1ms late at 212 of 230 allreduces"}},
		{Seen: t0.Add(-60 * time.Second), Finding: analyzer.Finding{Kind: analyzer.KindSlowLink, Severity: analyzer.SeverityInfo,
			Rank: 0, Peer: 1, Channel: 0, ImpactNs: 2_000_000, Summary: "link 0->1 ch0 runs at 0.6 of its peers' bandwidth"}},
	}
	return f
}

func newTestModel(src Source, w, h int) Model {
	m := New(src, Options{})
	mm, _ := m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	return mm.(Model)
}

// step feeds the model n frames from its source.
func step(t *testing.T, m Model, n int) Model {
	t.Helper()
	for range n {
		mm, cmd := m.Update(frameMsg{m.src.Frame()})
		if cmd == nil {
			t.Fatal("a frame did not re-arm the next fetch")
		}
		m = mm.(Model)
	}
	return m
}

func press(t *testing.T, m Model, keys ...string) Model {
	t.Helper()
	for _, k := range keys {
		mm, _ := m.Update(keyMsg(k))
		m = mm.(Model)
	}
	return m
}

// keyMsg makes the key press a terminal would send for k.
func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "left":
		return tea.KeyPressMsg{Code: tea.KeyLeft}
	case "right":
		return tea.KeyPressMsg{Code: tea.KeyRight}
	case "tab":
		return tea.KeyPressMsg{Code: tea.KeyTab}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	}
	r := []rune(k)[0]
	return tea.KeyPressMsg{Code: r, Text: k}
}

func golden(t *testing.T, name string, m Model) {
	t.Helper()
	got := ansi.Strip(m.Render())
	checkSize(t, got, m.width, m.height)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./ui -update to write it)", err)
	}
	if got+"\n" != string(want) {
		t.Errorf("%s differs from %s (go test ./ui -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s", name, path, t.Name(), got, want)
	}
}

// checkSize: every screen fills the terminal exactly, no line wider.
func checkSize(t *testing.T, s string, w, h int) {
	t.Helper()
	lines := strings.Split(s, "\n")
	if len(lines) != h {
		t.Errorf("%d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n != w {
			t.Errorf("line %d is %d cells wide, want %d: %q", i, n, w, l)
		}
	}
}

func TestGoldenScreens(t *testing.T) {
	frames := make([]Frame, 60)
	for i := range frames {
		frames[i] = jobFrame(i, 0)
	}
	for _, sz := range []struct{ w, h int }{{80, 24}, {120, 40}} {
		t.Run(fmt.Sprintf("%dx%d", sz.w, sz.h), func(t *testing.T) {
			suffix := fmt.Sprintf("_%dx%d", sz.w, sz.h)
			m := step(t, newTestModel(&fakeSource{frames: frames}, sz.w, sz.h), 40)
			golden(t, "overview"+suffix, m)
			golden(t, "matrix"+suffix, press(t, m, "2", "right", "down"))
			golden(t, "matrix_backlog"+suffix, press(t, m, "2", "m"))
			golden(t, "links"+suffix, press(t, m, "3"))
			golden(t, "detail"+suffix, press(t, m, "2", "enter"))
			golden(t, "findings"+suffix, press(t, m, "4"))
			golden(t, "help"+suffix, press(t, m, "?"))
		})
	}
}

func TestGoldenRankDown(t *testing.T) {
	var frames []Frame
	for i := range 30 {
		frames = append(frames, jobFrame(i, 20))
	}
	m := step(t, newTestModel(&fakeSource{frames: frames}, 80, 24), 30)
	golden(t, "rank_down_80x24", m)
	golden(t, "rank_down_matrix_80x24", press(t, m, "2"))
	golden(t, "rank_down_detail_80x24", press(t, m, "2", "down", "down", "enter")) // 2 -> 3, 3 is down
}

func TestGoldenFilterSort(t *testing.T) {
	m := step(t, newTestModel(&fakeSource{frames: []Frame{jobFrame(3, 0)}}, 80, 24), 1)
	m = press(t, m, "3", "/", "2", "-", ">")
	golden(t, "links_filtering_80x24", m)
	m = press(t, m, "enter", "s")
	golden(t, "links_filtered_sorted_80x24", m)
}

func TestGoldenGPU(t *testing.T) {
	var frames []Frame
	for i := range 20 {
		f := jobFrame(i, 0)
		for g := range 2 {
			f.GPUs = append(f.GPUs, GPU{Index: g, Name: "NVIDIA H200", UtilPct: float64(40 + 10*g), MemUtilPct: 23,
				NVLinkTxBps: float64(100e9 + 10e9*float64((i+g)%5)), NVLinkRxBps: 98e9, PCIeTxBps: 1.2e9, PCIeRxBps: 0.8e9})
		}
		frames = append(frames, f)
	}
	m := step(t, newTestModel(&fakeSource{frames: frames}, 80, 24), 20)
	if !strings.Contains(ansi.Strip(m.Render()), "5 GPU") {
		t.Error("no GPU tab with a GPU source")
	}
	golden(t, "gpu_80x24", press(t, m, "5"))
	golden(t, "gpu_120x40", press(t, step(t, newTestModel(&fakeSource{frames: frames}, 120, 40), 20), "5"))
}

func TestNoGPUTabWithoutGPUs(t *testing.T) {
	m := step(t, newTestModel(&fakeSource{frames: []Frame{jobFrame(0, 0)}}, 80, 24), 1)
	if strings.Contains(ansi.Strip(m.Render()), "GPU") {
		t.Error("a GPU tab without a GPU source")
	}
	if m = press(t, m, "5"); m.Screen() == ScreenGPU {
		t.Error("5 went to the GPU panel without a GPU source")
	}
}

func TestGoldenSmallAndWaiting(t *testing.T) {
	m := newTestModel(&fakeSource{frames: []Frame{{Source: "live", Target: "127.0.0.1:29500"}}}, 80, 24)
	golden(t, "waiting_80x24", m)
	golden(t, "too_small", newTestModel(&fakeSource{frames: []Frame{jobFrame(0, 0)}}, 30, 8))
}

func TestGoldenReplay(t *testing.T) {
	f := jobFrame(5, 0)
	f.Source, f.Target = "replay", "testdata/trace"
	f.Replay = &Replay{StartNs: 1_000_000_000, EndNs: 4_500_000_000, PosNs: 2_200_000_000, Speed: 2}
	p := &fakePlayer{fakeSource{frames: []Frame{f}}}
	m := step(t, newTestModel(p, 80, 24), 1)
	golden(t, "replay_80x24", m)
}

func TestNavigation(t *testing.T) {
	frames := []Frame{jobFrame(1, 0)}
	m := step(t, newTestModel(&fakeSource{frames: frames}, 80, 24), 1)
	if m.Screen() != ScreenOverview {
		t.Fatalf("starts on %v", m.Screen())
	}
	// Overview: rank 2, enter: the matrix on row 2; right, enter: link 2->3.
	m = press(t, m, "j", "j", "enter")
	if m.Screen() != ScreenMatrix || m.mRow != 2 {
		t.Fatalf("enter on rank 2: screen %v row %d", m.Screen(), m.mRow)
	}
	m = press(t, m, "enter") // the first peer with traffic: 1
	if m.Screen() != ScreenDetail || m.detail != (pairKey{2, 1}) {
		t.Fatalf("enter on cell: screen %v detail %v", m.Screen(), m.detail)
	}
	if m = press(t, m, "r"); m.detail != (pairKey{1, 2}) {
		t.Fatalf("r: detail %v", m.detail)
	}
	m = press(t, m, "esc")
	if m.Screen() != ScreenMatrix {
		t.Fatalf("esc from detail: %v", m.Screen())
	}
	m = press(t, m, "esc")
	if m.Screen() != ScreenOverview {
		t.Fatalf("esc from matrix: %v", m.Screen())
	}
	// Findings: newest first; enter on a link finding shows the link, on a
	// straggler the rank.
	m = press(t, m, "4")
	rows := m.rows(ScreenFindings)
	if len(rows) != 3 || rows[0].finding.Kind != analyzer.KindBackpressure || rows[2].finding.Kind != analyzer.KindSlowLink {
		t.Fatalf("findings not newest first: %+v", rows)
	}
	m = press(t, m, "enter")
	if m.Screen() != ScreenDetail || m.detail != (pairKey{2, 3}) {
		t.Fatalf("enter on finding: %v %v", m.Screen(), m.detail)
	}
	m = press(t, m, "esc", "down", "enter")
	if m.Screen() != ScreenOverview || m.sel[ScreenOverview].id != "r1" {
		t.Fatalf("enter on straggler: %v %+v", m.Screen(), m.sel[ScreenOverview])
	}
	// Tabs cycle.
	m = press(t, m, "tab")
	if m.Screen() != ScreenMatrix {
		t.Fatalf("tab: %v", m.Screen())
	}
	// q quits.
	if _, cmd := m.Update(keyMsg("q")); cmd == nil {
		t.Fatal("q returned no command")
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Fatal("q did not quit")
	}
}

func TestFilterAndSort(t *testing.T) {
	m := step(t, newTestModel(&fakeSource{frames: []Frame{jobFrame(1, 0)}}, 80, 24), 1)
	m = press(t, m, "/", "3", "enter")
	rows := m.rows(ScreenOverview)
	if len(rows) != 1 || rows[0].rank != 3 {
		t.Fatalf("filter 3: %+v", rows)
	}
	m = press(t, m, "esc")
	if len(m.rows(ScreenOverview)) != 4 {
		t.Fatal("esc did not clear the filter")
	}
	m = press(t, m, "3", "s") // links by p99
	rows = m.rows(ScreenLinks)
	for i := 1; i < len(rows); i++ {
		if rows[i].link.LatP99Ns > rows[i-1].link.LatP99Ns {
			t.Fatalf("links not by p99: %d after %d", rows[i].link.LatP99Ns, rows[i-1].link.LatP99Ns)
		}
	}
	// The selection follows its row across frames and re-sorts.
	m = press(t, m, "j", "j")
	id := m.sel[ScreenLinks].id
	m = step(t, m, 1)
	rows = m.rows(ScreenLinks)
	if rows[m.selected(ScreenLinks, rows)].id != id {
		t.Fatal("the selection did not follow its row")
	}
}

func TestPauseHoldsTheFrame(t *testing.T) {
	frames := []Frame{jobFrame(0, 0), jobFrame(1, 0), jobFrame(2, 0)}
	p := &fakePlayer{fakeSource{frames: frames}}
	m := step(t, newTestModel(p, 80, 24), 1)
	m = press(t, m, "p")
	if !p.paused {
		t.Fatal("p did not pause the player")
	}
	m = step(t, m, 2) // the model keeps fetching: it never stalls
	if m.Frame().Seq != 1 {
		t.Fatalf("paused, yet frame %d shown", m.Frame().Seq)
	}
	if !strings.Contains(ansi.Strip(m.Render()), "PAUSED") {
		t.Error("no PAUSED in the header")
	}
	m = press(t, m, "p")
	m = step(t, m, 1)
	if p.paused || m.Frame().Seq != 3 {
		t.Fatalf("resumed: paused %v frame %d", p.paused, m.Frame().Seq)
	}
	m = press(t, m, "+", "+")
	if p.speed != 4 || m.speed != 4 {
		t.Fatalf("speed %g / %g after ++", p.speed, m.speed)
	}
	m = press(t, m, "-", "-", "-", "-", "-", "-", "-")
	if p.speed != 0.25 {
		t.Fatalf("speed %g after many -", p.speed)
	}
}

func TestResize(t *testing.T) {
	m := step(t, newTestModel(&fakeSource{frames: []Frame{jobFrame(1, 0)}}, 80, 24), 1)
	for _, sz := range [][2]int{{100, 30}, {80, 24}, {200, 60}, {41, 10}, {30, 5}} {
		mm, _ := m.Update(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
		m = mm.(Model)
		for _, scr := range []string{"1", "2", "3", "4"} {
			m = press(t, m, scr)
			out := ansi.Strip(m.Render())
			if sz[0] >= minWidth && sz[1] >= minHeight {
				checkSize(t, out, sz[0], sz[1])
			} else if !strings.Contains(out, "too small") {
				t.Errorf("%dx%d: %q", sz[0], sz[1], out)
			}
		}
	}
}

func TestBigJobFits(t *testing.T) {
	// 64 ranks: the matrix scrolls with the cursor, the rank list too.
	f := Frame{Source: "live", Time: t0, Size: 64}
	for r := range 64 {
		f.Ranks = append(f.Ranks, Rank{Rank: r, Up: r != 40, Since: t0})
		f.Links = append(f.Links, Link{Rank: int32(r), Peer: int32((r + 1) % 64), Dir: "send", BandwidthBps: float64(r+1) * 1e8})
	}
	m := step(t, newTestModel(&fakeSource{frames: []Frame{f}}, 80, 24), 1)
	m = press(t, m, "G")
	if s := ansi.Strip(m.Render()); !strings.Contains(s, "  63 ") {
		t.Errorf("end of the rank list not shown:\n%s", s)
	}
	m = press(t, m, "2")
	for range 50 {
		m = press(t, m, "down", "right")
	}
	out := ansi.Strip(m.Render())
	checkSize(t, out, 80, 24)
	if !strings.Contains(out, "50 → 51: 5.10 GB/s") || !strings.Contains(out, "[5.1G]") {
		t.Errorf("matrix cursor not shown at 50,51:\n%s", out)
	}
}

func TestSparkline(t *testing.T) {
	if got := Sparkline([]float64{0, 1, 2, 4, 8}, 7); got != "   ▁▂▄█" {
		t.Errorf("Sparkline = %q", got)
	}
	if got := Sparkline([]float64{1, 2, 3}, 2); got != "▆█" {
		t.Errorf("Sparkline cut = %q", got)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{FormatBps(0), "0 B/s"}, {FormatBps(1.234e9), "1.23 GB/s"}, {FormatBps(812e3), "812 kB/s"}, {FormatBps(45.6e6), "45.6 MB/s"},
		{FormatNs(850), "850ns"}, {FormatNs(12_300), "12µs"}, {FormatNs(1_500_000), "1.5ms"}, {FormatNs(2e9), "2.0s"},
		{shortBps(1.2e9), "1.2G"}, {shortBps(812e6), "812M"}, {shortBps(0), "0"},
		{FormatBytes(40 << 30), "40.0 GiB"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
