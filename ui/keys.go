package ui

import "charm.land/bubbles/v2/key"

// keyMap is every key vccl-top takes.
type keyMap struct {
	Up, Down, Left, Right, PageUp, PageDown, Home, End               key.Binding
	Enter, Back, NextTab, PrevTab, Tab1, Tab2, Tab3, Tab4, Tab5      key.Binding
	Filter, Sort, Pause, Metric, Reverse, Faster, Slower, Help, Quit key.Binding
}

func newKeyMap() keyMap {
	b := func(help, desc string, keys ...string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
	}
	return keyMap{
		Up:       b("↑/k", "up", "up", "k"),
		Down:     b("↓/j", "down", "down", "j"),
		Left:     b("←/h", "left", "left", "h"),
		Right:    b("→/l", "right", "right", "l"),
		PageUp:   b("pgup", "page up", "pgup", "ctrl+b"),
		PageDown: b("pgdn", "page down", "pgdown", "ctrl+f", "space"),
		Home:     b("g/home", "first", "home", "g"),
		End:      b("G/end", "last", "end", "G"),
		Enter:    b("enter", "drill down", "enter"),
		Back:     b("esc", "back", "esc", "backspace"),
		NextTab:  b("tab", "next screen", "tab"),
		PrevTab:  b("shift+tab", "previous screen", "shift+tab"),
		Tab1:     b("1", "overview", "1"),
		Tab2:     b("2", "matrix", "2"),
		Tab3:     b("3", "links", "3"),
		Tab4:     b("4", "findings", "4"),
		Tab5:     b("5", "GPUs", "5"),
		Filter:   b("/", "filter", "/"),
		Sort:     b("s", "sort", "s"),
		Pause:    b("p", "pause", "p"),
		Metric:   b("m", "bandwidth/backlog", "m"),
		Reverse:  b("r", "other direction", "r"),
		Faster:   b("+", "replay faster", "+", "="),
		Slower:   b("-", "replay slower", "-", "_"),
		Help:     b("?", "help", "?"),
		Quit:     b("q", "quit", "q", "ctrl+c"),
	}
}

// ShortHelp is the key line at the bottom of every screen.
func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Up, k.Down, k.Enter, k.Back, k.Filter, k.Sort, k.Pause, k.Help, k.Quit}
}

// FullHelp is the help screen, by column.
func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Up, k.Down, k.Left, k.Right, k.PageUp, k.PageDown, k.Home, k.End},
		{k.Enter, k.Back, k.NextTab, k.PrevTab, k.Tab1, k.Tab2, k.Tab3, k.Tab4, k.Tab5},
		{k.Filter, k.Sort, k.Pause, k.Metric, k.Reverse, k.Faster, k.Slower, k.Help, k.Quit},
	}
}
