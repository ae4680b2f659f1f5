package boltstore

import (
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(path, nil, []byte("a"), []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		for _, name := range []string{"a", "b"} {
			if tx.Bucket([]byte(name)) == nil {
				t.Errorf("bucket %q missing", name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The file is locked by db: a second open fails after the timeout with a clear error.
	_, err = Open(path, &bolt.Options{NoSync: true})
	if err == nil || !strings.Contains(err.Error(), "in use by another hermes process") {
		t.Errorf("second open: %v", err)
	}
}
