package sock

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/vccl-go/vccl/transport/transporttest"
)

func TestInterfaceAddrFamily(t *testing.T) {
	lo := transporttest.LoopbackIfname(t)
	ip, err := InterfaceAddr(lo, 4)
	if err != nil || !ip.Is4() || !ip.IsLoopback() {
		t.Fatalf("IPv4 address of %s: %v, %v", lo, ip, err)
	}
	if ip, err := InterfaceAddr(lo, 0); err != nil || !ip.Is4() {
		t.Fatalf("default address of %s: %v, %v; want IPv4 first", lo, ip, err)
	}
	if ip, err := InterfaceAddr(lo, 6); err == nil && !ip.Is6() {
		t.Fatalf("IPv6 address of %s is %v", lo, ip)
	} else if err != nil && !strings.Contains(err.Error(), "no IPv6 address") {
		t.Fatalf("missing IPv6 address of %s: %v", lo, err)
	}
	if _, err := InterfaceAddr("vcclnope0", 0); err == nil || !strings.Contains(err.Error(), `"vcclnope0"`) {
		t.Fatalf("missing interface: %v, want an error naming it", err)
	}
}

func TestResolve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), transporttest.Deadline)
	defer cancel()
	for in, want := range map[string]string{"127.0.0.1:80": "127.0.0.1:80", "[::1]:7": "[::1]:7", "[::ffff:10.0.0.1]:9": "10.0.0.1:9"} {
		if got, err := Resolve(ctx, in); err != nil || got.String() != want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	if ap, err := Resolve(ctx, "localhost:80"); err != nil || !ap.Addr().IsLoopback() || ap.Port() != 80 {
		t.Errorf("Resolve(localhost:80) = %v, %v", ap, err)
	}
	if _, err := Resolve(ctx, "no-port"); err == nil {
		t.Error("Resolve accepted an address without a port")
	}
}

// Dial leaves from the named interface's address and reaches a listener on
// ListenAddr's.
func TestDialFromInterface(t *testing.T) {
	lo := transporttest.LoopbackIfname(t)
	ctx, cancel := context.WithTimeout(context.Background(), transporttest.Deadline)
	defer cancel()
	for _, ifname := range []string{"", lo} {
		addr, err := ListenAddr(ifname)
		if err != nil {
			t.Fatalf("ListenAddr(%q): %v", ifname, err)
		}
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := Dial(ctx, ifname, ln.Addr().String())
		if err != nil {
			ln.Close()
			t.Fatalf("Dial from %q: %v", ifname, err)
		}
		if local := conn.LocalAddr().(*net.TCPAddr); !local.IP.IsLoopback() {
			t.Errorf("Dial from %q left from %v, want a loopback address", ifname, local)
		}
		conn.Close()
		ln.Close()
	}
	if _, err := Dial(ctx, "vcclnope0", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), `"vcclnope0"`) {
		t.Fatalf("Dial from a missing interface: %v, want an error naming it", err)
	}
}

var errBad = errors.New("bad frame")

func TestHeader(t *testing.T) {
	good := make([]byte, 20)
	want := Header{Type: 1, Flags: 3, Word: 0x0a0b0c0d, Long: 1 << 40}
	f := &Format{Magic: 'V', Version: 2, Size: 20, Bad: errBad}
	f.Put(good, want)
	if string(good[:8]) != "V\x02\x01\x03\x0d\x0c\x0b\x0a" {
		t.Fatalf("Put wrote % x", good[:8])
	}
	for _, tc := range []struct {
		name   string
		b      []byte
		substr string // "" for no error
	}{
		{"good", good, ""},
		{"short", good[:19], "19 bytes, want 20"},
		{"magic", append([]byte{'X'}, good[1:]...), "magic"},
		{"version", append([]byte{'V', 9}, good[2:]...), "version 9, want 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.Decode(tc.b)
			switch {
			case tc.substr == "" && (err != nil || got != want):
				t.Fatalf("Decode: %+v, %v, want %+v", got, err, want)
			case tc.substr != "" && (!errors.Is(err, errBad) || !strings.Contains(err.Error(), tc.substr)):
				t.Fatalf("Decode: %v, want errBad saying %q", err, tc.substr)
			}
		})
	}
}
