// Package boltstore opens the bbolt files of the embedded (monolithic) backends the same way for
// every service: a lock timeout so that a second process fails clearly instead of hanging, and
// the service's buckets created on first use.
package boltstore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Open opens (or creates) the bbolt file at path with mode 0600 and creates the given buckets if
// they are missing. opts may be nil; a zero Timeout becomes one second, so a file held by
// another process is an error ("in use by another hermes process") rather than a hang.
//
// A file opened for writing keeps its free list in memory only (as etcd does): bbolt's default
// writes the whole list of free pages with every commit, so once deleted data (a deleted
// session, a pruned index) has left N free pages, every commit writes and syncs 8·N bytes more
// (BenchmarkCommitAfterDelete: with 20,000 free pages a one-key commit took 2.4–2.5 ms, against
// 1.0–1.3 ms without the list). The list is rebuilt by walking the file when it is opened
// instead (about 0.35 s for 440 MB in the page cache), at open rather than on the first write.
// Pages are still handed out lowest first (bbolt's array free list), which keeps a commit's
// pages near each other. A file written either way opens with either setting.
func Open(path string, opts *bolt.Options, buckets ...[]byte) (*bolt.DB, error) {
	o := bolt.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if !o.ReadOnly {
		o.NoFreelistSync = true
		o.PreLoadFreelist = true
	}
	if journaled {
		// A file opened without syncs (or only to read) gets no journal, but what an earlier
		// process left in one is written into the file first.
		j, err := openJournal(path, o.ReadOnly || o.NoSync, o.Timeout)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		if j != nil {
			o.Journal = j // bbolt closes it, with the DB or when Open fails
		}
	}
	db, err := bolt.Open(path, 0o600, &o)
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open %s: %w", path, errInUse)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if len(buckets) == 0 {
		return db, nil
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return db, nil
}

// DropBuckets deletes the buckets of a former layout that are still in the file (the records a
// store moved elsewhere, such as onto internal/lease).
func DropBuckets(db *bolt.DB, buckets ...[]byte) error {
	return db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if tx.Bucket(b) == nil {
				continue
			}
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteWhere deletes the keys of b for which match reports true and returns how many it
// deleted. The keys are collected first and deleted after, since a bucket must not change while
// ForEach walks it.
func DeleteWhere(b *bolt.Bucket, match func(k, v []byte) (bool, error)) (int, error) {
	var keys [][]byte
	err := b.ForEach(func(k, v []byte) error {
		ok, err := match(k, v)
		if ok {
			keys = append(keys, bytes.Clone(k))
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// DeleteRange deletes the keys k of b with from <= k < to and returns how many it deleted. It
// walks the keys there are, so its work follows them, not the numbers the bounds encode; the keys
// are collected first and deleted after, as in DeleteWhere.
func DeleteRange(b *bolt.Bucket, from, to []byte) (int, error) {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(from); k != nil && bytes.Compare(k, to) < 0; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// MoveInto copies every bucket of the bbolt file at path into g's file, then renames the file to
// path+".moved" so that it is not read again; it reports whether there was a file. It is for a
// store that moved into another's file (the monolith's orchestrator records, into session.db).
func MoveInto(g *Group, path string) (bool, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	src, err := Open(path, &bolt.Options{ReadOnly: true})
	if err != nil {
		return false, err
	}
	err = src.View(func(stx *bolt.Tx) error {
		return g.Update(func(dtx *bolt.Tx) error {
			return stx.ForEach(func(name []byte, b *bolt.Bucket) error {
				d, err := dtx.CreateBucketIfNotExists(name)
				if err != nil {
					return err
				}
				return copyBucket(d, b)
			})
		})
	})
	if cerr := src.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("move %s: %w", path, err)
	}
	if err := os.Rename(path, path+".moved"); err != nil {
		return true, err
	}
	// Its journal goes with it (openJournal has replayed it).
	if err := os.Rename(path+journalSuffix, path+".moved"+journalSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, err
	}
	return true, nil
}

// copyBucket copies src's keys and nested buckets into dst.
func copyBucket(dst, src *bolt.Bucket) error {
	if err := dst.SetSequence(max(dst.Sequence(), src.Sequence())); err != nil {
		return err
	}
	return src.ForEach(func(k, v []byte) error {
		if v != nil {
			return dst.Put(k, v)
		}
		d, err := dst.CreateBucketIfNotExists(k)
		if err != nil {
			return err
		}
		return copyBucket(d, src.Bucket(k))
	})
}

// ParseCursor reads a page cursor of an index under prefix: the hex of the last key a page
// returned. "" is the first page (nil, true); a cursor that is not hex or not under prefix is not
// valid (false).
func ParseCursor(cursor string, prefix []byte) ([]byte, bool) {
	if cursor == "" {
		return nil, true
	}
	after, err := hex.DecodeString(cursor)
	return after, err == nil && bytes.HasPrefix(after, prefix)
}

// SeekPage moves c to the first key of a page under prefix — the first key, or the one after
// after (a key ParseCursor returned) — and returns it; it may lie outside prefix, which ends the
// page.
func SeekPage(c *bolt.Cursor, prefix, after []byte) []byte {
	if after == nil {
		k, _ := c.Seek(prefix)
		return k
	}
	k, _ := c.Seek(after)
	if bytes.Equal(k, after) {
		k, _ = c.Next()
	}
	return k
}

// FileOf returns which of n files holds key's records when a store spreads its records over
// several files by key (the monolith's sessions, by session id). What is stored depends on it:
// it must give the same answer in every release.
func FileOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	// FNV-1a, 32 bits, without hash/fnv's allocations: it runs on every call of a session.
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
