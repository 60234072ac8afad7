package capi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/gpu/cuda"
)

func TestUniqueID(t *testing.T) {
	id, err := GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	addr, token, err := id.decode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") || len(token) != idTokenLen {
		t.Errorf("id decodes to %q, token of %d bytes", addr, len(token))
	}
	// The store serves until the last communicator made from it goes.
	holdServer(addr)
	releaseServer(addr)
	servers.Lock()
	_, still := servers.m[addr]
	servers.Unlock()
	if still {
		t.Error("the store outlived its last communicator")
	}
	var junk UniqueID
	copy(junk[:], "not an id")
	if _, _, err := junk.decode(); Code(err) != InvalidArgument {
		t.Errorf("junk id: %v", err)
	}
	if _, err := Pending(2, junk, 0, 0); Code(err) != InvalidArgument {
		t.Errorf("Pending with a junk id: %v", err)
	}
	if _, err := Pending(2, id, 2, 0); Code(err) != InvalidArgument {
		t.Errorf("rank 2 of 2: %v", err)
	}
}

// Without a GPU a communicator is refused with InvalidUsage and a message
// that says why, at once: no peer is waited for.
func TestNoGPU(t *testing.T) {
	if cuda.Available() {
		t.Skip("a GPU is here")
	}
	id, err := GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = InitRank(2, id, 0, 0)
	if Code(err) != InvalidUsage || !strings.Contains(err.Error(), "GPU") {
		t.Errorf("InitRank without a GPU: %v (%v)", err, Code(err))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if _, err := InitAll([]int{0, 0}); Code(err) != InvalidUsage {
		t.Errorf("InitAll without a GPU: %v", err)
	}
	if _, err := CurrentDevice(); Code(err) != InvalidUsage {
		t.Errorf("CurrentDevice without a GPU: %v", err)
	}
}

func TestCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Result
	}{
		{nil, Success},
		{fmt.Errorf("x: %w", cuda.ErrNoDriver), InvalidUsage},
		{&cuda.Error{Call: "cuMemAlloc_v2", Code: cuda.ErrorOutOfMemory}, UnhandledCudaError},
		{fmt.Errorf("waiting: %w", context.Canceled), RemoteError},
		{&collective.PeerFailedError{Rank: 1, Cause: errors.New("gone")}, RemoteError},
		{errorf(InvalidArgument, "x"), InvalidArgument},
		{fmt.Errorf("wrapped: %w", errorf(RemoteError, "x")), RemoteError},
		{errors.New("something"), InternalError},
	} {
		if got := Code(c.err); got != c.want {
			t.Errorf("Code(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	for r := Success; r < NumResults; r++ {
		if r.String() == "unknown result code" {
			t.Errorf("result %d has no text", r)
		}
	}
}

func TestGroups(t *testing.T) {
	th := ThreadOf(-1)
	if err := th.GroupEnd(); Code(err) != InvalidUsage {
		t.Errorf("GroupEnd without GroupStart: %v", err)
	}
	th.GroupStart()
	th.GroupStart()
	if !th.InGroup() {
		t.Fatal("not in a group")
	}
	if err := th.GroupEnd(); err != nil || !th.InGroup() {
		t.Fatalf("inner GroupEnd: %v, in group %v", err, th.InGroup())
	}
	if err := th.GroupEnd(); err != nil || th.InGroup() {
		t.Fatalf("outer GroupEnd: %v, in group %v", err, th.InGroup())
	}
	if err := th.Enqueue(nil, Call{Op: collective.OpAllReduce}); Code(err) != InvalidArgument {
		t.Errorf("a call on no communicator: %v", err)
	}
	th.SetLast(errors.New("boom"))
	th.SetLast(nil)
	if th.Last() != "boom" {
		t.Errorf("last error %q", th.Last())
	}
}

// Calls are checked when they are made, as NCCL checks them.
func TestCheck(t *testing.T) {
	c := newComm(4, 1, 0)
	c.state.Store(stateReady)
	ok := Call{Op: collective.OpAllReduce, Send: 0x1000, Recv: 0x2000, Count: 8, Type: Float32, Red: Sum}
	for _, tc := range []struct {
		name string
		edit func(*Call)
		want Result
	}{
		{"fine", func(*Call) {}, Success},
		{"zero count, no buffers", func(k *Call) { k.Count, k.Send, k.Recv = 0, 0, 0 }, Success},
		{"negative count", func(k *Call) { k.Count = -1 }, InvalidArgument},
		{"datatype", func(k *Call) { k.Type = NumTypes }, InvalidArgument},
		{"reduction", func(k *Call) { k.Red = 99 }, InvalidArgument},
		{"fp8 sum", func(k *Call) { k.Type = Float8E4M3 }, InvalidUsage},
		{"fp8 all-gather", func(k *Call) { k.Op, k.Type = collective.OpAllGather, Float8E5M2 }, Success},
		{"null send", func(k *Call) { k.Send = 0 }, InvalidArgument},
		{"root", func(k *Call) { k.Op, k.Root = collective.OpBroadcast, 4 }, InvalidArgument},
		{"broadcast off the root needs no send", func(k *Call) { k.Op, k.Root, k.Send = collective.OpBroadcast, 0, 0 }, Success},
		{"reduce off the root needs no receive", func(k *Call) { k.Op, k.Root, k.Recv = collective.OpReduce, 0, 0 }, Success},
		{"peer", func(k *Call) { k.Op, k.Root = collective.OpSend, -1 }, InvalidArgument},
		{"barrier", func(k *Call) { k.Op = collective.OpBarrier }, InvalidUsage},
	} {
		k := ok
		tc.edit(&k)
		if got := Code(c.check(&k)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, c.check(&k), tc.want)
		}
	}
	op, err := c.CreatePreMulSum(Float32, 0, []byte{0, 0, 0x80, 0x3f})
	if err != nil || op < NumOps {
		t.Fatalf("CreatePreMulSum: %d %v", op, err)
	}
	k := ok
	k.Red = op
	if err := c.check(&k); err != nil {
		t.Errorf("a call with the pre-multiplied sum: %v", err)
	}
	k.Type = Float16
	if Code(c.check(&k)) != InvalidArgument {
		t.Error("a pre-multiplied sum of float32 used on float16")
	}
	if err := c.DestroyRedOp(op); err != nil {
		t.Error(err)
	}
	if Code(c.DestroyRedOp(op)) != InvalidArgument {
		t.Error("destroyed a reduction twice")
	}
	if _, err := c.CreatePreMulSum(Float32, 0, []byte{1}); Code(err) != InvalidArgument {
		t.Errorf("a host scalar of the wrong size: %v", err)
	}
	c.state.Store(stateAborted)
	if Code(c.check(&ok)) != InvalidUsage {
		t.Error("a call on an aborted communicator")
	}
}

// The watchdog fails a communicator whose peer process is gone, and its
// calls waiting on peers end (its context is cancelled).
func TestWatchdogSeesDeadPeer(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	if alive(dead) {
		t.Skipf("process %d still seen after its end", dead)
	}
	if !alive(os.Getpid()) {
		t.Fatal("this process is not seen alive")
	}
	c := newComm(2, 0, 0)
	c.state.Store(stateReady)
	c.peers = []peerID{{os.Getpid(), whereAmI()}, {dead, whereAmI()}}
	c.watchStop, c.watchDone = make(chan struct{}), make(chan struct{})
	go c.watch()
	defer c.stopWatch()
	select {
	case <-c.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("no failure 5 s after the peer's end")
	}
	e := c.AsyncError()
	if e == nil || e.Code != RemoteError || !strings.Contains(e.Error(), "rank 1") {
		t.Errorf("AsyncError = %v", e)
	}
	if Code(c.usable()) != RemoteError {
		t.Errorf("calls after the failure: %v", c.usable())
	}
}
