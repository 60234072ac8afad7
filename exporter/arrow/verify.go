package arrow

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The Arrow library decodes IPC metadata (flatbuffers) without verifying
// it: a vector length read from a malformed file sizes an allocation, which
// can exhaust memory before any check. So the reader verifies every
// flatbuffer it hands the library, as far as trace files need: every table,
// vector and string lies inside the buffer, and the schema has the shape a
// trace has (flat columns of integers, timestamps and strings, strings
// dictionary-encoded or not).

// Flatbuffer union and enum values of the Arrow IPC schema (Message.fbs,
// Schema.fbs).
const (
	fbHeaderSchema          = 1
	fbHeaderDictionaryBatch = 2
	fbHeaderRecordBatch     = 3
	fbTypeInt               = 2
	fbTypeUtf8              = 5
	fbTypeTimestamp         = 10
)

var errFlatbuffer = errors.New("malformed IPC metadata")

type fbTable struct {
	b     []byte
	pos   int // the table
	vt    int // its vtable
	vtLen int // the vtable's size in bytes
}

func fbErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errFlatbuffer, fmt.Sprintf(format, args...))
}

func (t fbTable) u32(at int) (int, error) {
	if at < 0 || at+4 > len(t.b) {
		return 0, fbErr("offset %d outside %d bytes", at, len(t.b))
	}
	return int(binary.LittleEndian.Uint32(t.b[at:])), nil
}

// fbRoot returns the root table of b.
func fbRoot(b []byte) (fbTable, error) {
	t := fbTable{b: b}
	off, err := t.u32(0)
	if err != nil {
		return t, err
	}
	return fbTableAt(b, off)
}

func fbTableAt(b []byte, pos int) (fbTable, error) {
	t := fbTable{b: b, pos: pos}
	if pos < 0 || pos+4 > len(b) || pos%4 != 0 {
		return t, fbErr("table at %d outside %d bytes", pos, len(b))
	}
	soff := int(int32(binary.LittleEndian.Uint32(b[pos:])))
	t.vt = pos - soff
	if t.vt < 0 || t.vt+4 > len(b) || t.vt%2 != 0 {
		return t, fbErr("vtable at %d outside %d bytes", t.vt, len(b))
	}
	t.vtLen = int(binary.LittleEndian.Uint16(b[t.vt:]))
	tableLen := int(binary.LittleEndian.Uint16(b[t.vt+2:]))
	if t.vtLen < 4 || t.vtLen%2 != 0 || t.vt+t.vtLen > len(b) || pos+tableLen > len(b) {
		return t, fbErr("vtable at %d: bad sizes", t.vt)
	}
	// Every field the vtable places must lie inside the table.
	for i := 4; i < t.vtLen; i += 2 {
		if o := int(binary.LittleEndian.Uint16(b[t.vt+i:])); o != 0 && (o < 4 || o >= tableLen) {
			return t, fbErr("field %d of the table at %d outside it", (i-4)/2, pos)
		}
	}
	return t, nil
}

// field returns the position of field id, or -1 if absent.
func (t fbTable) field(id int) int {
	slot := 4 + 2*id
	if slot+2 > t.vtLen {
		return -1
	}
	o := int(binary.LittleEndian.Uint16(t.b[t.vt+slot:]))
	if o == 0 {
		return -1
	}
	return t.pos + o
}

// scalar returns field id as an unsigned value of size bytes (0 if absent).
func (t fbTable) scalar(id, size int) (uint64, error) {
	at := t.field(id)
	if at < 0 {
		return 0, nil
	}
	if at+size > len(t.b) {
		return 0, fbErr("scalar at %d outside %d bytes", at, len(t.b))
	}
	switch size {
	case 1:
		return uint64(t.b[at]), nil
	case 2:
		return uint64(binary.LittleEndian.Uint16(t.b[at:])), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(t.b[at:])), nil
	}
	return binary.LittleEndian.Uint64(t.b[at:]), nil
}

// target follows the offset in field id; -1 if absent.
func (t fbTable) target(id int) (int, error) {
	at := t.field(id)
	if at < 0 {
		return -1, nil
	}
	off, err := t.u32(at)
	if err != nil {
		return 0, err
	}
	return at + off, nil
}

// sub returns the table in field id; ok false if absent.
func (t fbTable) sub(id int) (fbTable, bool, error) {
	at, err := t.target(id)
	if err != nil || at < 0 {
		return fbTable{}, false, err
	}
	s, err := fbTableAt(t.b, at)
	return s, err == nil, err
}

// vector checks the vector in field id, of elements of elem bytes, and
// returns where its elements start and how many there are (0 if absent).
func (t fbTable) vector(id, elem int) (start, n int, err error) {
	at, err := t.target(id)
	if err != nil || at < 0 {
		return 0, 0, err
	}
	n, err = t.u32(at)
	if err != nil {
		return 0, 0, err
	}
	start = at + 4
	if n > (len(t.b)-start)/elem {
		return 0, 0, fbErr("a vector of %d elements of %d bytes at %d outside %d bytes", n, elem, at, len(t.b))
	}
	return start, n, nil
}

// tables checks a vector of tables in field id and each table with check.
func (t fbTable) tables(id int, check func(fbTable) error) (int, error) {
	start, n, err := t.vector(id, 4)
	if err != nil {
		return 0, err
	}
	for i := range n {
		at := start + 4*i
		off, _ := t.u32(at)
		e, err := fbTableAt(t.b, at+off)
		if err != nil {
			return 0, err
		}
		if err := check(e); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// str checks the string in field id.
func (t fbTable) str(id int) error {
	start, n, err := t.vector(id, 1)
	if err != nil {
		return err
	}
	if n > 0 && start+n >= len(t.b) { // the terminating NUL
		return fbErr("string at %d runs to the end", start)
	}
	return nil
}

func verifyKeyValues(t fbTable, id int) error {
	_, err := t.tables(id, func(kv fbTable) error {
		if err := kv.str(0); err != nil {
			return err
		}
		return kv.str(1)
	})
	return err
}

func verifySchema(s fbTable) error {
	if err := verifyKeyValues(s, 2); err != nil {
		return err
	}
	if _, _, err := s.vector(3, 8); err != nil { // features
		return err
	}
	_, err := s.tables(1, func(f fbTable) error {
		if err := f.str(0); err != nil {
			return err
		}
		typ, err := f.scalar(2, 1)
		if err != nil {
			return err
		}
		switch typ {
		case fbTypeInt, fbTypeUtf8: // tables of scalars, or empty
		case fbTypeTimestamp:
			if t, ok, err := f.sub(3); err != nil {
				return err
			} else if ok {
				if err := t.str(1); err != nil { // the time zone
					return err
				}
			}
		default:
			return fmt.Errorf("%w: a column of Arrow type id %d, want integers, timestamps or strings", ErrNotTrace, typ)
		}
		if _, _, err := f.sub(3); err != nil {
			return err
		}
		if d, ok, err := f.sub(4); err != nil {
			return err
		} else if ok {
			if typ != fbTypeUtf8 {
				return fmt.Errorf("%w: a dictionary-encoded column of Arrow type id %d, want strings", ErrNotTrace, typ)
			}
			if _, _, err := d.sub(1); err != nil { // the index type: an Int table
				return err
			}
		}
		if _, n, err := f.vector(5, 4); err != nil {
			return err
		} else if n > 0 {
			return fmt.Errorf("%w: a nested column", ErrNotTrace)
		}
		return verifyKeyValues(f, 6)
	})
	return err
}

// verifyMessage checks the flatbuffer of an IPC message and returns its
// header type and body length.
func verifyMessage(b []byte) (header int, bodyLen int64, err error) {
	m, err := fbRoot(b)
	if err != nil {
		return 0, 0, err
	}
	if err := verifyKeyValues(m, 4); err != nil {
		return 0, 0, err
	}
	h, err := m.scalar(1, 1)
	if err != nil {
		return 0, 0, err
	}
	bl, err := m.scalar(3, 8)
	if err != nil {
		return 0, 0, err
	}
	body, ok, err := m.sub(2)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		return 0, 0, fbErr("a message without a header")
	}
	switch h {
	case fbHeaderSchema:
		err = verifySchema(body)
	case fbHeaderRecordBatch:
		err = verifyRecordBatch(body)
	case fbHeaderDictionaryBatch:
		data, ok, derr := body.sub(1)
		switch {
		case derr != nil:
			err = derr
		case !ok:
			err = fbErr("a dictionary batch without data")
		default:
			err = verifyRecordBatch(data)
		}
	default:
		err = fmt.Errorf("%w: an IPC message of type %d (a trace has a schema, dictionaries and record batches)", ErrNotTrace, h)
	}
	return int(h), int64(bl), err
}

func verifyRecordBatch(body fbTable) error {
	if _, _, err := body.vector(1, 16); err != nil { // nodes
		return err
	}
	if _, _, err := body.vector(2, 16); err != nil { // buffers
		return err
	}
	if _, _, err := body.sub(3); err != nil { // compression: two scalars
		return err
	}
	_, _, err := body.vector(4, 8) // variadic buffer counts
	return err
}

// verifyFooter checks the flatbuffer of an IPC file footer and returns the
// number of record batches it lists.
func verifyFooter(b []byte) (int, error) {
	f, err := fbRoot(b)
	if err != nil {
		return 0, err
	}
	if err := verifyKeyValues(f, 4); err != nil {
		return 0, err
	}
	s, ok, err := f.sub(1)
	if err != nil {
		return 0, err
	}
	if ok {
		if err := verifySchema(s); err != nil {
			return 0, err
		}
	}
	if _, _, err := f.vector(2, 24); err != nil { // dictionary blocks
		return 0, err
	}
	_, n, err := f.vector(3, 24)
	return n, err
}
