package launch

import "syscall"

// sysProcAttr puts each rank in its own process group (so a signal reaches
// the rank and whatever it started, and a terminal's Ctrl-C reaches only
// vcclrun, which forwards it once) and kills the rank if vcclrun dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
