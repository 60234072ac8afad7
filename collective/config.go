package collective

import (
	"os"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/flowtel"
)

// The comm library reads the environment here and nowhere else (the
// layering test checks it). New, NewFromEnv and NewLocal read it once per
// call, parse it into one typed configuration (defaultOptions) that their
// options then override, and pass the values down: transports, flowtel and
// bootstrap take values and parse functions, never the process environment.

// envOptions is the configuration the process's environment gives. The
// clock source is process-wide, so it takes effect here, before the
// communicator stamps its first record.
func envOptions() options {
	o := defaultOptions(os.Getenv)
	if len(o.errs) == 0 {
		flowtel.UseClockSource(o.clock)
	}
	return o
}

// launcherEnv is the rank layout a launcher set (bootstrap.FromEnv).
func launcherEnv() (bootstrap.Env, error) { return bootstrap.FromEnv(os.Getenv) }
