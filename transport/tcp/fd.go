package tcp

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// sockFD is the QP's own descriptor of its connection, outside Go's network
// poller. A socket registered with the poller wakes the thread that sleeps
// in epoll_wait whenever bytes arrive, even with no goroutine waiting for
// them; and a process with any other socket waited on (collective's
// bootstrap connections) always has such a sleeper while its engine spins.
// Over loopback that was two thread wake-ups per message per process on a
// 2-core host, each taking a core from a spinning rank. So the QP dups the
// connection's descriptor and closes the net.TCPConn (which takes it out of
// the poller); the goroutines that must block (the reader while nobody
// polls, the writer while the socket is full) wait in poll(2) on the socket
// and on a pipe that becomes readable, for good, once the QP stops. The
// reader's wait also watches a second pipe, kicked when its owner starts
// spinning (kick).
type sockFD struct {
	fd int
	// users counts the calls of do in progress (they nest: a read may
	// write a credit's send); closing makes new ones fail, and close waits
	// for the count to drain before it releases the descriptor, whose
	// number could otherwise be reused under a call.
	users   atomic.Int64
	closing atomic.Bool

	mu           sync.Mutex
	closed, gone bool // fd closed; the pipes closed
	wakeR, wakeW int
	kickR, kickW int
}

// detach takes conn's descriptor out of Go's poller: it dups it and closes
// conn.
func detach(conn *net.TCPConn) (*sockFD, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("tcp: raw connection of %s: %w", conn.LocalAddr(), err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("tcp: descriptor of %s: %w", conn.LocalAddr(), err)
	}
	if derr != nil {
		return nil, fmt.Errorf("tcp: dup of %s: %w", conn.LocalAddr(), derr)
	}
	var p, k [2]int
	if err := pipe(p[:]); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tcp: pipe for %s: %w", conn.LocalAddr(), err)
	}
	if err := pipe(k[:]); err != nil {
		closeAll(fd, p[0], p[1])
		return nil, fmt.Errorf("tcp: pipe for %s: %w", conn.LocalAddr(), err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		closeAll(fd, p[0], p[1], k[0], k[1])
		return nil, fmt.Errorf("tcp: non-blocking %s: %w", conn.LocalAddr(), err)
	}
	conn.Close() // the dup keeps the connection open
	return &sockFD{fd: fd, wakeR: p[0], wakeW: p[1], kickR: k[0], kickW: k[1]}, nil
}

func closeAll(fds ...int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// do runs f on the descriptor, unless it is closed (net.ErrClosed). f must
// not block.
func (s *sockFD) do(f func(fd int)) error {
	s.users.Add(1)
	defer s.users.Add(-1)
	if s.closing.Load() {
		return net.ErrClosed
	}
	f(s.fd)
	return nil
}

// wait blocks until the socket has events (unix.POLLIN or unix.POLLOUT), or
// an error, or the QP stops, or, with kickable, until kick; it reports
// false once the QP stops. Only one goroutine may wait kickable.
func (s *sockFD) wait(events int16, kickable bool) bool {
	s.mu.Lock()
	if s.closed || s.gone {
		s.mu.Unlock()
		return false
	}
	// poll holds its own reference to the socket, and close makes the wake
	// pipe readable: no lock is held through it.
	pfd := []unix.PollFd{{Fd: int32(s.fd), Events: events}, {Fd: int32(s.wakeR), Events: unix.POLLIN}, {Fd: int32(s.kickR), Events: unix.POLLIN}}
	if !kickable {
		pfd = pfd[:2]
	}
	s.mu.Unlock()
	for {
		_, err := unix.Poll(pfd, -1)
		if err == syscall.EINTR {
			continue
		}
		if err == nil && kickable && pfd[2].Revents != 0 {
			var b [16]byte
			for {
				if n, _ := unix.Read(s.kickR, b[:]); n < len(b) {
					break
				}
			}
		}
		return err == nil && pfd[1].Revents == 0
	}
}

// kick ends a kickable wait now, or the next one at once.
func (s *sockFD) kick() {
	s.mu.Lock()
	if !s.gone {
		unix.Write(s.kickW, []byte{0})
	}
	s.mu.Unlock()
}

// shutdown ends the connection (the peer reads end of file) and every wait.
func (s *sockFD) shutdown() {
	s.do(func(fd int) { unix.Shutdown(fd, unix.SHUT_RDWR) })
	s.wakeAll()
}

// wakeAll makes the wake pipe readable: every wait returns, now and later.
func (s *sockFD) wakeAll() {
	s.mu.Lock()
	if !s.gone {
		unix.Write(s.wakeW, []byte{0})
	}
	s.mu.Unlock()
}

// close releases the descriptor once no call of do is in progress; later
// calls fail with net.ErrClosed and waits return at once. With linger0 the
// connection is reset, as a crashed process's would be. It must not be
// called from inside do.
func (s *sockFD) close(linger0 bool) {
	s.closing.Store(true)
	for s.users.Load() != 0 {
		runtime.Gosched() // do never blocks: this is short
	}
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		if linger0 {
			unix.SetsockoptLinger(s.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		}
		unix.Close(s.fd)
	}
	s.mu.Unlock()
	s.wakeAll()
}

// release closes the socket, if still open, and the wake pipe, once no
// goroutine of the QP waits any more.
func (s *sockFD) release() {
	s.close(false)
	s.mu.Lock()
	if !s.gone {
		s.gone = true
		closeAll(s.wakeR, s.wakeW, s.kickR, s.kickW)
	}
	s.mu.Unlock()
}

// pipe makes a non-blocking, close-on-exec pipe (Pipe2 is not everywhere).
func pipe(p []int) error {
	syscall.ForkLock.RLock()
	err := unix.Pipe(p)
	if err == nil {
		unix.CloseOnExec(p[0])
		unix.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return err
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return err
	}
	return unix.SetNonblock(p[1], true)
}
