package quota

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
)

var countersBucket = []byte("counters")

// defaultFlushDelay is how long a counter's change may wait in memory before it is written.
const defaultFlushDelay = time.Second

// BoltStore is the monolith's store: buckets and slots in memory (they refill and free
// themselves within minutes), counters (sessions, stored bytes, tokens of the day) in memory too
// and written behind to a bbolt file, so a restart does not reset them.
//
// The counters are written behind rather than in a commit of their own: every appended batch
// counts its bytes twice (the user's and the session's), which cost two commits, four fsyncs, per
// append. Changes are written together at most about flushDelay after the first of them, and at
// Close. A crash loses at most that last second of counting, which is within what the counters
// already allow: a session's bytes are counted after its append, in another write, so a crash
// between the two drifts them too.
type BoltStore struct {
	*MemoryStore
	db         *bolt.DB
	flushDelay time.Duration
	// flushed, when set, is called after each write of the flushing goroutine (tests).
	flushed func(error)

	// dirtyMu guards dirty: the keys whose counter changed since it was last written. It is
	// never held with MemoryStore.mu.
	dirtyMu sync.Mutex
	dirty   map[string]struct{}
	// kick asks the flusher for a write (buffered, one pending); stop and done end it.
	kick     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// OpenBoltStore opens (or creates) the counters' file at path.
func OpenBoltStore(path string) (*BoltStore, error) {
	return openBoltStore(path, defaultFlushDelay, nil)
}

func openBoltStore(path string, delay time.Duration, flushed func(error)) (*BoltStore, error) {
	db, err := boltstore.Open(path, nil, countersBucket)
	if err != nil {
		return nil, err
	}
	b := &BoltStore{
		MemoryStore: NewMemoryStore(), db: db, flushDelay: delay, flushed: flushed,
		dirty: map[string]struct{}{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	// Counters that expired (the tokens of past days) are dropped at each start; the others are
	// loaded into memory, where they are counted from now on.
	now := time.Now()
	err = db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(countersBucket)
		_, err := boltstore.DeleteWhere(bk, func(_, v []byte) (bool, error) {
			return len(v) == 16 && binary.BigEndian.Uint64(v[8:]) != 0 && decodeCounter(v, now) == 0, nil
		})
		if err != nil {
			return err
		}
		return bk.ForEach(func(k, v []byte) error {
			if c, ok := counterOf(v); ok {
				b.counters[string(k)] = c
			}
			return nil
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("quota: load %s: %w", path, err)
	}
	go b.flusher()
	return b, nil
}

// Close writes the changed counters and closes the file.
func (b *BoltStore) Close() error {
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.done
	return errors.Join(b.flush(), b.db.Close())
}

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

// counterOf decodes a stored counter; ok is false for a malformed value.
func counterOf(v []byte) (memCounter, bool) {
	if len(v) != 16 {
		return memCounter{}, false
	}
	c := memCounter{v: int64(binary.BigEndian.Uint64(v[:8]))}
	if exp := int64(binary.BigEndian.Uint64(v[8:])); exp != 0 {
		c.expires = time.Unix(0, exp)
	}
	return c, true
}

func encodeCounter(c memCounter) []byte {
	buf := make([]byte, 16)
	binary.BigEndian.PutUint64(buf[:8], uint64(c.v))
	if !c.expires.IsZero() {
		binary.BigEndian.PutUint64(buf[8:], uint64(c.expires.UnixNano()))
	}
	return buf
}

// Add implements Store: counted in memory, written behind. An addition of 0 (a read) or one
// refused changes nothing and writes nothing.
func (b *BoltStore) Add(ctx context.Context, key string, n, limit int64, ttl time.Duration) (int64, bool, error) {
	v, ok, err := b.MemoryStore.Add(ctx, key, n, limit, ttl)
	if err == nil && ok && (n != 0 || ttl > 0) {
		b.changed(key)
	}
	return v, ok, err
}

// Drain implements Store.
func (b *BoltStore) Drain(ctx context.Context, key string) (int64, error) {
	v, err := b.MemoryStore.Drain(ctx, key)
	if err == nil {
		b.changed(key)
	}
	return v, err
}

// changed marks key for the next write and wakes the flusher.
func (b *BoltStore) changed(key string) {
	b.dirtyMu.Lock()
	b.dirty[key] = struct{}{}
	b.dirtyMu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// flusher writes the changed counters about flushDelay after the first change, until Close.
func (b *BoltStore) flusher() {
	defer close(b.done)
	t := time.NewTimer(b.flushDelay)
	t.Stop()
	for {
		select {
		case <-b.stop:
			t.Stop()
			return
		case <-b.kick:
		}
		// The changes of the next flushDelay share this write.
		t.Reset(b.flushDelay)
		select {
		case <-b.stop:
			t.Stop()
			return
		case <-t.C:
		}
		err := b.flush()
		if err != nil {
			// The keys stay dirty; the next change (or Close) writes them again.
			slog.Error("quota: counters not written", "error", err)
		}
		if b.flushed != nil {
			b.flushed(err)
		}
	}
}

// flush writes the changed counters in one commit: their value now, or their deletion when they
// are gone (drained, swept) or 0 without expiry. On failure the keys stay dirty.
func (b *BoltStore) flush() error {
	b.dirtyMu.Lock()
	keys := b.dirty
	b.dirty = map[string]struct{}{}
	b.dirtyMu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	type write struct {
		key string
		val []byte // nil: delete
	}
	writes := make([]write, 0, len(keys))
	b.mu.Lock()
	for k := range keys {
		c, ok := b.counters[k]
		if !ok || (c.v == 0 && c.expires.IsZero()) {
			writes = append(writes, write{key: k})
			continue
		}
		writes = append(writes, write{key: k, val: encodeCounter(c)})
	}
	b.mu.Unlock()
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(countersBucket)
		for _, w := range writes {
			var err error
			if w.val == nil {
				err = bk.Delete([]byte(w.key))
			} else {
				err = bk.Put([]byte(w.key), w.val)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.dirtyMu.Lock()
		for k := range keys {
			b.dirty[k] = struct{}{}
		}
		b.dirtyMu.Unlock()
	}
	return err
}
