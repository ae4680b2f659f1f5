package boltstore

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkCommitAfterDelete measures a small commit (one key appended, as a turn's end appends
// its records) in a file where deleted data left free pages (a deleted session's messages, a
// pruned index), with bbolt's default options (the free list written by every commit) and as
// Open opens a file (kept in memory). free is how many pages were freed. It reports the pwrite
// calls a commit makes; the free list is one of them, however many pages it spans.
func BenchmarkCommitAfterDelete(b *testing.B) {
	openers := []struct {
		name string
		open func(path string) (*bolt.DB, error)
	}{
		{"bbolt-default", func(path string) (*bolt.DB, error) { return bolt.Open(path, 0o600, nil) }},
		{"Open", func(path string) (*bolt.DB, error) { return Open(path, nil) }},
	}
	for _, free := range []int{0, 2000, 20000} {
		for _, o := range openers {
			b.Run(fmt.Sprintf("free=%d/%s", free, o.name), func(b *testing.B) {
				db, err := o.open(filepath.Join(b.TempDir(), "f.db"))
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				freePages(b, db, free)
				if err := db.Update(func(tx *bolt.Tx) error {
					_, err := tx.CreateBucket([]byte("live"))
					return err
				}); err != nil {
					b.Fatal(err)
				}
				val := make([]byte, 200)
				i := uint64(0)
				before := db.Stats().TxStats
				b.ResetTimer()
				for b.Loop() {
					i++
					key := binary.BigEndian.AppendUint64(nil, i)
					if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("live")).Put(key, val) }); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				after := db.Stats().TxStats
				d := after.Sub(&before)
				b.ReportMetric(float64(d.GetWrite())/float64(b.N), "pwrites/commit")
			})
		}
	}
}
