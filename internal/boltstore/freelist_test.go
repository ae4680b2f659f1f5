package boltstore

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestOpenFreelist checks that a file opened by Open keeps its free list out of the file (no
// commit writes it), that the free pages a file had are still known and reused after the
// switch either way, and that a file so written opens with bbolt's defaults (an older Hermes).
func TestOpenFreelist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	// A file as an older Hermes wrote it: the free list synced, 2,000 pages of it free.
	legacy, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	freePages(t, legacy, 2000)
	want := legacy.Stats().FreePageN
	if err := legacy.Close(); err != nil {
		t.Fatal(err)
	}
	if got := syncedFreelist(t, path); !got {
		t.Fatal("bbolt's default should sync the free list; the test reads the meta page wrong")
	}

	for round, opener := range []string{"Open on the legacy file", "Open on its own file"} {
		db, err := Open(path, nil, []byte("live"))
		if err != nil {
			t.Fatal(err)
		}
		// Rebuilt (or read) at open, before any write.
		if got := db.Stats().FreePageN; got < want*9/10 {
			t.Errorf("%s: %d free pages known at open, want about %d", opener, got, want)
		}
		before := fileSize(t, path)
		putValues(t, db, 100*(round+1), 1000*(round+1)) // 100 and 200 keys: about 25 and 50 pages a round
		if after := fileSize(t, path); after != before {
			t.Errorf("%s: the file grew from %d to %d bytes; the free pages were not reused", opener, before, after)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if syncedFreelist(t, path) {
			t.Errorf("%s: a commit wrote the free list into the file", opener)
		}
		want -= 300 // more than putValues took (75 pages of values) and the tree's own pages
	}

	// An older Hermes opens the file, rebuilds the list and syncs it again.
	old, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := old.Stats().FreePageN; got < want*9/10 {
		t.Errorf("bbolt's defaults: %d free pages, want about %d", got, want)
	}
	err = old.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket([]byte("live")).Stats().KeyN; n != 300 {
			t.Errorf("bbolt's defaults: %d keys in live, want 300", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if !syncedFreelist(t, path) {
		t.Error("bbolt's defaults did not write the free list back")
	}
}

// freePages writes about n pages into a bucket and deletes it, leaving them free.
func freePages(t testing.TB, db *bolt.DB, n int) {
	t.Helper()
	val := make([]byte, 1000)
	err := db.Update(func(tx *bolt.Tx) error {
		gone, err := tx.CreateBucket([]byte("gone"))
		if err != nil {
			return err
		}
		for i := range n * 4 {
			if err := gone.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), val); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("gone")) }); err != nil {
		t.Fatal(err)
	}
}

// putValues puts keys [from, to) of 1,000-byte values into the bucket live, one commit.
func putValues(t testing.TB, db *bolt.DB, n, from int) {
	t.Helper()
	val := make([]byte, 1000)
	err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("live"))
		for i := range n {
			if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(from+i)), val); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// syncedFreelist reads the file's current meta page (of the two, the one with the higher
// transaction id) and reports whether it points at a free-list page. The layout is bbolt's:
// a 16-byte page header, then magic, version, page size and flags (4 bytes each), the root
// bucket (16), the free list's page, the high-water page and the transaction id (8 each).
func syncedFreelist(t testing.TB, path string) bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(binary.LittleEndian.Uint32(raw[16+8:]))
	var freelist, txid uint64
	for i := range 2 {
		m := raw[i*pageSize+16:]
		if id := binary.LittleEndian.Uint64(m[48:]); id >= txid {
			txid, freelist = id, binary.LittleEndian.Uint64(m[32:])
		}
	}
	return freelist != ^uint64(0)
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
