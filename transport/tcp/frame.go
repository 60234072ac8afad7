package tcp

import (
	"errors"
	"fmt"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/internal/sock"
)

// The wire format. Every frame starts with a fixed 16-byte header, little
// endian:
//
//	offset size field
//	0      1    magic 'V'
//	1      1    version (2)
//	2      1    type: 1 data, 2 credit
//	3      1    flags (data frames only): bit 0 too-large, bit 1 eager;
//	            other bits zero
//	4      4    seq: low 32 bits of the frame's index in its stream (data
//	            frames and credit frames are numbered separately from 0)
//	8      8    length
//
// A data frame's length is the message length and its payload follows the
// header, except when it is flagged too-large: then no payload follows and
// the length says how big the refused message was. An eager data frame was
// sent before its credit arrived (see the package doc); the receiver keeps
// it until the receive for it is posted. A credit frame carries no payload;
// its length is the size of the receive buffer it grants.
const (
	HeaderSize = sock.HeaderSize
	// MaxFrameLen bounds a frame's length field: a larger value is a corrupt
	// or hostile stream, not a message. It is the longest WR any backend
	// takes.
	MaxFrameLen = transport.MaxMessage
)

// ErrBadFrame is wrapped by every error DecodeHeader returns.
var ErrBadFrame = errors.New("tcp: malformed frame header")

// format is the header's shared part; version 2 added eager data frames.
var format = sock.Format{Magic: 'V', Version: 2, Size: HeaderSize, Bad: ErrBadFrame}

// FrameType says what a frame carries.
type FrameType uint8

const (
	FrameData   FrameType = 1 // a message (or its too-large notice)
	FrameCredit FrameType = 2 // one posted receive, and its size
)

func (t FrameType) String() string {
	switch t {
	case FrameData:
		return "data"
	case FrameCredit:
		return "credit"
	}
	return fmt.Sprintf("FrameType(%d)", uint8(t))
}

// FlagTooLarge marks a data frame whose message did not fit the receive its
// credit announced; the frame has no payload.
const FlagTooLarge uint8 = 1 << 0

// FlagEager marks a data frame sent ahead of its credit: the receiver may
// have no receive posted for it yet.
const FlagEager uint8 = 1 << 1

const knownFlags = FlagTooLarge | FlagEager

// Header is a decoded frame header.
type Header struct {
	Type  FrameType
	Flags uint8
	Seq   uint32
	Len   uint64
}

// PutHeader encodes h into b, which must hold HeaderSize bytes.
func PutHeader(b []byte, h Header) {
	format.Put(b, sock.Header{Type: uint8(h.Type), Flags: h.Flags, Word: h.Seq, Long: h.Len})
}

// AppendHeader appends h's encoding to dst.
func AppendHeader(dst []byte, h Header) []byte {
	var b [HeaderSize]byte
	PutHeader(b[:], h)
	return append(dst, b[:]...)
}

// DecodeHeader decodes the header at the start of b. It rejects, with an
// error wrapping ErrBadFrame, a short buffer, a wrong magic or version, an
// unknown type or flag, a flag on the wrong type and a length over
// MaxFrameLen.
func DecodeHeader(b []byte) (Header, error) {
	s, err := format.Decode(b)
	if err != nil {
		return Header{}, err
	}
	h := Header{Type: FrameType(s.Type), Flags: s.Flags, Seq: s.Word, Len: s.Long}
	switch h.Type {
	case FrameData:
		if h.Flags&^knownFlags != 0 {
			return Header{}, fmt.Errorf("%w: unknown flags %#02x on a data frame", ErrBadFrame, h.Flags&^knownFlags)
		}
	case FrameCredit:
		if h.Flags != 0 {
			return Header{}, fmt.Errorf("%w: flags %#02x on a credit frame", ErrBadFrame, h.Flags)
		}
	default:
		return Header{}, fmt.Errorf("%w: bad frame type %d", ErrBadFrame, b[2])
	}
	if h.Len > MaxFrameLen {
		return Header{}, fmt.Errorf("%w: %s frame length %d exceeds the maximum %d", ErrBadFrame, h.Type, h.Len, uint64(MaxFrameLen))
	}
	return h, nil
}
