//go:build !linux

package launch

import (
	"errors"
	"os/exec"
)

// bindingSupported: binding ranks to CPUs is Linux-only for now (macOS has
// no affinity masks).
const bindingSupported = false

func allowedCPUs() ([]cpuInfo, error) {
	return nil, errors.New("CPU binding is not supported on this system")
}

func startBound(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }
