package jobauth

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestIsLoopback(t *testing.T) {
	ctx := context.Background()
	for addr, want := range map[string]bool{
		"127.0.0.1:29500": true, "[::1]:1": true, "localhost:80": true, "127.5.5.5": true,
		"@vccl-shm-1-2-ab": true, "/tmp/sock": true, "127.0.0.1:1,127.0.0.1:2": true,
		"10.0.0.1:29500": false, ":29500": false, "0.0.0.0:1": false, "192.0.2.1": false,
		"127.0.0.1:1,10.0.0.2:2": false, "no-such-host.invalid:1": false,
	} {
		if got := IsLoopback(ctx, addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// Proofs differ by key, role and every part, and parts cannot be shifted
// from one to the next.
func TestProof(t *testing.T) {
	k1, k2 := Key("a", PurposeStore), Key("a", PurposeTransport)
	if bytes.Equal(k1, k2) || bytes.Equal(k1, Key("b", PurposeStore)) {
		t.Fatal("derived keys collide")
	}
	p := Proof(k1, "r", []byte("ab"), []byte("c"))
	for _, q := range [][]byte{
		Proof(k2, "r", []byte("ab"), []byte("c")),
		Proof(k1, "s", []byte("ab"), []byte("c")),
		Proof(k1, "r", []byte("a"), []byte("bc")),
		Proof(k1, "r", []byte("abc")),
	} {
		if Equal(p, q) {
			t.Fatal("two different proofs are equal")
		}
	}
	if !Equal(p, Proof(k1, "r", []byte("ab"), []byte("c"))) || Equal(p, p[:16]) {
		t.Fatal("Equal")
	}
	if Bearer("") != "" || Bearer("x") == "" || Bearer("x") == "x" {
		t.Fatal("Bearer")
	}
}

func TestLogLimiter(t *testing.T) {
	l := LogLimiter{Interval: 50 * time.Millisecond}
	if ok, n := l.Allow(); !ok || n != 0 {
		t.Fatal("the first line is held back")
	}
	for range 10 {
		if ok, _ := l.Allow(); ok {
			t.Fatal("a line within the interval")
		}
	}
	time.Sleep(60 * time.Millisecond) // the interval under test, not a wait for a result
	if ok, n := l.Allow(); !ok || n != 10 {
		t.Fatalf("after the interval: %v, %d held back, want true, 10", ok, n)
	}
}

func TestGate(t *testing.T) {
	g := Gate{Max: 2, PerHost: 1}
	for i := range 2 {
		if !g.Slot(nil) {
			t.Fatalf("slot %d of 2 refused", i+1)
		}
	}
	done := make(chan struct{})
	close(done)
	if g.Slot(done) {
		t.Fatal("a third slot of two")
	}
	g.Free()
	if !g.Slot(done) {
		t.Fatal("a freed slot")
	}
	r, ok := g.Host("10.0.0.1:5")
	if !ok {
		t.Fatal("first of a host")
	}
	if _, ok := g.Host("10.0.0.1:6"); ok {
		t.Fatal("second of a host past PerHost 1")
	}
	if _, ok := g.Host("127.0.0.1:6"); !ok {
		t.Fatal("loopback is counted")
	}
	r()
	if _, ok := g.Host("10.0.0.1:7"); !ok {
		t.Fatal("a released host slot")
	}
}
