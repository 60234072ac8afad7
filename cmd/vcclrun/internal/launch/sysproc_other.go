//go:build unix && !linux

package launch

import "syscall"

// sysProcAttr puts each rank in its own process group; see the Linux version.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
