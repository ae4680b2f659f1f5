package quota

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
)

var countersBucket = []byte("counters")

// fileDelay is how long a counter's change waits for a commit in a file of its own.
const fileDelay = time.Second

// BoltStore is the monolith's store: buckets and slots in memory (they refill and free
// themselves within minutes), counters (sessions, stored bytes, tokens of the day) in memory too
// and written to a bbolt file, so a restart does not reset them.
//
// A counter's change is not a commit of its own: every appended batch counts its bytes twice
// (the user's and the session's), which cost two commits, four fsyncs, per append. The changed
// counters are written by the file's first commit a second after the first of them
// (boltstore.Group.Later), each once with its value then, and at Close; no caller waits for the
// write transaction (at 64 turns at once, waiting for it behind the commits' fsyncs was two
// thirds of the turns' waits for the session file). In the session store's file
// (OpenBoltStoreOn) that commit is usually a turn's; they do not ride on every turn's commit,
// whose pages they would add to. A crash loses the changes not yet committed, which is
// within what the counters already allow: a session's bytes are counted after its append, in
// another write, so a crash between the two drifts them too.
type BoltStore struct {
	*MemoryStore
	db     *bolt.DB
	group  *boltstore.Group
	ownsDB bool
	// dirty holds the keys changed since the last flush, guarded by MemoryStore.mu; a flush is
	// waiting for its commit (Group.Later) while it is not empty.
	dirty map[string]struct{}
}

// OpenBoltStore opens (or creates) the counters' file at path.
func OpenBoltStore(path string) (*BoltStore, error) {
	return openBoltStore(path, fileDelay)
}

func openBoltStore(path string, delay time.Duration) (*BoltStore, error) {
	db, err := boltstore.Open(path, nil, countersBucket)
	if err != nil {
		return nil, err
	}
	b, err := newBoltStore(db, boltstore.NewGroupDelay(db, delay), true)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("quota: load %s: %w", path, err)
	}
	return b, nil
}

// OpenBoltStoreOn keeps the counters in db, another store's open file, committing through g,
// that store's group; Close leaves db open for its owner.
func OpenBoltStoreOn(db *bolt.DB, g *boltstore.Group) (*BoltStore, error) {
	b, err := newBoltStore(db, g, false)
	if err != nil {
		return nil, fmt.Errorf("quota: load counters: %w", err)
	}
	return b, nil
}

// newBoltStore drops the counters that expired (the tokens of past days) and loads the others
// into memory, where they are counted from now on.
func newBoltStore(db *bolt.DB, g *boltstore.Group, owns bool) (*BoltStore, error) {
	b := &BoltStore{MemoryStore: newMemoryStore(), db: db, group: g, ownsDB: owns, dirty: map[string]struct{}{}}
	now := time.Now()
	err := g.Update(func(tx *bolt.Tx) error {
		clear(b.counters)
		bk, err := tx.CreateBucketIfNotExists(countersBucket)
		if err != nil {
			return err
		}
		_, err = boltstore.DeleteWhere(bk, func(_, v []byte) (bool, error) {
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
		return nil, err
	}
	return b, nil
}

// Close commits the changed counters and closes the file when it is the store's own.
func (b *BoltStore) Close() error {
	b.group.Sync()
	if !b.ownsDB {
		return nil
	}
	return b.db.Close()
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

// Add implements Store: counted in memory, written deferred. An addition of 0 (a read) or a
// refused one changes nothing and writes nothing.
func (b *BoltStore) Add(ctx context.Context, key string, n, limit int64, ttl time.Duration) (int64, bool, error) {
	v, ok, err := b.MemoryStore.Add(ctx, key, n, limit, ttl)
	if err == nil && ok && (n != 0 || ttl > 0) {
		b.write(key)
	}
	return v, ok, err
}

// Drain implements Store.
func (b *BoltStore) Drain(ctx context.Context, key string) (int64, error) {
	v, err := b.MemoryStore.Drain(ctx, key)
	if err == nil {
		b.write(key)
	}
	return v, err
}

// write marks key's counter for the later write's commit, which stores it as memory has it then.
func (b *BoltStore) write(key string) {
	b.mu.Lock()
	first := len(b.dirty) == 0
	b.dirty[key] = struct{}{}
	b.mu.Unlock()
	if first {
		// taken holds the keys the later write took from dirty: when its transaction is
		// rolled back for another later write's failure, it runs again (boltstore.Group.Later)
		// and must write them again, dirty no longer having them.
		taken := map[string]struct{}{}
		b.group.Later(func(tx *bolt.Tx) error { return b.flush(tx, taken) })
	}
}

// flush stores the changed counters as memory has them now: each one's value, or its deletion
// when it is gone or 0 without expiry. It moves the keys from dirty into taken and writes all
// of taken, so that it writes again what a run before it wrote in a transaction rolled back.
func (b *BoltStore) flush(tx *bolt.Tx, taken map[string]struct{}) error {
	type change struct {
		key string
		c   memCounter
		ok  bool
	}
	b.mu.Lock()
	for k := range b.dirty {
		taken[k] = struct{}{}
	}
	clear(b.dirty)
	changes := make([]change, 0, len(taken))
	for k := range taken {
		c, ok := b.counters[k]
		changes = append(changes, change{k, c, ok})
	}
	b.mu.Unlock()
	bk := tx.Bucket(countersBucket)
	for _, ch := range changes {
		var err error
		if !ch.ok || (ch.c.v == 0 && ch.c.expires.IsZero()) {
			err = bk.Delete([]byte(ch.key))
		} else {
			buf := make([]byte, 16)
			binary.BigEndian.PutUint64(buf[:8], uint64(ch.c.v))
			if !ch.c.expires.IsZero() {
				binary.BigEndian.PutUint64(buf[8:], uint64(ch.c.expires.UnixNano()))
			}
			err = bk.Put([]byte(ch.key), buf)
		}
		if err != nil {
			return fmt.Errorf("quota: write counter: %w", err)
		}
	}
	return nil
}
