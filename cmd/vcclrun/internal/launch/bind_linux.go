package launch

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bindingSupported: ranks can be bound to CPUs here.
const bindingSupported = true

// allowedCPUs lists the CPUs vcclrun itself may run on (its affinity mask:
// taskset, cgroups' cpusets and a batch system's allocation narrow it), with
// their cores from sysfs where it tells them.
func allowedCPUs() ([]cpuInfo, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read the CPU affinity: %w", err)
	}
	var cpus []cpuInfo
	for id := 0; id < len(set)*64; id++ {
		if !set.IsSet(id) {
			continue
		}
		c := cpuInfo{id: id}
		pkg, err1 := readSysInt(id, "physical_package_id")
		core, err2 := readSysInt(id, "core_id")
		if err1 == nil && err2 == nil {
			c.pkg, c.core, c.hasCore = pkg, core, true
		}
		cpus = append(cpus, c)
	}
	return cpus, nil
}

func readSysInt(cpu int, name string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/%s", cpu, name))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// startBound starts cmd with its affinity mask set to cpus. The child
// inherits the mask of the thread that forks it, so the fork runs on a
// locked thread narrowed for the moment, which then gets its own mask
// back. (Setting the child's mask after it started would race with the
// threads its runtime starts at once, and a locked thread must not simply
// exit: the ranks' parent-death signal is tied to the forking thread.)
func startBound(cmd *exec.Cmd, cpus []int) error {
	var set, old unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("read the CPU affinity: %w", err)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("bind to CPUs %s: %w", cpuList(cpus), err)
	}
	err := cmd.Start()
	// Restoring a mask this thread just had cannot fail short of the
	// CPUs going offline meanwhile; if it did, only vcclrun's own
	// bookkeeping thread would stay narrowed.
	_ = unix.SchedSetaffinity(0, &old)
	return err
}
