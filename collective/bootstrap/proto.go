package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire format. Every message is a frame: a 4-byte big-endian body length
// followed by the body. A body is
//
//	op u8 | id u64 | fields of the op
//
// where strings and byte strings are a u32 length and the bytes, and integers
// are big-endian. A connection starts with the job-token handshake
// (internal/jobauth), which never sends the token itself:
//
//	client → hello      version, the rank it claims, a fresh nonce nc
//	server → challenge  a fresh nonce ns and its proof
//	                    HMAC(k, "store-server", nc, ns, rank)
//	client → auth       its proof HMAC(k, "store-client", nc, ns, rank)
//	server → ok, or err (and the server closes the connection)
//
// where k is the token's store key (jobauth.Key). The client checks the
// server's proof too, so a rank never talks to a store of another job. After
// that the client sends requests tagged with ids of its choosing and the
// server answers each (except cancel) with ok or err carrying the same id, in
// any order: a get waits for its key while later requests are served.
const (
	opHello  byte = 1 // version u8, rank i32, nonce bytes
	opSet    byte = 2 // key, value
	opGet    byte = 3 // key; ok carries the value (waits for the key)
	opAdd    byte = 4 // key, delta i64; ok carries the new value in num
	opWait   byte = 5 // count u32, keys; ok when all exist
	opClock  byte = 6 // no fields; ok carries the server's monotonic ns in num
	opCancel byte = 7 // no fields; id names the request given up (get/wait)
	opChall  byte = 8 // server's nonce and proof, as one byte string (value)
	opAuth   byte = 9 // client's proof (value)

	opOK  byte = 0x81 // num i64, value bytes
	opErr byte = 0x82 // code u8, text
	opBye byte = 0x83 // no fields: the server is closing (id 0)
)

// protoVersion is the hello's version byte; bump it on any change above.
// Version 1 sent the token itself in the hello.
const protoVersion = 2

// MaxFrame bounds a frame body, and so a key or value, in bytes. What the
// ranks keep in the store is small (addresses, ids); a frame is read as its
// bytes arrive, so a declared length costs nothing until it is sent.
const MaxFrame = 1 << 20

// Error codes carried by opErr.
const (
	codeGeneric   byte = 0
	codeToken     byte = 1 // job token mismatch
	codeVersion   byte = 2 // protocol version mismatch
	codeProtocol  byte = 3 // malformed or unexpected message
	codeNotNumber byte = 4 // add on a key holding a non-integer value
	codeExists    byte = 5 // set of a key that is set already (keys are written once)
	codeDenied    byte = 6 // the connection's rank may not do this (see Server)
	codeRank      byte = 7 // the rank claimed is taken or out of range
	codeLimit     byte = 8 // the store, or this connection, is at a limit
)

// message is the decoded form of every frame body; which fields mean
// something depends on op.
type message struct {
	op      byte
	id      uint64
	version byte     // hello
	rank    int32    // hello
	key     string   // set, get, add
	keys    []string // wait
	value   []byte   // hello (token), set, ok
	num     int64    // add (delta), ok
	code    byte     // err
	text    string   // err
}

var errShort = errors.New("truncated message")

// appendMessage appends m's body (without the frame length) to b.
func appendMessage(b []byte, m *message) []byte {
	b = append(b, m.op)
	b = binary.BigEndian.AppendUint64(b, m.id)
	switch m.op {
	case opHello:
		b = append(b, m.version)
		b = binary.BigEndian.AppendUint32(b, uint32(m.rank))
		b = appendBytes(b, m.value)
	case opChall, opAuth:
		b = appendBytes(b, m.value)
	case opSet:
		b = appendBytes(b, []byte(m.key))
		b = appendBytes(b, m.value)
	case opGet:
		b = appendBytes(b, []byte(m.key))
	case opAdd:
		b = appendBytes(b, []byte(m.key))
		b = binary.BigEndian.AppendUint64(b, uint64(m.num))
	case opWait:
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.keys)))
		for _, k := range m.keys {
			b = appendBytes(b, []byte(k))
		}
	case opClock, opCancel, opBye:
	case opOK:
		b = binary.BigEndian.AppendUint64(b, uint64(m.num))
		b = appendBytes(b, m.value)
	case opErr:
		b = append(b, m.code)
		b = appendBytes(b, []byte(m.text))
	default:
		panic(fmt.Sprintf("bootstrap: encoding unknown op %#x", m.op))
	}
	return b
}

func appendBytes(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// decoder reads fields from a body, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

// take consumes the next n bytes of the body, or fails and returns nil.
func (d *decoder) take(n uint64) []byte {
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// bytes returns a sub-slice of the body (not a copy).
func (d *decoder) bytes() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	return d.take(uint64(n))
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errShort
	}
}

// decodeMessage parses a frame body. Byte slices in the result alias body.
// It never panics and never allocates more than a small multiple of
// len(body), whatever the input.
func decodeMessage(body []byte) (message, error) {
	d := decoder{b: body}
	var m message
	m.op = d.u8()
	m.id = d.u64()
	if d.err != nil {
		return message{}, fmt.Errorf("bootstrap: decode: %w", d.err)
	}
	switch m.op {
	case opHello:
		m.version = d.u8()
		m.rank = int32(d.u32())
		m.value = d.bytes()
	case opChall, opAuth:
		m.value = d.bytes()
	case opSet:
		m.key = string(d.bytes())
		m.value = d.bytes()
	case opGet:
		m.key = string(d.bytes())
	case opAdd:
		m.key = string(d.bytes())
		m.num = int64(d.u64())
	case opWait:
		n := d.u32()
		// Every key takes at least its 4-byte length: a count the body
		// cannot hold is refused before anything is allocated for it.
		if uint64(n) > uint64(len(d.b))/4 {
			return message{}, fmt.Errorf("bootstrap: decode: wait for %d keys in a %d-byte body", n, len(body))
		}
		m.keys = make([]string, 0, n)
		for i := uint32(0); i < n && d.err == nil; i++ {
			m.keys = append(m.keys, string(d.bytes()))
		}
	case opClock, opCancel, opBye:
	case opOK:
		m.num = int64(d.u64())
		m.value = d.bytes()
	case opErr:
		m.code = d.u8()
		m.text = string(d.bytes())
	default:
		return message{}, fmt.Errorf("bootstrap: decode: unknown op %#x", m.op)
	}
	if d.err != nil {
		return message{}, fmt.Errorf("bootstrap: decode op %#x: %w", m.op, d.err)
	}
	if len(d.b) != 0 {
		return message{}, fmt.Errorf("bootstrap: decode op %#x: %d trailing bytes", m.op, len(d.b))
	}
	return m, nil
}

// appendFrame appends m as a complete frame (length and body) to b.
func appendFrame(b []byte, m *message) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = appendMessage(b, m)
	n := len(b) - start - 4
	if n > MaxFrame {
		// Callers check sizes first; this is the last line of defence
		// against sending a frame the peer must refuse.
		panic(fmt.Sprintf("bootstrap: frame of %d bytes exceeds MaxFrame", n))
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b
}

// maxHelloFrame bounds the frames of the handshake, read before the peer
// has shown it holds the token, so a stranger cannot make the server
// allocate MaxFrame per connection.
const maxHelloFrame = 1 << 10

// readFrame reads one frame and returns its body in a fresh buffer.
func readFrame(r io.Reader) ([]byte, error) { return readFrameMax(r, MaxFrame) }

func readFrameMax(r io.Reader, limit uint32) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > limit {
		return nil, fmt.Errorf("bootstrap: frame length %d out of range [1, %d]", n, limit)
	}
	// Read in steps that double: memory follows the bytes that arrive, not
	// the length a peer declares (at most twice what it sent).
	body := make([]byte, 0, min(n, frameStep))
	for uint32(len(body)) < n {
		if len(body) == cap(body) {
			body = append(body, make([]byte, min(uint32(cap(body)), n-uint32(len(body))))...)[:len(body)]
		}
		k, err := io.ReadFull(r, body[len(body):min(uint32(cap(body)), n)])
		body = body[:len(body)+k]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return body, nil
}

// frameStep is the first buffer readFrameMax gives a frame.
const frameStep = 64 << 10

// readMessage reads and decodes one frame.
func readMessage(r io.Reader) (message, error) { return readMessageMax(r, MaxFrame) }

func readMessageMax(r io.Reader, limit uint32) (message, error) {
	body, err := readFrameMax(r, limit)
	if err != nil {
		return message{}, err
	}
	return decodeMessage(body)
}

// frameSize is the encoded body size of a request carrying key(s) and value,
// for checking against MaxFrame before sending.
func frameSize(keys []string, value []byte) int {
	n := 1 + 8 + 8 + 4 + len(value)
	for _, k := range keys {
		n += 4 + len(k)
	}
	return n
}
