package ce

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

const envMailboxChild = "VCCL_CE_TEST_MAILBOX"

// TestMailboxAcrossProcesses runs the mailbox protocol of a Proc transfer
// between this process (the sender) and a child (the receiver), without a
// GPU: 100 transfers, so the slots wrap several times and each side waits
// for the other's acknowledgements before reusing a slot.
func TestMailboxAcrossProcesses(t *testing.T) {
	m, err := createMailbox(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	const transfers = 100
	cmd := exec.Command(os.Args[0], "-test.run=^TestMailboxChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envMailboxChild+"="+m.path)
	out := make(chan error, 1)
	var buf []byte
	go func() { var err error; buf, err = cmd.CombinedOutput(); out <- err }()
	w := waiter{ctx: context.Background(), timeout: 30 * time.Second}
	b := m.pair(0, 1)
	for s := uint64(1); s <= transfers; s++ {
		var reg, off, n int
		if err := w.until(func() string { return "post " + strconv.Itoa(int(s)) }, func() bool {
			var ok bool
			reg, off, n, ok = b.posted(s)
			return ok
		}); err != nil {
			t.Fatal(err)
		}
		if reg != int(s%3) || off != int(s*10) || n != int(s*7) {
			t.Fatalf("post %d: reg %d off %d bytes %d", s, reg, off, n)
		}
		atomicStore(&b.ackRdy, s)
		if s > mailSlots {
			if err := w.until(func() string { return "ackDone" }, func() bool { return atomicLoad(&b.ackDone) >= s-mailSlots }); err != nil {
				t.Fatal(err)
			}
		}
		if s == 50 {
			atomicStore(&b.bad, s)
		}
		atomicStore(&b.done, s)
	}
	if err := <-out; err != nil {
		t.Fatalf("receiver: %v\n%s", err, buf)
	}
}

// TestMailboxChild is the receiving process of TestMailboxAcrossProcesses.
func TestMailboxChild(t *testing.T) {
	path := os.Getenv(envMailboxChild)
	if path == "" {
		t.Skip("the receiver of TestMailboxAcrossProcesses")
	}
	m, err := openMailbox(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	w := waiter{ctx: context.Background(), timeout: 30 * time.Second}
	b := m.pair(0, 1)
	var next uint64 = 1 // next transfer to acknowledge
	for s := uint64(1); s <= 100; s++ {
		if s > mailSlots {
			if err := w.until(func() string { return "ackRdy" }, func() bool { return atomicLoad(&b.ackRdy) >= s-mailSlots }); err != nil {
				t.Fatal(err)
			}
		}
		b.postRecv(s, int(s%3), int(s*10), int(s*7))
		// Acknowledge the done events of transfers the sender has
		// finished, lagging behind like a receiver whose calls come later.
		for ; next+8 <= s && atomicLoad(&b.done) >= next; next++ {
			if next == 50 && atomicLoad(&b.bad) != 50 {
				t.Errorf("transfer 50 not marked bad")
			}
			atomicStore(&b.ackDone, next)
		}
	}
	for ; next <= 100; next++ {
		if err := w.until(func() string { return "done" }, func() bool { return atomicLoad(&b.done) >= next }); err != nil {
			t.Fatal(err)
		}
		atomicStore(&b.ackDone, next)
	}
}

func TestMailboxOpenChecks(t *testing.T) {
	dir := t.TempDir()
	m, err := createMailbox(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if _, err := openMailbox(m.path, 2); err == nil {
		t.Error("opened a mailbox of 3 ranks as one of 2")
	}
	if _, err := openMailbox(m.path+".missing", 3); err == nil {
		t.Error("opened a missing mailbox")
	}
	o, err := openMailbox(m.path, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	// Both mappings see each other's stores, pair by pair.
	for from := 0; from < 3; from++ {
		for to := 0; to < 3; to++ {
			atomicStore(&m.pair(from, to).done, uint64(10*from+to+1))
		}
	}
	for from := 0; from < 3; from++ {
		for to := 0; to < 3; to++ {
			if got := atomicLoad(&o.pair(from, to).done); got != uint64(10*from+to+1) {
				t.Errorf("pair %d->%d: %d", from, to, got)
			}
		}
	}
}

func TestWaiterGivesUp(t *testing.T) {
	w := waiter{ctx: context.Background(), timeout: 20 * time.Millisecond}
	err := w.until(func() string { return "nothing" }, func() bool { return false })
	if !errors.Is(err, errPeerTimeout) {
		t.Errorf("timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w = waiter{ctx: ctx}
	if err := w.until(func() string { return "nothing" }, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
