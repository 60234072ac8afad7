package tcp

import (
	"net"
	"runtime"

	"github.com/vccl-go/vccl/internal/affinity"
)

// EnvCongestion names the TCP congestion control of every connection
// (TCP_CONGESTION, Linux only): Config.Congestion, for Backend.Congestion.
const EnvCongestion = "VCCL_TCP_CONGESTION"

// EnvSockBuf sets SO_SNDBUF and SO_RCVBUF of every connection, in bytes;
// -1 leaves the kernel's autotuning alone: Config.SockBuf, for
// Backend.SockBuf.
const EnvSockBuf = "VCCL_TCP_SOCKBUF"

// localReno is the congestion control of a connection within the host when
// none is named. Over loopback nothing is ever congested, and the kernel's
// default may throttle a memory copy: with BBR, the default of some hosts,
// its congestion window (20-24 segments, about 1.3 MB) and the receive
// window ran out inside one 1 MiB writev; the peer's ACKs then wait in the
// socket's backlog until the writev returns (the kernel looks at the
// backlog once every 16 new segments, and a segment is 64 KiB on lo), so
// the last segments went out only after the whole copy. BBR also paces
// small messages, which adds its pacing delay to every small call. Reno's
// window only grows without losses, and any process may choose reno.
const localReno = "reno"

// setCongestionOrDefault gives conn the congestion control name, or with
// name "" reno when both ends are on this host and else the kernel's
// default.
func setCongestionOrDefault(conn *net.TCPConn, name string) error {
	if name == "" && runtime.GOOS == "linux" && sameHost(conn) {
		name = localReno
	}
	if name == "" {
		return nil
	}
	return setCongestion(conn, name)
}

// sameHost reports whether both ends of conn are on this host: the peer is
// a loopback address, or has the local address (the kernel then routes the
// connection through the loopback device too).
func sameHost(conn *net.TCPConn) bool {
	l, lok := conn.LocalAddr().(*net.TCPAddr)
	r, rok := conn.RemoteAddr().(*net.TCPAddr)
	return lok && rok && (r.IP.IsLoopback() || r.IP.Equal(l.IP))
}

// localBuf is the socket buffer (SO_SNDBUF and SO_RCVBUF; the kernel
// doubles it) of a connection within the host from a process that a
// launcher bound to CPUs of its own. Such a rank's engine spins, and with
// autotuned buffers the socket filled before the peer read: the writer
// goroutine then took turns with the spinning owner on the rank's one CPU,
// and a large call ran at one of two speeds depending on who got the CPU
// first. With 4 MiB neither end waits for room. Unbound ranks, which share
// the CPUs and do not spin, were slower with it in the runs of
// BENCHMARKS.md (the cause is open: see docs/), so they keep autotuning.
const localBuf = 4 << 20

// localSockBuf returns the socket buffer conn asks for when Backend.SockBuf
// is 0: localBuf within the host, for a process bound to CPUs of its own,
// when the kernel allows that much; else 0 (autotuning). A smaller cap would
// lock the buffer below what autotuning reaches (net.core.rmem_max is
// 208 KiB on many hosts).
func localSockBuf(conn *net.TCPConn) int {
	if !sameHost(conn) || !bufAllowed(localBuf) || !affinity.LauncherBound() {
		return 0
	}
	return localBuf
}
