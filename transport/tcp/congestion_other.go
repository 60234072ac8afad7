//go:build !linux

package tcp

import (
	"fmt"
	"net"
	"runtime"
)

// setCongestion fails: TCP_CONGESTION is Linux's.
func setCongestion(conn *net.TCPConn, name string) error {
	return fmt.Errorf("tcp: TCP congestion control %q (Backend.Congestion or %s) on %s: not supported on %s", name, EnvCongestion, conn.LocalAddr(), runtime.GOOS)
}

// congestionOf fails: TCP_CONGESTION is Linux's.
func congestionOf(int) (string, error) {
	return "", fmt.Errorf("tcp: TCP_CONGESTION not supported on %s", runtime.GOOS)
}

// bufAllowed reports false: off Linux, autotuning is left alone.
func bufAllowed(int) bool { return false }
