package boltstore

import (
	"os"
	"syscall"
)

// datasync flushes f's data, and only the metadata needed to read it back (fdatasync), as bbolt
// does for its file on Linux.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
