package capi

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vccl-go/vccl/collective"
)

// capi is libnccl.so.2's entry point, as a command is a program's: it reads
// the environment here, once, and nowhere else (the layering test checks
// it). The communicators it makes read theirs in collective.New, and the GPU
// engine its own in gpu/ce.

// envConfig is what the environment says to the C API.
type envConfig struct {
	debug     string        // VCCL_DEBUG, else NCCL_DEBUG
	debugFile string        // VCCL_DEBUG_FILE
	ifname    string        // VCCL_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME
	timeout   time.Duration // VCCL_TIMEOUT, else defaultOpTimeout
}

// defaultOpTimeout: NCCL itself never gives up; PyTorch's watchdog does,
// after 10 minutes by default, so the C API waits longer than any caller
// would.
const defaultOpTimeout = 30 * time.Minute

var processEnv = sync.OnceValue(func() envConfig { return parseEnv(os.Getenv) })

// parseEnv reads the C API's variables through getenv. A VCCL_TIMEOUT that
// is not a positive duration (or number of seconds) leaves the default, as
// NCCL ignores values it cannot use.
func parseEnv(getenv func(string) string) envConfig {
	first := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	e := envConfig{debug: first("VCCL_DEBUG", "NCCL_DEBUG"), debugFile: getenv("VCCL_DEBUG_FILE"),
		ifname: first("VCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"), timeout: defaultOpTimeout}
	if v := strings.TrimSpace(getenv(collective.EnvTimeout)); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			e.timeout = d
		} else if s, err := strconv.Atoi(v); err == nil && s > 0 {
			e.timeout = time.Duration(s) * time.Second
		}
	}
	return e
}
