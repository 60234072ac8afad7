package tcp

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Config is what the environment says about TCP connections, for tcp's and
// transport/ft's backends alike. The transports never read the environment
// themselves: the program's configuration step (collective.New) parses it
// once with ParseConfig and passes the values down in Backend fields, after
// letting options override them.
type Config struct {
	Interfaces string // VCCL_SOCKET_IFNAME: comma list of interfaces; "" loopback
	Congestion string // VCCL_TCP_CONGESTION; "" reno within the host, else the kernel's
	SockBuf    int    // VCCL_TCP_SOCKBUF: bytes; -1 autotuning; 0 the same-host default (localSockBuf)
}

// ParseConfig reads the VCCL_SOCKET_IFNAME, VCCL_TCP_CONGESTION and
// VCCL_TCP_SOCKBUF variables through getenv. Its errors name the variable.
func ParseConfig(getenv func(string) string) (Config, error) {
	c := Config{Interfaces: strings.TrimSpace(getenv(EnvSocketIfname)), Congestion: strings.TrimSpace(getenv(EnvCongestion))}
	if v := strings.TrimSpace(getenv(EnvSockBuf)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n == 0 || n < -1 {
			return c, fmt.Errorf("tcp: %s=%q: want a size in bytes, or -1 for the kernel's autotuning", EnvSockBuf, v)
		}
		c.SockBuf = n
	}
	return c, nil
}

// SetupConn gives conn the options of every connection of tcp and
// transport/ft: TCP_NODELAY; the congestion control congestion, or with ""
// reno within the host (see localReno); and the socket buffer sockBuf (bytes
// when positive, the kernel's autotuning when negative, localSockBuf's
// same-host rule when 0).
func SetupConn(conn *net.TCPConn, congestion string, sockBuf int) error {
	if err := conn.SetNoDelay(true); err != nil {
		return fmt.Errorf("tcp: TCP_NODELAY on %s: %w", conn.LocalAddr(), err)
	}
	if err := setCongestionOrDefault(conn, congestion); err != nil {
		return err
	}
	if sockBuf == 0 {
		sockBuf = localSockBuf(conn)
	}
	if sockBuf > 0 {
		if err := conn.SetWriteBuffer(sockBuf); err != nil {
			return fmt.Errorf("tcp: SO_SNDBUF on %s: %w", conn.LocalAddr(), err)
		}
		if err := conn.SetReadBuffer(sockBuf); err != nil {
			return fmt.Errorf("tcp: SO_RCVBUF on %s: %w", conn.LocalAddr(), err)
		}
	}
	return nil
}
