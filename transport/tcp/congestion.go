package tcp

import (
	"net"
	"os"
	"runtime"
)

// EnvCongestion names the TCP congestion control of every connection
// (TCP_CONGESTION, Linux only); Backend.Congestion overrides it.
const EnvCongestion = "VCCL_TCP_CONGESTION"

// localReno is the congestion control of a connection within the host when
// none is named. Over loopback nothing is ever congested, and the kernel's
// default may throttle a memory copy: with BBR, the default of some hosts,
// its congestion window (20-24 segments, about 1.3 MB) and the receive
// window ran out inside one 1 MiB writev; the peer's ACKs then wait in the
// socket's backlog until the writev returns (the kernel looks at the
// backlog once every 16 new segments, and a segment is 64 KiB on lo), so
// the last segments went out only after the whole copy. Reno's window only
// grows without losses, and reno may be chosen without privileges.
const localReno = "reno"

// congestion returns the congestion control conn asks for, or "" for the
// kernel's default.
func (b Backend) congestion(conn *net.TCPConn) string {
	if b.Congestion != "" {
		return b.Congestion
	}
	if name := os.Getenv(EnvCongestion); name != "" {
		return name
	}
	if runtime.GOOS == "linux" && sameHost(conn) {
		return localReno
	}
	return ""
}

// sameHost reports whether both ends of conn are on this host: the peer is
// a loopback address, or has the local address (the kernel then routes the
// connection through the loopback device too).
func sameHost(conn *net.TCPConn) bool {
	l, lok := conn.LocalAddr().(*net.TCPAddr)
	r, rok := conn.RemoteAddr().(*net.TCPAddr)
	return lok && rok && (r.IP.IsLoopback() || r.IP.Equal(l.IP))
}
