// Package testproc runs the real servers tests talk to (an OpenTelemetry
// Collector, a Prometheus server): it finds their binary or skips the test
// saying how to install it, starts them, waits until they answer, and stops
// them when the test ends, showing their output if it failed.
package testproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/vccl-go/vccl/internal/syncbuf"
)

// Binary returns the path of a tool's binary: env's value when set, else
// the first of paths that is an executable file, else name on PATH. Without
// one the test is skipped with install (how to get it), or fails in CI
// (CI=true), where the setup must have installed it.
func Binary(t testing.TB, name, env, install string, paths ...string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found (%s; or set %s to its path)", name, install, env)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs cmd until the test ends and waits, up to a minute, until ready
// returns nil; it fails the test if cmd exits first. It returns cmd's
// output so far and to come.
func Start(t testing.TB, cmd *exec.Cmd, ready func() error) *syncbuf.Buffer {
	t.Helper()
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", cmd.Path, logs.String())
		}
	})
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after a minute: %v\n%s", cmd.Path, err, logs.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("%s exited: %v\n%s", cmd.Path, err, logs.String())
		case <-tick.C:
		}
	}
}

// Listening is a ready func for Start: every port accepts connections on
// 127.0.0.1.
func Listening(ports ...int) func() error {
	return func() error {
		for _, p := range ports {
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second)
			if err != nil {
				return err
			}
			conn.Close()
		}
		return nil
	}
}
