package sock

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the length of the part every socket backend's frame header
// starts with, little endian:
//
//	offset size field
//	0      1    magic (one per backend)
//	1      1    version
//	2      1    type
//	3      1    flags
//	4      4    Word
//	8      8    Long
//
// tcp's header is exactly this; ft's appends two 64-bit fields. Each
// backend's frame.go says what Word and Long mean for it.
const HeaderSize = 16

// Header is the shared part of a frame header.
type Header struct {
	Type, Flags uint8
	Word        uint32
	Long        uint64
}

// Format names one backend's frames.
type Format struct {
	Magic, Version uint8
	Size           int   // the backend's whole header, at least HeaderSize
	Bad            error // wrapped by every error Decode returns
}

// Put writes h into b.
func (f *Format) Put(b []byte, h Header) {
	_ = b[HeaderSize-1]
	b[0], b[1], b[2], b[3] = f.Magic, f.Version, h.Type, h.Flags
	binary.LittleEndian.PutUint32(b[4:8], h.Word)
	binary.LittleEndian.PutUint64(b[8:16], h.Long)
}

// Decode checks that b holds a whole header with f's magic and version,
// and decodes its shared part.
func (f *Format) Decode(b []byte) (Header, error) {
	if len(b) < f.Size || b[0] != f.Magic || b[1] != f.Version {
		return Header{}, f.badPrefix(b)
	}
	return Header{
		Type:  b[2],
		Flags: b[3],
		Word:  binary.LittleEndian.Uint32(b[4:8]),
		Long:  binary.LittleEndian.Uint64(b[8:16]),
	}, nil
}

// badPrefix is kept out of Decode so that its good path inlines into each
// backend's decoder.
func (f *Format) badPrefix(b []byte) error {
	switch {
	case len(b) < f.Size:
		return fmt.Errorf("%w: %d bytes, want %d", f.Bad, len(b), f.Size)
	case b[0] != f.Magic:
		return fmt.Errorf("%w: magic %#02x, want %#02x", f.Bad, b[0], f.Magic)
	}
	return fmt.Errorf("%w: version %d, want %d", f.Bad, b[1], f.Version)
}
