package boltstore

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkJournalCommit measures a commit that rewrites keys spread over a large bucket (about
// as many pages as a turn's commit): through Open's journal (one sync), and through bbolt's own
// commit (two syncs).
func BenchmarkJournalCommit(b *testing.B) {
	for _, tc := range []struct {
		name    string
		journal bool
	}{{"journal", true}, {"bbolt", false}} {
		b.Run(tc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "j.db")
			var db *bolt.DB
			var err error
			if tc.journal {
				db, err = Open(path, nil, []byte("b"))
			} else {
				db, err = bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, PreLoadFreelist: true})
				if err == nil {
					err = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists([]byte("b")); return err })
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			val := make([]byte, 100)
			const keys = 50_000
			for i := 0; i < keys; i += 5000 {
				if err := db.Update(func(tx *bolt.Tx) error {
					for k := i; k < i+5000; k++ {
						if err := tx.Bucket([]byte("b")).Put(binary.BigEndian.AppendUint64(nil, uint64(k)), val); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if err := db.Update(func(tx *bolt.Tx) error {
					for range 20 {
						if err := tx.Bucket([]byte("b")).Put(binary.BigEndian.AppendUint64(nil, rand.Uint64N(keys)), val); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			st := db.Stats()
			b.ReportMetric(float64(st.TxStats.GetWrite())/float64(b.N), "writes/op")
		})
	}
}
