//go:build !cgo || !linux

package nvml

import "fmt"

func openNVML() (source, error) {
	return nil, fmt.Errorf("%w: built without cgo (go-nvml needs it) or not on Linux", ErrNoDriver)
}
