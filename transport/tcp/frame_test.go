package tcp

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Type: FrameData},
		{Type: FrameData, Seq: 1, Len: 8},
		{Type: FrameData, Flags: FlagTooLarge, Seq: 1<<32 - 1, Len: 4 << 20},
		{Type: FrameData, Len: MaxFrameLen},
		{Type: FrameCredit, Seq: 7, Len: 0},
		{Type: FrameCredit, Seq: 12345, Len: 1 << 30},
	} {
		b := AppendHeader(nil, h)
		if len(b) != HeaderSize {
			t.Fatalf("%+v encodes to %d bytes, want %d", h, len(b), HeaderSize)
		}
		var p [HeaderSize]byte
		PutHeader(p[:], h)
		if !bytes.Equal(p[:], b) {
			t.Fatalf("PutHeader and AppendHeader disagree for %+v", h)
		}
		got, err := DecodeHeader(append(b, 0xff, 0xee)) // trailing bytes are the next frame's
		if err != nil || got != h {
			t.Fatalf("DecodeHeader(%x) = %+v, %v; want %+v", b, got, err, h)
		}
	}
}

func TestHeaderLayout(t *testing.T) {
	b := AppendHeader(nil, Header{Type: FrameCredit, Seq: 0x04030201, Len: 0x0c0b0a0908070605})
	want := []byte{'V', 2, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if !bytes.Equal(b, want) {
		t.Fatalf("header bytes %v, want %v", b, want)
	}
}

func TestDecodeHeaderRejects(t *testing.T) {
	good := func() []byte { return AppendHeader(nil, Header{Type: FrameData, Seq: 3, Len: 100}) }
	with := func(i int, v byte) []byte { b := good(); b[i] = v; return b }
	withLen := func(n uint64) []byte { return AppendHeader(nil, Header{Type: FrameData, Len: n}) }
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "0 bytes, want 16"},
		{"short", good()[:15], "15 bytes, want 16"},
		{"magic", with(0, 'X'), "magic"},
		{"version", with(1, 1), "version 1"},
		{"type zero", with(2, 0), "bad frame type 0"},
		{"type unknown", with(2, 9), "bad frame type 9"},
		{"unknown flag", with(3, 0x80), "unknown flags 0x80"},
		{"flag on credit", AppendHeader(nil, Header{Type: FrameCredit, Flags: FlagTooLarge}), "flags 0x01 on a credit frame"},
		{"absurd length", withLen(MaxFrameLen + 1), "exceeds the maximum"},
		{"max uint64 length", withLen(^uint64(0)), "exceeds the maximum"},
		{"absurd credit", AppendHeader(nil, Header{Type: FrameCredit, Len: 1 << 60}), "credit frame length"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := DecodeHeader(tc.in)
			if err == nil {
				t.Fatalf("DecodeHeader(%x) = %+v, want an error", tc.in, h)
			}
			if !errors.Is(err, ErrBadFrame) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want ErrBadFrame mentioning %q", err, tc.want)
			}
		})
	}
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(AppendHeader(nil, Header{Type: FrameData, Seq: 1, Len: 8}))
	f.Add(AppendHeader(nil, Header{Type: FrameData, Flags: FlagTooLarge, Len: 1 << 20}))
	f.Add(AppendHeader(nil, Header{Type: FrameCredit, Seq: 9, Len: 4096}))
	f.Add([]byte("VCCL\x01garbage!!!"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		if h.Type != FrameData && h.Type != FrameCredit {
			t.Fatalf("accepted type %d", h.Type)
		}
		if h.Len > MaxFrameLen {
			t.Fatalf("accepted length %d", h.Len)
		}
		if h.Type == FrameCredit && h.Flags != 0 || h.Flags&^knownFlags != 0 {
			t.Fatalf("accepted flags %#x on %s", h.Flags, h.Type)
		}
		// A header that decodes re-encodes to the same bytes.
		if re := AppendHeader(nil, h); !bytes.Equal(re, b[:HeaderSize]) {
			t.Fatalf("re-encoded %x, decoded from %x", re, b[:HeaderSize])
		}
	})
}
