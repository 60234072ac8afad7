//go:build unix

package live

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// lockTimeout bounds the wait for another process's lock.
const lockTimeout = 10 * time.Second

// lockFile takes an exclusive lock on path (created if missing) and
// returns its release. It gives up after lockTimeout.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(lockTimeout)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, errors.New("another process holds the lock")
		}
		time.Sleep(time.Millisecond)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
