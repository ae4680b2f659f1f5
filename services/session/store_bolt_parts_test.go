package session

import (
	"bytes"
	mrand "math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// TestPartCursor walks each part of a bucket holding several parts (and keys of no part, which
// a layout-1 file in migration has) with every move, and compares with the part's keys sorted.
func TestPartCursor(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "parts.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rng := mrand.New(mrand.NewPCG(1, 2))
	prefixes := []byte{0x00, 'c', 'k', 'm', 't', 0xff}
	for _, sizes := range [][]int{{0, 0, 0, 0, 0, 0}, {1, 0, 1, 0, 1, 0}, {3, 200, 0, 900, 40, 5}, {0, 1, 2, 3, 4, 0}} {
		want := map[byte][][]byte{}
		err := db.Update(func(tx *bolt.Tx) error {
			_ = tx.DeleteBucket([]byte("b"))
			b, err := tx.CreateBucket([]byte("b"))
			if err != nil {
				return err
			}
			// Keys outside every part: one-byte keys and a nested bucket named like a part.
			if err := b.Put([]byte{'m'}, []byte("x")); err != nil {
				return err
			}
			if _, err := b.CreateBucket([]byte{'t'}); err != nil {
				return err
			}
			for i, p := range prefixes {
				for range sizes[i] {
					k := make([]byte, 1+rng.IntN(12))
					for j := range k {
						k[j] = byte(rng.IntN(256))
					}
					if err := (part{b, p}).Put(k, []byte{p}); err != nil {
						return err
					}
					want[p] = append(want[p], k)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range prefixes {
			keys := want[p]
			slices.SortFunc(keys, bytes.Compare)
			keys = slices.CompactFunc(keys, bytes.Equal)
			if err := db.View(func(tx *bolt.Tx) error {
				pt := part{tx.Bucket([]byte("b")), p}
				var fwd, back [][]byte
				c := pt.Cursor()
				for k, v := c.First(); k != nil; k, v = c.Next() {
					if !bytes.Equal(v, []byte{p}) {
						t.Errorf("part %x: key %x has value %x", p, k, v)
					}
					fwd = append(fwd, bytes.Clone(k))
				}
				for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
					back = append(back, bytes.Clone(k))
				}
				slices.Reverse(back)
				if diff := cmp.Diff(keys, fwd); diff != "" {
					t.Errorf("part %x, sizes %v, First/Next (-want +got):\n%s", p, sizes, diff)
				}
				if diff := cmp.Diff(keys, back); diff != "" {
					t.Errorf("part %x, sizes %v, Last/Prev (-want +got):\n%s", p, sizes, diff)
				}
				for _, k := range keys {
					if got := pt.Get(k); !bytes.Equal(got, []byte{p}) {
						t.Errorf("part %x: Get(%x) = %x", p, k, got)
					}
					// Seek to a key and to just below it.
					if got, _ := c.Seek(k); !bytes.Equal(got, k) {
						t.Errorf("part %x: Seek(%x) = %x", p, k, got)
					}
				}
				for range 50 {
					q := make([]byte, rng.IntN(4))
					for j := range q {
						q[j] = byte(rng.IntN(256))
					}
					i, _ := slices.BinarySearchFunc(keys, q, bytes.Compare)
					var wantK []byte
					if i < len(keys) {
						wantK = keys[i]
					}
					if got, _ := c.Seek(q); !bytes.Equal(got, wantK) {
						t.Errorf("part %x: Seek(%x) = %x, want %x", p, q, got, wantK)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
