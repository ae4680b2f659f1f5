//go:build !linux

package main

// releaseStartupPages does nothing here: see pages_linux.go.
func releaseStartupPages() (int64, error) { return 0, nil }
