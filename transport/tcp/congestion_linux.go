package tcp

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// setCongestion sets conn's TCP congestion control to name.
func setCongestion(conn *net.TCPConn, name string) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("tcp: raw connection of %s: %w", conn.LocalAddr(), err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return fmt.Errorf("tcp: descriptor of %s: %w", conn.LocalAddr(), err)
	}
	if serr != nil {
		return fmt.Errorf("tcp: TCP congestion control %q (Backend.Congestion or %s) on %s: %w; the kernel offers %s, and allows unprivileged processes %s",
			name, EnvCongestion, conn.LocalAddr(), serr,
			sysctl("net/ipv4/tcp_available_congestion_control"), sysctl("net/ipv4/tcp_allowed_congestion_control"))
	}
	return nil
}

// congestionOf returns the congestion control of socket fd.
func congestionOf(fd int) (string, error) {
	s, err := unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	return strings.TrimRight(s, "\x00"), err
}

// sysctl returns the value of /proc/sys/path, or "?".
func sysctl(path string) string {
	b, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// bufAllowed reports whether the kernel lets a process set socket buffers
// of n bytes (net.core.rmem_max and wmem_max).
func bufAllowed(n int) bool {
	for _, k := range []string{"net/core/rmem_max", "net/core/wmem_max"} {
		v, err := strconv.Atoi(sysctl(k))
		if err != nil || v < n {
			return false
		}
	}
	return true
}
