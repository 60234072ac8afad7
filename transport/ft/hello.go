package ft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// A connection's first frame is its hello (dialPath sends it): it names the
// path the connection is for and its generation, which counts the path's
// reconnections.

// helloTimeout bounds the wait for a new connection's hello frame.
const helloTimeout = 5 * time.Second

// hello takes an accepted connection of path i: it reads its hello and
// sets its socket up, and returns it with the generation the hello names.
// It closes a connection that fails.
func (b Backend) hello(ctx context.Context, c net.Conn, i int) (*net.TCPConn, uint64, error) {
	conn, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, 0, errors.New("ft: accepted a connection that is not TCP")
	}
	gen, err := readHello(ctx, conn, i)
	if err == nil {
		err = b.setup(conn, i)
	}
	if err != nil {
		conn.Close()
		return nil, 0, err
	}
	return conn, gen, nil
}

// readHello reads a connection's first frame, which names its path and
// generation, exactly (nothing after it is consumed).
func readHello(ctx context.Context, conn *net.TCPConn, want int) (uint64, error) {
	dl := time.Now().Add(helloTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	conn.SetReadDeadline(dl)
	defer conn.SetReadDeadline(time.Time{})
	var b [HeaderSize]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return 0, fmt.Errorf("ft: path %d: no hello from %s: %w", want, conn.RemoteAddr(), err)
	}
	h, err := DecodeHeader(b[:])
	if err != nil {
		return 0, fmt.Errorf("ft: path %d: hello from %s: %w", want, conn.RemoteAddr(), err)
	}
	if h.Type != FrameHello || int(h.Aux) != want {
		return 0, fmt.Errorf("ft: path %d: %s sent a %s frame for path %d instead of a hello", want, conn.RemoteAddr(), h.Type, h.Aux)
	}
	return h.Seq, nil
}
