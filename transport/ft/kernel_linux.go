package ft

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// kernelView is the kernel's view of a path's TCP connection (tcp_info):
// what the monitor asks when a path falls silent, to tell a dead path from
// a busy peer.
type kernelView = unix.TCPInfo

// tcpInfo returns the kernel's view of the connection, or nil.
func (pa *path) tcpInfo() *kernelView {
	rc, err := pa.conn.SyscallConn()
	if err != nil {
		return nil
	}
	var info *kernelView
	rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err != nil || pa.blackhole.Load() {
		return nil
	}
	return info
}

// kernelSilence returns how long ago the kernel last received data on the
// connection (which our reader may not have read yet), or -1 if unknown.
func kernelSilence(info *kernelView) time.Duration {
	if info == nil {
		return -1
	}
	return time.Duration(info.Last_data_recv) * time.Millisecond
}

// acked reports whether the peer's kernel acknowledged everything sent on
// the connection, or something within d: then packets cross the path,
// whatever the peer's process is doing.
func acked(info *kernelView, d time.Duration) bool {
	if info == nil {
		return false
	}
	// Nothing in flight (everything acknowledged) is a path that works. A
	// peer whose receive window is full also leaves nothing in flight, and
	// its kernel answers the zero-window probes, which are acknowledgements;
	// probes left unanswered (Probes > 0) mean the path is gone, not the
	// window: a rank whose peer's window was full when that peer's network
	// died waited out the whole call deadline here.
	return (info.Unacked == 0 && info.Probes == 0) || time.Duration(info.Last_ack_recv)*time.Millisecond < d
}

// ifRunning reports whether the named interface is up and running (has its
// carrier); true when none is named or it cannot be read.
// It asks with one ioctl (SIOCGIFFLAGS), which unlike a netlink dump does
// not wait for the kernel's routing lock, so the monitor can ask.
func ifRunning(name string) bool {
	if name == "" {
		return true
	}
	ifSock.once.Do(func() {
		ifSock.fd, ifSock.err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	})
	if ifSock.err != nil {
		return true
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return true
	}
	if err := unix.IoctlIfreq(ifSock.fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return true
	}
	f := ifr.Uint16()
	return f&unix.IFF_UP != 0 && f&unix.IFF_RUNNING != 0
}

// ifSock is the socket ifRunning asks through, opened once.
var ifSock struct {
	once sync.Once
	fd   int
	err  error
}
