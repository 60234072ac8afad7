package ft

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/vccl-go/vccl/transport"
)

// FuzzDecodeHeader: any bytes decode or are refused, never panic; what
// decodes re-encodes to the same 32 bytes (the format is canonical) and
// stays within the limits DecodeHeader promises.
func FuzzDecodeHeader(f *testing.F) {
	for _, h := range []Header{
		{Type: FrameHello, Aux: 1, Seq: 3},
		{Type: FrameData, Flags: FlagEnd | FlagReplay, Seq: 7, Off: 4096, Len: 1 << 20},
		{Type: FrameData, Flags: FlagTooLarge, Len: MaxMessage},
		{Type: FrameCredit, Seq: 9, Len: 64},
		{Type: FrameAck, Seq: 1 << 40},
		{Type: FrameHeartbeat, Seq: 12345},
		{Type: FrameResync, Aux: 2, Seq: 5},
		{Type: FramePathDown, Aux: 1, Seq: 2},
		{Type: FrameBye, Seq: 4},
	} {
		b := make([]byte, HeaderSize)
		PutHeader(b, h)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			return
		}
		again := make([]byte, HeaderSize)
		PutHeader(again, h)
		if !bytes.Equal(again, b[:HeaderSize]) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b[:HeaderSize], again)
		}
		if h.Type == FrameData && (h.Len > MaxMessage || h.Off+h.Len > MaxMessage) {
			t.Fatalf("a data frame of %d+%d bytes passed", h.Off, h.Len)
		}
	})
}

// FuzzQPFrames: a peer that completed the handshake and then sends any
// bytes on its primary path makes the QP fail that path (or go on), never
// panic, hang or allocate by what the bytes declare; Close ends it.
func FuzzQPFrames(f *testing.F) {
	frame := func(h Header, payload ...byte) []byte {
		b := make([]byte, HeaderSize)
		PutHeader(b, h)
		return append(b, payload...)
	}
	f.Add(frame(Header{Type: FrameHeartbeat, Seq: 1}))
	f.Add(frame(Header{Type: FrameCredit, Seq: 0, Len: 64}))
	f.Add(frame(Header{Type: FrameData, Flags: FlagEnd, Seq: 0, Len: 4}, 1, 2, 3, 4))
	f.Add(frame(Header{Type: FrameData, Flags: FlagEnd, Seq: 0, Len: MaxMessage}))
	f.Add(frame(Header{Type: FrameAck, Seq: 1 << 62}))
	f.Add(frame(Header{Type: FrameResync, Aux: 9, Seq: 1 << 50}))
	f.Add(frame(Header{Type: FramePathDown, Aux: 1 << 31, Seq: 3}))
	f.Add(append(frame(Header{Type: FrameBye, Seq: 0}), frame(Header{Type: FrameData, Len: 8})...))
	prm := Params{}
	f.Fuzz(func(t *testing.T, in []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ln, err := Backend{Params: prm}.Listen(ctx, transport.ListenConfig{Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs, _ := splitAddrs(ln.Addr())
		var conns [Paths]net.Conn
		for i := range Paths {
			c, err := net.Dial("tcp", addrs[i])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := transport.DialHandshake(ctx, c, "tok", pathKey("k", i)); err != nil {
				t.Fatal(err)
			}
			var h [HeaderSize]byte
			PutHeader(h[:], Header{Type: FrameHello, Aux: uint32(i), Seq: 1})
			c.Write(h[:])
			conns[i] = c
		}
		qp, err := ln.Accept(ctx, "k", transport.Config{Notifier: transport.NewNotifier()})
		if err != nil {
			t.Fatal(err)
		}
		qp.PostRecv(transport.WR{ID: 1, Buf: make([]byte, 64)})
		conns[0].SetWriteDeadline(time.Now().Add(time.Second))
		conns[0].Write(in)
		closed := make(chan struct{})
		go func() { qp.Close(); close(closed) }()
		select {
		case <-closed:
		case <-ctx.Done():
			t.Fatal("Close hangs after the input")
		}
	})
}
