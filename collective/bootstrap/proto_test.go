package bootstrap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func sampleMessages() []message {
	return []message{
		{op: opHello, id: 0, version: protoVersion, rank: 7, value: []byte("token")},
		{op: opHello, version: protoVersion, rank: -1, value: []byte{}},
		{op: opSet, id: 1, key: "k", value: []byte("v")},
		{op: opSet, id: 2, key: "", value: []byte{}},
		{op: opGet, id: 3, key: "some/key"},
		{op: opAdd, id: 4, key: "ctr", num: -5},
		{op: opWait, id: 5, keys: []string{"a", "", "b"}},
		{op: opWait, id: 6, keys: []string{}},
		{op: opClock, id: 7},
		{op: opCancel, id: 8},
		{op: opOK, id: 9, num: 1 << 62, value: []byte("x")},
		{op: opOK, id: 10, value: []byte{}},
		{op: opErr, id: 11, code: codeToken, text: "job token mismatch"},
		{op: opBye},
	}
}

// normalize makes decoded and original messages comparable (nil vs empty).
func normalize(m message) message {
	if m.value == nil {
		m.value = []byte{}
	}
	if m.keys == nil {
		m.keys = []string{}
	}
	return m
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		frame := appendFrame(nil, &m)
		got, err := readMessage(bytes.NewReader(frame))
		if err != nil {
			t.Fatalf("op %#x: %v", m.op, err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(m)) {
			t.Errorf("op %#x: round trip\n got %+v\nwant %+v", m.op, got, m)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	get := appendMessage(nil, &message{op: opGet, id: 1, key: "abc"})
	bigWait := appendMessage(nil, &message{op: opWait, id: 1})
	binary.BigEndian.PutUint32(bigWait[9:], 1<<30)
	cases := []struct {
		name string
		body []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"short id", []byte{opGet, 0, 0}, "truncated"},
		{"unknown op", append([]byte{0x42}, make([]byte, 8)...), "unknown op"},
		{"truncated key", get[:len(get)-1], "truncated"},
		{"trailing", append(append([]byte{}, get...), 0), "trailing"},
		{"huge key count", bigWait, "wait for 1073741824 keys"},
	}
	for _, c := range cases {
		_, err := decodeMessage(c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

func TestReadFrameRejects(t *testing.T) {
	for _, n := range []uint32{0, MaxFrame + 1} {
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], n)
		if _, err := readFrame(bytes.NewReader(hdr[:])); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("length %d: err = %v", n, err)
		}
	}
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, 5, 1})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short body: err = %v, want ErrUnexpectedEOF", err)
	}
	if _, err := readFrame(bytes.NewReader(nil)); err != io.EOF {
		t.Errorf("no frame: err = %v, want EOF", err)
	}
}

// FuzzDecodeMessage: any body decodes or errors without panicking, and what
// decodes re-encodes to the same bytes (the encoding is canonical).
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(appendMessage(nil, &m))
	}
	f.Add([]byte{})
	f.Add([]byte{opWait, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeMessage(body)
		if err != nil {
			return
		}
		if again := appendMessage(nil, &m); !bytes.Equal(again, body) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", body, again)
		}
	})
}

// FuzzDecodeFrame: a byte stream is read frame by frame until an error; no
// input panics or makes the reader allocate beyond MaxFrame.
func FuzzDecodeFrame(f *testing.F) {
	var stream []byte
	for _, m := range sampleMessages() {
		stream = appendFrame(stream, &m)
	}
	f.Add(stream)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 1, opBye})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			body, err := readFrame(r)
			if err != nil {
				return
			}
			if len(body) == 0 || len(body) > MaxFrame {
				t.Fatalf("frame body of %d bytes", len(body))
			}
			decodeMessage(body)
		}
	})
}
