//go:build !unix

package boltstore

import (
	"os"
	"time"
)

// journaled reports whether Open gives writable files a journal on this platform: not without
// flock, so bbolt syncs each commit twice as it does upstream.
const journaled = false

func lockJournal(*os.File, time.Duration) error { return errInUse }
