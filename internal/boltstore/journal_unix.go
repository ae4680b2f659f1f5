//go:build unix

package boltstore

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// journaled reports whether Open gives writable files a journal on this platform.
const journaled = true

// lockJournal takes an exclusive flock on the journal, waiting up to timeout for another
// process to release it, as bbolt does for its file.
func lockJournal(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock journal: %w", err)
		}
		if time.Now().After(deadline) {
			return errInUse
		}
		time.Sleep(50 * time.Millisecond)
	}
}
