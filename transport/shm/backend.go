//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vccl-go/vccl/transport"
)

// Name is the backend's name.
const Name = "shm"

// AddrPrefix starts the abstract socket names Listen picks.
const AddrPrefix = "@vccl-shm-"

// Backend is the shared-memory backend for processes on one host. Its zero
// value is ready to use.
type Backend struct {
	// RingSize is the bytes of each direction's ring in the QPs this
	// backend dials (the acceptor takes the dialler's): a power of two from
	// 64 KiB to 1 GiB, or 0 for 2 MiB. A ring that holds the messages in
	// flight lets sends complete without waiting for the receiver; each QP
	// maps two rings.
	RingSize int
}

var _ transport.Backend = Backend{}

// Name returns "shm".
func (Backend) Name() string { return Name }

// Capabilities: shm QPs join processes of one host through shared memory
// (they implement transport.Mailboxer), and Poll copies the data itself.
func (Backend) Capabilities() transport.Capabilities {
	return transport.Capabilities{Reach: transport.ReachHost, SharedMemory: true, PollProgresses: true}
}

var nextAddr atomic.Uint64

// Listen listens on a Unix socket: lc.Addr, or a fresh name in the abstract
// namespace ("@vccl-shm-<pid>-<n>-<random>": no file, nothing to clean up;
// the random part keeps the name from being guessed). A name starting with
// '@' is abstract; any other is a socket file, removed on Close. Abstract
// sockets have no permissions: the handshake proves the job token and, with
// no token, the listener admits only processes of its own user.
func (Backend) Listen(ctx context.Context, lc transport.ListenConfig) (transport.Listener, error) {
	var cfg net.ListenConfig
	addr := lc.Addr
	var ln net.Listener
	var err error
	if addr == "" {
		for range 64 {
			var rnd [8]byte
			rand.Read(rnd[:])
			addr = fmt.Sprintf("%s%d-%d-%x", AddrPrefix, os.Getpid(), nextAddr.Add(1), rnd)
			if ln, err = cfg.Listen(ctx, "unix", addr); !errors.Is(err, syscall.EADDRINUSE) {
				break
			}
		}
	} else {
		ln, err = cfg.Listen(ctx, "unix", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("shm: listen on %q: %w", addr, err)
	}
	acfg := transport.AcceptorConfig{Token: lc.Token}
	if lc.Token == "" {
		acfg.Check = sameUser
	}
	return &listener{addr: addr, acc: transport.NewAcceptorConfig(ln, acfg)}, nil
}

// sameUser admits a peer of this process's user (or root) only: without a
// job token, the uid is what tells this job's ranks from other users'
// processes on the host.
func sameUser(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if me := os.Getuid(); int(cred.Uid) != me && cred.Uid != 0 {
		return fmt.Errorf("peer uid %d is not this job's user (uid %d) and no job token is set", cred.Uid, me)
	}
	return nil
}

// The setup message the dialler sends after the handshake, with the
// segment's file descriptor attached (SCM_RIGHTS).
const (
	setupMagic = "VSHM"
	setupLen   = 16 // magic, version uint32, segment size uint64
)

// Dial connects to the listener at addr under key, creates the shared
// segment and hands it over. The QP is usable at once; its sends wait for
// credit until the other end accepts and posts receives.
func (b Backend) Dial(ctx context.Context, addr, key string, cfg transport.Config) (transport.QP, error) {
	g := geometry{ring: b.RingSize, slots: defaultSlots}
	if g.ring == 0 {
		g.ring = defaultRing
	}
	if err := g.check(); err != nil {
		return nil, fmt.Errorf("shm: RingSize: %v (want a power of two from 64 KiB to 1 GiB)", err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, fmt.Errorf("shm: dial %q: %w", addr, err)
	}
	conn := c.(*net.UnixConn)
	if err := transport.DialHandshake(ctx, conn, cfg.Token, key); err != nil {
		conn.Close()
		return nil, err
	}
	mem, fd, err := createSegment(g)
	if err != nil {
		conn.Close()
		return nil, err
	}
	initSegment(mem, g, os.Getpid())
	seg := view(mem, g, 0)
	publishProbe(seg.me)
	seg.me.state.Store(stateAttached)
	msg := make([]byte, setupLen)
	copy(msg, setupMagic)
	binary.LittleEndian.PutUint32(msg[4:], segVersion)
	binary.LittleEndian.PutUint64(msg[8:], uint64(len(mem)))
	stop := transport.SetupDeadline(ctx, conn)
	_, _, err = conn.WriteMsgUnix(msg, unix.UnixRights(fd), nil)
	stop()
	unix.Close(fd)
	if err != nil {
		unix.Munmap(mem)
		conn.Close()
		return nil, fmt.Errorf("shm: handing the segment to %q: %w", addr, err)
	}
	pid := peerPID(conn)
	return newQP(seg, 0, conn, cfg, fmt.Sprintf("pid:%d", os.Getpid()), addr, pid), nil
}

// createSegment makes an anonymous shared-memory file (memfd: no name in
// /dev/shm, freed when the last mapping and descriptor go, crash or not),
// seals its size and maps it.
func createSegment(g geometry) ([]byte, int, error) {
	fd, err := unix.MemfdCreate("vccl-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("shm: memfd_create: %w", err)
	}
	size := g.segSize()
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("shm: sizing the segment to %d bytes: %w", size, err)
	}
	// Sealed, neither end can shrink it under the other (which would turn
	// the other's next access into SIGBUS).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("shm: sealing the segment: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("shm: mapping %d bytes: %w", size, err)
	}
	return mem, fd, nil
}

// attachSegment maps a segment received from a dialler after checking that
// it is sealed against shrinking and laid out as expected.
func attachSegment(fd int, size uint64) (*segment, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shm: segment is not a sealed memfd (seals %#x, %v)", seals, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: segment: %w", err)
	}
	if uint64(st.Size) != size || size < hdrSize || size > 4*maxRing {
		return nil, fmt.Errorf("shm: segment of %d bytes, announced %d", st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shm: mapping %d bytes: %w", size, err)
	}
	g, err := readGeometry(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return view(mem, g, 1), nil
}

type listener struct {
	addr string
	acc  *transport.Acceptor
}

func (l *listener) Addr() string { return l.addr }

func (l *listener) Close() error { return l.acc.Close() }

// Accept waits for the dialler that presented key and maps the segment it
// sends.
func (l *listener) Accept(ctx context.Context, key string, cfg transport.Config) (transport.QP, error) {
	c, err := l.acc.Accept(ctx, key)
	if err != nil {
		return nil, err
	}
	conn := c.(*net.UnixConn)
	seg, err := receiveSegment(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("shm: accepting %q on %s: %w", key, l.addr, err)
	}
	seg.setPid(1, os.Getpid())
	publishProbe(seg.me)
	seg.me.state.Store(stateAttached)
	pid := peerPID(conn)
	return newQP(seg, 1, conn, cfg, l.addr, fmt.Sprintf("pid:%d", pid), pid), nil
}

func receiveSegment(ctx context.Context, conn *net.UnixConn) (*segment, error) {
	stop := transport.SetupDeadline(ctx, conn)
	defer stop()
	msg := make([]byte, setupLen)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(msg, oob)
	if err != nil {
		return nil, transport.CtxErr(ctx, fmt.Errorf("no segment from the dialler: %w", err))
	}
	var fds []int
	if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range cms {
			if f, err := unix.ParseUnixRights(&cms[i]); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if n < setupLen {
		if _, err := io.ReadFull(conn, msg[n:]); err != nil {
			return nil, transport.CtxErr(ctx, fmt.Errorf("short setup message: %w", err))
		}
	}
	if string(msg[:4]) != setupMagic || binary.LittleEndian.Uint32(msg[4:]) != segVersion {
		return nil, fmt.Errorf("setup message %q is not shm version %d", msg[:8], segVersion)
	}
	if len(fds) != 1 {
		return nil, fmt.Errorf("setup message carries %d descriptors, want 1", len(fds))
	}
	return attachSegment(fds[0], binary.LittleEndian.Uint64(msg[8:]))
}

// peerPID returns the process at the other end of conn (SO_PEERCRED), or 0.
func peerPID(conn *net.UnixConn) int {
	rc, err := conn.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	rc.Control(func(fd uintptr) {
		if u, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(u.Pid)
		}
	})
	return pid
}
