package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// evictPageCache drops the page cache of the systems' binaries, so each is read back the same
// way when it first runs. A binary written moments ago (a fresh build) sits in the page cache in
// large folios, which the kernel maps 2 MB at a time: the same file then shows about 7 MB more
// resident memory than one read back by readahead (FilePmdMapped in smaps), which made peak RSS
// depend on how recently each binary was built rather than on the system.
func evictPageCache(paths ...string) error {
	for _, p := range paths {
		if p == "" {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		// Dirty pages are not dropped: write them first.
		err = unix.Fdatasync(int(f.Fd()))
		if err == nil {
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
