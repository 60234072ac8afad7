//go:build !linux

package ft

import (
	"net"
	"time"
)

// kernelView stands for tcp_info, which only Linux offers: the monitor then
// judges a silent path by silence alone.
type kernelView struct{}

func (pa *path) tcpInfo() *kernelView { return nil }

func kernelSilence(*kernelView) time.Duration { return -1 }

func acked(*kernelView, time.Duration) bool { return false }

// ifRunning reports whether the named interface is up and running; true
// when none is named or it cannot be read.
func ifRunning(name string) bool {
	if name == "" {
		return true
	}
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return true
	}
	return ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagRunning != 0
}
