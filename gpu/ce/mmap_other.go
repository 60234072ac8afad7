//go:build !unix

package ce

import (
	"errors"
	"os"
)

func mapFile(*os.File, int) ([]byte, error) {
	return nil, errors.New("shared memory between processes needs a Unix system")
}

func unmapFile([]byte) error { return nil }
