//go:build linux

package fault

import "github.com/vccl-go/vccl/flowtel"

func flowNow() int64 { return flowtel.Monotonic() }
