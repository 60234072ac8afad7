//go:build linux

package fault

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/flowtel"
)

// linkSet takes interface name in network namespace ns up or down with one
// netlink request from this process, and returns the monotonic time just
// before the request went out: the latency measurements start there, not
// before an ip command that may take a while to start on a busy machine.
func linkSet(ns, name string, up bool) (int64, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return 0, err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		return 0, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return 0, fmt.Errorf("setns %s: %w", ns, err)
	}
	ts, err := setFlags(name, up)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: leave it locked, so the
		// runtime ends it with this goroutine.
		return 0, fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return ts, err
}

// setFlags sets or clears IFF_UP of name in this thread's namespace.
func setFlags(name string, up bool) (int64, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	var msg struct {
		hdr unix.NlMsghdr
		ifi unix.IfInfomsg
	}
	msg.hdr.Len = uint32(unsafe.Sizeof(msg))
	msg.hdr.Type = unix.RTM_NEWLINK
	msg.hdr.Flags = unix.NLM_F_REQUEST | unix.NLM_F_ACK
	msg.hdr.Seq = 1
	msg.ifi.Family = unix.AF_UNSPEC
	msg.ifi.Index = int32(ifi.Index)
	msg.ifi.Change = unix.IFF_UP
	if up {
		msg.ifi.Flags = unix.IFF_UP
	}
	b := (*[unsafe.Sizeof(msg)]byte)(unsafe.Pointer(&msg))[:]
	ts := flowtel.Monotonic()
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, err
	}
	// The answer is one NLMSG_ERROR message: a header, then the error code
	// (0: done).
	hdrLen := int(unsafe.Sizeof(unix.NlMsghdr{}))
	if n < hdrLen+4 {
		return 0, fmt.Errorf("RTM_NEWLINK %s: short answer of %d bytes", name, n)
	}
	h := (*unix.NlMsghdr)(unsafe.Pointer(&buf[0]))
	if h.Type == unix.NLMSG_ERROR {
		if code := *(*int32)(unsafe.Pointer(&buf[hdrLen])); code != 0 {
			return 0, fmt.Errorf("RTM_NEWLINK %s: %w", name, unix.Errno(-code))
		}
	}
	return ts, nil
}
