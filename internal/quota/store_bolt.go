package quota

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/errclass"
)

var countersBucket = []byte("counters")

// BoltStore is the monolith's store: buckets and slots in memory (they refill and free
// themselves within minutes), counters (sessions, stored bytes, tokens of the day) in a bbolt
// file so a restart does not reset them.
type BoltStore struct {
	*MemoryStore
	db    *bolt.DB
	group *boltstore.Group
}

// OpenBoltStore opens (or creates) the counters' file at path.
func OpenBoltStore(path string) (*BoltStore, error) {
	db, err := boltstore.Open(path, nil, countersBucket)
	if err != nil {
		return nil, err
	}
	// Counters that expired (the tokens of past days) are dropped at each start.
	now := time.Now()
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := boltstore.DeleteWhere(tx.Bucket(countersBucket), func(_, v []byte) (bool, error) {
			return len(v) == 16 && binary.BigEndian.Uint64(v[8:]) != 0 && decodeCounter(v, now) == 0, nil
		})
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("quota: sweep %s: %w", path, err)
	}
	return &BoltStore{MemoryStore: newMemoryStore(), db: db, group: boltstore.NewGroup(db)}, nil
}

// Close closes the file.
func (b *BoltStore) Close() error { return b.db.Close() }

// A counter is stored as its value and its expiry (Unix nanoseconds, 0: never), big-endian.
func decodeCounter(v []byte, now time.Time) int64 {
	if len(v) != 16 {
		return 0
	}
	if exp := int64(binary.BigEndian.Uint64(v[8:])); exp != 0 && exp <= now.UnixNano() {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v[:8]))
}

// Add implements Store.
func (b *BoltStore) Add(_ context.Context, key string, n, limit int64, ttl time.Duration) (int64, bool, error) {
	var out int64
	var added bool
	err := b.group.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(countersBucket)
		now := b.now()
		old := bk.Get([]byte(key))
		v, ok := addCounter(decodeCounter(old, now), n, limit)
		out, added = v, ok
		if !ok {
			return nil
		}
		var exp int64
		switch {
		case ttl > 0:
			exp = now.Add(ttl).UnixNano()
		case len(old) == 16:
			exp = int64(binary.BigEndian.Uint64(old[8:]))
		}
		if v == 0 && exp == 0 {
			return bk.Delete([]byte(key))
		}
		buf := make([]byte, 16)
		binary.BigEndian.PutUint64(buf[:8], uint64(v))
		binary.BigEndian.PutUint64(buf[8:], uint64(exp))
		return bk.Put([]byte(key), buf)
	})
	if err != nil {
		return 0, false, errclass.Mark(errclass.Unavailable, "quota: bolt", err)
	}
	return out, added, nil
}

// Drain implements Store.
func (b *BoltStore) Drain(_ context.Context, key string) (int64, error) {
	var v int64
	err := b.group.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(countersBucket)
		v = decodeCounter(bk.Get([]byte(key)), b.now())
		return bk.Delete([]byte(key))
	})
	if err != nil {
		return 0, errclass.Mark(errclass.Unavailable, "quota: bolt", err)
	}
	return v, nil
}
