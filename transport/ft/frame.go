package ft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vccl-go/vccl/transport"
	"github.com/vccl-go/vccl/transport/internal/sock"
)

// The wire format. Every frame starts with a fixed 32-byte header, little
// endian:
//
//	offset size field
//	0      1    magic 'F'
//	1      1    version (1)
//	2      1    type (FrameType)
//	3      1    flags (data frames only: too-large, end, replay, ack-now)
//	4      4    aux: the path of hello and path-down, the epoch of resync
//	8      8    seq: the data sequence number of data, credit and ack
//	            frames, the generation of hello and path-down, the bytes
//	            read from this connection of a heartbeat
//	16     8    off: where a data segment starts in its message
//	24     8    len: payload length of a data segment, receive size of a
//	            credit, message length of a too-large notice
//
// Only data frames carry a payload (len bytes after the header).
const (
	HeaderSize = 32
	// MaxMessage bounds a WR's length, as in every backend.
	MaxMessage = transport.MaxMessage
)

// ErrBadFrame is wrapped by every error DecodeHeader returns.
var ErrBadFrame = errors.New("ft: malformed frame header")

// format is the header's first sock.HeaderSize bytes, laid out as tcp's.
var format = sock.Format{Magic: 'F', Version: 1, Size: HeaderSize, Bad: ErrBadFrame}

// FrameType says what a frame carries.
type FrameType uint8

const (
	FrameHello     FrameType = 1 // first frame of a connection: aux path, seq generation
	FrameData      FrameType = 2 // a segment of message seq (or its too-large notice)
	FrameCredit    FrameType = 3 // receive seq was posted; len is its size
	FrameAck       FrameType = 4 // every message below seq was delivered
	FrameHeartbeat FrameType = 5 // liveness; seq counts the bytes read from this connection
	FrameResync    FrameType = 6 // the sender's data now comes on this connection, epoch aux, from message seq
	FramePathDown  FrameType = 7 // the sender declared path aux (generation seq) dead
	FrameBye       FrameType = 8 // the sender closed the link
)

var frameNames = [...]string{"", "hello", "data", "credit", "ack", "heartbeat", "resync", "path-down", "bye"}

func (t FrameType) String() string {
	if int(t) < len(frameNames) && t != 0 {
		return frameNames[t]
	}
	return fmt.Sprintf("FrameType(%d)", uint8(t))
}

// Data frame flags.
const (
	FlagTooLarge uint8 = 1 << 0 // the message did not fit its receive: no payload, len is its size
	FlagEnd      uint8 = 1 << 1 // the last segment of its message
	FlagReplay   uint8 = 1 << 2 // a retransmission after a path change
	FlagAckNow   uint8 = 1 << 3 // the sender waits for the acknowledgement: send it at once
	knownFlags         = FlagTooLarge | FlagEnd | FlagReplay | FlagAckNow
)

// Header is a decoded frame header.
type Header struct {
	Type  FrameType
	Flags uint8
	Aux   uint32
	Seq   uint64
	Off   uint64
	Len   uint64
}

// PutHeader encodes h into b, which must hold HeaderSize bytes.
func PutHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	format.Put(b, sock.Header{Type: uint8(h.Type), Flags: h.Flags, Word: h.Aux, Long: h.Seq})
	binary.LittleEndian.PutUint64(b[16:24], h.Off)
	binary.LittleEndian.PutUint64(b[24:32], h.Len)
}

// DecodeHeader decodes the header at the start of b, rejecting a short
// buffer, a wrong magic or version, an unknown type, flags on a frame that
// takes none, and lengths beyond MaxMessage.
func DecodeHeader(b []byte) (Header, error) {
	s, err := format.Decode(b)
	if err != nil {
		return Header{}, err
	}
	h := Header{
		Type:  FrameType(s.Type),
		Flags: s.Flags,
		Aux:   s.Word,
		Seq:   s.Long,
		Off:   binary.LittleEndian.Uint64(b[16:24]),
		Len:   binary.LittleEndian.Uint64(b[24:32]),
	}
	if h.Type == 0 || int(h.Type) >= len(frameNames) {
		return Header{}, fmt.Errorf("%w: bad frame type %d", ErrBadFrame, b[2])
	}
	if h.Type == FrameData {
		if h.Flags&^knownFlags != 0 {
			return Header{}, fmt.Errorf("%w: unknown flags %#02x on a data frame", ErrBadFrame, h.Flags&^knownFlags)
		}
		if h.Off > MaxMessage || h.Len > MaxMessage || h.Off+h.Len > MaxMessage {
			return Header{}, fmt.Errorf("%w: data segment %d+%d beyond the maximum message of %d bytes", ErrBadFrame, h.Off, h.Len, uint64(MaxMessage))
		}
	} else if h.Flags != 0 {
		return Header{}, fmt.Errorf("%w: flags %#02x on a %s frame", ErrBadFrame, h.Flags, h.Type)
	}
	if h.Type == FrameCredit && h.Len > MaxMessage {
		return Header{}, fmt.Errorf("%w: credit of %d bytes beyond the maximum message", ErrBadFrame, h.Len)
	}
	return h, nil
}
