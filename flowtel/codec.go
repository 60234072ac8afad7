package flowtel

import (
	"encoding/binary"
	"fmt"
)

// The wire form of a Record: its fields in declaration order (widest first),
// little-endian, RecordSize bytes with no padding, the same on every
// machine. Live endpoints stream records in it.

// AppendRecords appends the wire form of recs to dst.
func AppendRecords(dst []byte, recs []Record) []byte {
	for i := range recs {
		r := &recs[i]
		var b [RecordSize]byte
		le := binary.LittleEndian
		le.PutUint64(b[0:], uint64(r.TsNs))
		le.PutUint64(b[8:], r.CollSeq)
		le.PutUint64(b[16:], r.WrID)
		le.PutUint64(b[24:], r.Bytes)
		le.PutUint32(b[32:], uint32(r.Rank))
		le.PutUint32(b[36:], uint32(r.Peer))
		le.PutUint32(b[40:], r.QP)
		le.PutUint32(b[44:], r.Comm)
		le.PutUint32(b[48:], r.Depth)
		le.PutUint32(b[52:], r.Step)
		le.PutUint16(b[56:], r.Channel)
		b[58], b[59], b[60], b[61], b[62], b[63] = byte(r.Kind), byte(r.Status), byte(r.Op), byte(r.Algo), byte(r.Dtype), byte(r.Path)
		dst = append(dst, b[:]...)
	}
	return dst
}

// DecodeRecords appends the records whose wire form is b to dst. b must
// hold whole records.
func DecodeRecords(dst []Record, b []byte) ([]Record, error) {
	if len(b)%RecordSize != 0 {
		return dst, fmt.Errorf("flowtel: %d bytes are not whole %d-byte records", len(b), RecordSize)
	}
	le := binary.LittleEndian
	for ; len(b) > 0; b = b[RecordSize:] {
		dst = append(dst, Record{
			TsNs: int64(le.Uint64(b[0:])), CollSeq: le.Uint64(b[8:]), WrID: le.Uint64(b[16:]), Bytes: le.Uint64(b[24:]),
			Rank: int32(le.Uint32(b[32:])), Peer: int32(le.Uint32(b[36:])), QP: le.Uint32(b[40:]), Comm: le.Uint32(b[44:]),
			Depth: le.Uint32(b[48:]), Step: le.Uint32(b[52:]), Channel: le.Uint16(b[56:]),
			Kind: Kind(b[58]), Status: Status(b[59]), Op: Op(b[60]), Algo: Algorithm(b[61]), Dtype: Datatype(b[62]), Path: Path(b[63]),
		})
	}
	return dst, nil
}
