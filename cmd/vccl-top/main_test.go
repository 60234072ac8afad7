package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/vccl-go/vccl/gpu/nvml"
	"github.com/vccl-go/vccl/ui"
	"github.com/vccl-go/vccl/ui/source"
)

func noEnv(string) string { return "" }

func TestParse(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		err  string
	}{
		{args: nil, err: "no source"},
		{args: []string{"--dir", "a", "--replay", "b"}, err: "give one source"},
		{args: []string{"--replay", "b", "--output", "xml"}, err: "--output"},
		{args: []string{"--replay", "b", "--gpu", "maybe"}, err: "--gpu"},
		{args: []string{"--replay", "b", "--screen", "nope"}, err: "--screen"},
		{args: []string{"--replay", "b", "--speed", "0"}, err: "--speed"},
		{args: []string{"--replay", "b", "extra"}, err: "unexpected argument"},
		{args: nil, env: map[string]string{"VCCL_TELEMETRY_DIR": "/tmp/x"}},
		{args: []string{"--job", "h:1"}, env: map[string]string{"VCCL_JOB_TOKEN": "tok"}},
	} {
		getenv := func(k string) string { return c.env[k] }
		cfg, err := parse(c.args, getenv, io.Discard)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: err %v, want %q", c.args, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.err == "" && c.env["VCCL_TELEMETRY_DIR"] != "" && cfg.dir != "/tmp/x":
			t.Errorf("%v: dir %q", c.args, cfg.dir)
		case c.err == "" && c.env["VCCL_JOB_TOKEN"] != "" && cfg.token != "tok":
			t.Errorf("%v: token %q", c.args, cfg.token)
		}
	}
}

func TestOnceReplay(t *testing.T) {
	for _, output := range []string{"json", "table"} {
		cfg, err := parse([]string{"--replay", "testdata/trace", "--once", "--output", output}, noEnv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cfg.stdout = &out
		if err := runConfig(cfg); err != nil {
			t.Fatal(err)
		}
		if output == "table" {
			if s := out.String(); !strings.Contains(s, "ranks 3/4 up") || !strings.Contains(s, "allreduce") || !strings.Contains(s, "     3   down") {
				t.Errorf("table:\n%s", s)
			}
			continue
		}
		var f ui.Frame
		if err := json.Unmarshal(out.Bytes(), &f); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		if f.Source != "replay" || f.Size != 4 || f.Up() != 3 || len(f.Links) == 0 || len(f.Colls) == 0 || f.Replay == nil || !f.Replay.Done {
			t.Errorf("json frame: %+v", f)
		}
	}
}

type fakeSampler struct{}

func (fakeSampler) Devices() []nvml.Device { return []nvml.Device{{Index: 0, Name: "NVIDIA H200"}} }
func (fakeSampler) Sample() (nvml.Sample, error) {
	return nvml.Sample{GPUs: []nvml.GPU{{Index: 0, NVLinkOK: true, NVLinkTXBps: 1e11}}}, nil
}

func TestGPUWiring(t *testing.T) {
	closed := false
	ok := func() (source.Sampler, func() error, error) {
		return fakeSampler{}, func() error { closed = true; return nil }, nil
	}
	fail := func() (source.Sampler, func() error, error) { return nil, nil, nvml.ErrNoDriver }

	cfg, _ := parse([]string{"--targets", "127.0.0.1:1", "--gpu", "auto"}, noEnv, io.Discard)
	cfg.gpuOpen = ok
	src, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f := src.Frame(); len(f.GPUs) != 1 || f.GPUs[0].Name != "NVIDIA H200" {
		t.Errorf("GPUs with NVML: %+v", f.GPUs)
	}
	if _, isPlayer := src.(ui.Player); isPlayer {
		t.Error("a live source with GPUs became a Player (the model would show a replay speed)")
	}
	src.Close()
	if !closed {
		t.Error("NVML not closed with the source")
	}

	cfg.gpuOpen = fail
	if src, err = open(cfg); err != nil {
		t.Fatal(err)
	}
	if f := src.Frame(); f.GPUs != nil {
		t.Errorf("GPUs without NVML: %+v", f.GPUs)
	}
	src.Close()

	cfg.gpu = "on"
	if _, err := open(cfg); !errors.Is(err, nvml.ErrNoDriver) {
		t.Errorf("--gpu on without NVML: %v", err)
	}

	// A replay shows no GPUs: they are this host's now, not the trace's.
	cfg, _ = parse([]string{"--replay", "testdata/trace"}, noEnv, io.Discard)
	cfg.gpuOpen = ok
	if src, err = open(cfg); err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if f := src.Frame(); f.GPUs != nil {
		t.Errorf("GPUs in a replay: %+v", f.GPUs)
	}
	if _, isPlayer := src.(ui.Player); !isPlayer {
		t.Error("the replay is not a Player")
	}
}

func TestProgramGetsTheModel(t *testing.T) {
	cfg, _ := parse([]string{"--replay", "testdata/trace", "--screen", "matrix", "--gpu", "off"}, noEnv, io.Discard)
	var got ui.Model
	cfg.program = func(m tea.Model) error { got = m.(ui.Model); return nil }
	if err := runConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if got.Screen() != ui.ScreenMatrix {
		t.Errorf("first screen %v", got.Screen())
	}
}

func TestRunExitCodes(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"--output", "xml", "--replay", "x"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--output") {
		t.Errorf("bad flag: %d %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"--replay", "/nonexistent", "--once"}, io.Discard, &stderr); code != 1 {
		t.Errorf("missing trace: %d %q", code, stderr.String())
	}
	if code := run([]string{"-h"}, io.Discard, io.Discard); code != 0 {
		t.Errorf("-h: %d", code)
	}
}
