//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/transporttest"
)

// Each end reads what the other wrote into its slot and published, with
// its tag; slots alternate by parity; a tag is kept for mbTags calls.
func TestMailboxExchange(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(transport.Mailboxer).Mailbox(), p.B.(transport.Mailboxer).Mailbox()
	for _, n := range []int{1, MailboxInline, MailboxInline + 1, MailboxSlot} {
		if len(a.Slot(1, n)) != n || &a.Slot(1, n)[0] == &a.Slot(2, n)[0] || &a.Slot(1, n)[0] != &a.Slot(3, n)[0] {
			t.Fatalf("slots of %d bytes are not two alternating buffers", n)
		}
	}
	if a.SlotSize() != MailboxSlot {
		t.Fatalf("SlotSize %d, want %d", a.SlotSize(), MailboxSlot)
	}
	if a.Arrived(1) || b.Arrived(1) {
		t.Fatal("call 1 arrived before anyone published it")
	}
	for k := uint32(1); k <= 3*mbTags; k++ {
		msg := patternOf(1+int(k%100), byte(k)) // in the sequence line and past it
		copy(a.Slot(k, len(msg)), msg)
		a.Publish(k, k*7)
		if !b.Arrived(k) || b.Arrived(k+1) {
			t.Fatalf("call %d: Arrived(k) %v, Arrived(k+1) %v", k, b.Arrived(k), b.Arrived(k+1))
		}
		if tag, ok := b.PeerTag(k); !ok || tag != k*7 {
			t.Fatalf("call %d: tag %d (ok %v), want %d", k, tag, ok, k*7)
		}
		// The last call's tag rides its sequence word; earlier ones
		// come from the history, later ones are not there yet.
		if tag, ok := b.PeerTag(k - 1); k > 1 && (!ok || tag != (k-1)*7) {
			t.Fatalf("call %d: the tag of call %d is %d (ok %v), want %d", k, k-1, tag, ok, (k-1)*7)
		}
		if _, ok := b.PeerTag(k + 1); ok {
			t.Fatalf("call %d: call %d has a tag before it was published", k, k+1)
		}
		if !bytes.Equal(b.PeerSlot(k, len(msg)), msg) {
			t.Fatalf("call %d: the peer's slot does not hold what was written", k)
		}
		if k > mbTags {
			if _, ok := b.PeerTag(k - mbTags); ok {
				t.Fatalf("call %d: the tag of call %d is still there", k, k-mbTags)
			}
		}
	}
}

// A side that runs ahead publishing calls with no data (collective's
// engine tickets) rewrites only the sequence words: the bytes of its last
// call in a sequence line stay for the peer still to read, with its tag.
func TestMailboxPublishKeepsInlineSlot(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(transport.Mailboxer).Mailbox(), p.B.(transport.Mailboxer).Mailbox()
	msg := patternOf(MailboxInline, 9)
	copy(a.Slot(5, len(msg)), msg)
	a.Publish(5, 77)
	for k := uint32(6); k < 10; k++ {
		a.Publish(k, 0)
	}
	if !b.Arrived(5) || !b.Arrived(9) || b.Arrived(10) {
		t.Fatalf("Arrived(5, 9, 10) = %v %v %v, want true true false", b.Arrived(5), b.Arrived(9), b.Arrived(10))
	}
	if tag, ok := b.PeerTag(5); !ok || tag != 77 {
		t.Fatalf("call 5's tag %d (ok %v), want 77", tag, ok)
	}
	if !bytes.Equal(b.PeerSlot(5, len(msg)), msg) {
		t.Fatal("publishing later calls overwrote call 5's bytes in its sequence line")
	}
}

// A call goes on in parts through the slots by turns: each part is seen
// once published and not before, its bytes with it; the call's tag stays
// readable; a peer gone on to a later call counts as arrived; and a part
// wakes a peer asleep on it, long before the sleep's timeout.
func TestMailboxParts(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(transport.Mailboxer).Mailbox(), p.B.(transport.Mailboxer).Mailbox()
	const k, tag = 7, 1<<31 | 5
	a.Publish(k, tag)
	for i := uint32(1); i <= 5; i++ {
		if b.ArrivedPart(k, i) {
			t.Fatalf("part %d arrived before it was published", i)
		}
		msg := patternOf(1000+int(i), byte(i))
		copy(a.Slot(k+i, len(msg)), msg)
		a.PublishPart(k, i)
		if !b.ArrivedPart(k, i) || !b.ArrivedPart(k, i-1) || b.ArrivedPart(k, i+1) {
			t.Fatalf("part %d: arrived %v, part %d %v, part %d %v", i, b.ArrivedPart(k, i), i-1, b.ArrivedPart(k, i-1), i+1, b.ArrivedPart(k, i+1))
		}
		if !bytes.Equal(b.PeerSlot(k+i, len(msg)), msg) {
			t.Fatalf("part %d: the slot does not hold what was written", i)
		}
		if got, ok := b.PeerTag(k); !ok || got != tag || !b.Arrived(k) || b.Arrived(k+1) {
			t.Fatalf("part %d: call %d's tag %d (ok %v), Arrived(k) %v, Arrived(k+1) %v", i, k, got, ok, b.Arrived(k), b.Arrived(k+1))
		}
	}
	a.Publish(k+1, tag)
	if !b.ArrivedPart(k, 6) || !b.ArrivedPart(k, 7) {
		t.Fatal("a peer gone on to call k+1 does not count as arrived at the parts of call k")
	}
	go func() {
		time.Sleep(20 * time.Millisecond) // let b go to sleep first
		a.PublishPart(k+1, 1)
	}()
	start := time.Now()
	for !b.ArrivedPart(k+1, 1) {
		b.SleepPart(k+1, 1, 10*time.Second)
		if time.Since(start) > 5*time.Second {
			t.Fatal("the part did not wake the sleeper")
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("woken after %v", d)
	}
}

// Sleep returns when the peer publishes, long before its timeout, and
// Err reports the peer's end once it is gone.
func TestMailboxSleepAndPeerGone(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(transport.Mailboxer).Mailbox(), p.B.(transport.Mailboxer).Mailbox()
	go func() {
		time.Sleep(20 * time.Millisecond) // let b go to sleep first
		a.Publish(1, 1)
	}()
	start := time.Now()
	for !b.Arrived(1) {
		b.Sleep(1, 10*time.Second)
		if time.Since(start) > 5*time.Second {
			t.Fatal("the publication did not wake the sleeper")
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("woken after %v", d)
	}
	if err := b.Err(); err != nil {
		t.Fatalf("Err with the peer alive: %v", err)
	}
	p.A.Close()
	deadline := time.Now().Add(5 * time.Second)
	for b.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("Err still nil 5 s after the peer closed")
		}
		b.Sleep(2, time.Millisecond)
	}
	if !errors.Is(b.Err(), transport.ErrPeerDead) {
		t.Fatalf("Err = %v, want ErrPeerDead", b.Err())
	}
	if !b.Arrived(1) {
		t.Fatal("what the peer published before it went is gone")
	}
}

// StreamSlot leaves in the slot exactly what a copy would, whatever the
// length (its non-temporal stores cover the 64-byte-aligned middle, plain
// ones the ends), and nothing past the length.
func TestMailboxStreamSlot(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(transport.Mailboxer).Mailbox(), p.B.(transport.Mailboxer).Mailbox()
	for i, n := range []int{1, 15, 16, MailboxInline, MailboxInline + 1, 63, 64, 65, 4097, 16 << 10, 48<<10 + 7, MailboxSlot} {
		k := uint32(i + 1)
		for j := range a.Slot(k, MailboxSlot) {
			a.Slot(k, MailboxSlot)[j] = 0xee
		}
		for j := range a.Slot(k, MailboxInline) {
			a.Slot(k, MailboxInline)[j] = 0xee
		}
		msg := patternOf(n, byte(k))
		a.StreamSlot(k, msg)
		a.Publish(k, 1)
		if !b.Arrived(k) {
			t.Fatalf("%d bytes: not arrived", n)
		}
		got := b.PeerSlot(k, MailboxSlot)
		if n <= MailboxInline {
			got = b.PeerSlot(k, MailboxInline)
		}
		if !bytes.Equal(got[:n], msg) {
			t.Fatalf("%d bytes: the peer's slot does not hold what was streamed", n)
		}
		if n < len(got) && got[n] != 0xee {
			t.Fatalf("%d bytes: byte %d past the end was overwritten", n, n)
		}
	}
}

// A lent call is read straight out of the lender's memory, at any offset;
// a mark left from an earlier call of the same parity is not taken for the
// next one's; a withdrawn loan, or one never made, cannot be read.
func TestMailboxLend(t *testing.T) {
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(transport.Mailboxer).Mailbox(), p.B.(transport.Mailboxer).Mailbox()
	if a.PeerReadsMine() {
		t.Fatal("the peer said it reads this end before it probed")
	}
	if !b.ReadsPeer() || !a.PeerReadsMine() {
		t.Fatalf("b reads a: %v, a sees it: %v; want both", b.ReadsPeer(), a.PeerReadsMine())
	}
	if b.PeerReadsMine() {
		t.Fatal("a said it reads b without probing")
	}
	buf := patternOf(3*MailboxSlot, 9) // larger than a slot: a loan is not bound by it
	const k = 5
	a.Lend(k, uintptr(unsafe.Pointer(&buf[0])))
	a.Publish(k, 1<<31)
	if !b.PeerLent(k) || b.PeerLent(k+2) || b.PeerLent(k+1) {
		t.Fatalf("lent: call %d %v, call %d %v, call %d %v; want only call %d", k, b.PeerLent(k), k+1, b.PeerLent(k+1), k+2, b.PeerLent(k+2), k)
	}
	got := make([]byte, len(buf))
	if err := b.ReadLent(k, got[:1000], 0); err != nil {
		t.Fatal(err)
	}
	if err := b.ReadLent(k, got[1000:], 1000); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf) {
		t.Fatal("the loan read back differs")
	}
	// Call k+2 of the same parity, not lent: its mark says so.
	a.Lend(k+2, 0)
	a.Publish(k+2, 1<<31)
	if b.PeerLent(k+2) || b.PeerLent(k) {
		t.Fatal("a call that did not lend reads as lent")
	}
	if err := b.ReadLent(k+2, got[:8], 0); err == nil {
		t.Fatal("read a call that lent nothing")
	}
	a.Lend(k+4, uintptr(unsafe.Pointer(&buf[0])))
	a.Withdraw(k + 2) // not the current loan: nothing changes
	if !b.PeerLent(k + 4) {
		t.Fatal("withdrawing an older call took back the current loan")
	}
	a.Withdraw(k + 4)
	if b.PeerLent(k+4) || b.ReadLent(k+4, got[:8], 0) == nil {
		t.Fatal("a withdrawn loan still reads")
	}
}

// An end whose probe of the peer fails says so: the peer never lends to it,
// and its reads fail.
func TestMailboxLendRefused(t *testing.T) {
	captureWarnings(t)
	cmaFault.Store(true)
	defer cmaFault.Store(false)
	p := transporttest.Connect(t, transporttest.Factory{Backend: Backend{}})
	a, b := p.A.(transport.Mailboxer).Mailbox(), p.B.(transport.Mailboxer).Mailbox()
	if b.ReadsPeer() || a.PeerReadsMine() {
		t.Fatal("an end that cannot read its peer says it can")
	}
	buf := patternOf(4096, 1)
	a.Lend(1, uintptr(unsafe.Pointer(&buf[0])))
	a.Publish(1, 1<<31)
	if err := b.ReadLent(1, make([]byte, 8), 0); err == nil {
		t.Fatal("read a loan without being able to read the peer")
	}
}
