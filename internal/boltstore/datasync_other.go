//go:build !linux

package boltstore

import "os"

// datasync flushes f (fsync where there is no fdatasync, as bbolt does).
func datasync(f *os.File) error { return f.Sync() }
