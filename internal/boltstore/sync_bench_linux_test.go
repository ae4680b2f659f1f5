package boltstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// BenchmarkSyncPages measures what the disk charges for a bbolt commit's two sync calls: k
// pages written and synced, then the meta page written and synced. bbolt writes each dirty page
// by its own pwrite, in page order; whether the pages lie together or apart decides the price
// on a virtual disk, where each separate extent is a request of its own. Run with
// -benchtime 400x; compare scattered and contiguous at the same k. Linux only, for bbolt's
// fdatasync.
func BenchmarkSyncPages(b *testing.B) {
	const pageSize, slots = 4096, 100
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "sync.db"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	// Written once, so that the runs overwrite allocated blocks as bbolt does in steady state.
	chunk := make([]byte, 1<<20)
	for off := 0; off < 16<<20; off += len(chunk) {
		if _, err := f.WriteAt(chunk, int64(off)); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	j, err := os.OpenFile(filepath.Join(b.TempDir(), "sync.db.journal"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	for off := 0; off < journalSize; off += len(chunk) {
		if _, err := j.WriteAt(chunk, int64(off)); err != nil {
			b.Fatal(err)
		}
	}
	if err := j.Sync(); err != nil {
		b.Fatal(err)
	}
	page := make([]byte, pageSize)
	for _, k := range []int{1, 8, 17, 28} {
		// A journaled commit (journal.go): the pages and the meta page as one record, synced,
		// then written in place unsynced.
		b.Run(fmt.Sprintf("pages=%d/journal", k), func(b *testing.B) {
			rec := make([]byte, (k+2)*pageSize)
			var off int64
			for b.Loop() {
				if off+int64(len(rec)) > journalSize {
					off = 0
				}
				if _, err := j.WriteAt(rec, off); err != nil {
					b.Fatal(err)
				}
				off += int64(len(rec))
				if err := datasync(j); err != nil {
					b.Fatal(err)
				}
				for _, id := range rand.Perm(slots)[:k] {
					if _, err := f.WriteAt(page, int64(16+id)*pageSize); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := f.WriteAt(page, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, k := range []int{1, 8, 17, 28} {
		for _, scattered := range []bool{true, false} {
			name := fmt.Sprintf("pages=%d/contiguous", k)
			if scattered {
				name = fmt.Sprintf("pages=%d/scattered", k)
			}
			b.Run(name, func(b *testing.B) {
				i := 0
				for b.Loop() {
					base := 16 + (i%30)*slots*2 // pages of the last commit are not rewritten at once
					i++
					ids := make([]int, k)
					for j := range ids {
						ids[j] = base + j
					}
					if scattered {
						ids = rand.Perm(slots)[:k]
						for j := range ids {
							ids[j] += base
						}
					}
					for _, id := range ids {
						if _, err := f.WriteAt(page, int64(id)*pageSize); err != nil {
							b.Fatal(err)
						}
					}
					if err := syscall.Fdatasync(int(f.Fd())); err != nil {
						b.Fatal(err)
					}
					if _, err := f.WriteAt(page, 0); err != nil {
						b.Fatal(err)
					}
					if err := syscall.Fdatasync(int(f.Fd())); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
