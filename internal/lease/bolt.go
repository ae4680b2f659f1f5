package lease

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hermes-agent/hermes/internal/boltstore"
	bolt "go.etcd.io/bbolt"
)

// Bolt keeps leases in a bucket of a bbolt file: durable, for one process (bbolt locks the file),
// for records that must survive a restart (idempotency results). A value is a state byte ('h'
// held, 'd' done), the expiry in Unix nanoseconds (8 bytes), the owner's length (uvarint), the
// owner and the data.
type Bolt struct {
	db     *bolt.DB
	bucket []byte
	hub    hub
	now    func() time.Time
	// held, when set, keeps the leases that are held (not done) in memory; the file then holds
	// only records (NewBoltRecords).
	held *Memory

	// pmu guards pending, the records of a NewBoltRecords store completed but not yet in the
	// file (they are Done leases in held meanwhile), closed, and the timer that flushes them.
	// It is never held across a transaction or a call of held.
	pmu     sync.Mutex
	pending map[string]boltEntry
	closed  bool
	timer   *time.Timer
}

// recordDelay is how long a NewBoltRecords store keeps a completed record in memory before it
// writes it, with the others completed meanwhile, in one commit.
const recordDelay = time.Second

// NewBolt returns a store in bucket of db, creating the bucket.
func NewBolt(db *bolt.DB, bucket string) (*Bolt, error) {
	b := &Bolt{db: db, bucket: []byte(bucket), now: time.Now}
	err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(b.bucket)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	return b, nil
}

// NewBoltRecords returns a store that keeps held leases in memory and only completed records in
// bucket of db: for claims that need not outlive the process — one left by a crash would only
// delay the restarted process's own retry — and records that may lag behind: a record is
// written about recordDelay after Complete, together with the others completed meanwhile (and
// by Flush), and answered from memory until then. So claims, renewals and releases write
// nothing, and a busy process writes records once a second instead of once per claim; a crash
// loses the records of the last second, whose work a redelivery would then do again. (Memory
// extraction's turn records: JetStream redelivers only what was not acknowledged.) Held entries
// that NewBolt wrote to the bucket are ignored.
func NewBoltRecords(db *bolt.DB, bucket string) (*Bolt, error) {
	b, err := NewBolt(db, bucket)
	if err != nil {
		return nil, err
	}
	b.held = NewMemory()
	b.held.now = func() time.Time { return b.now() }
	b.pending = map[string]boltEntry{}
	return b, nil
}

// Flush writes the records of a NewBoltRecords store that are still only in memory.
func (b *Bolt) Flush() error {
	if b.held == nil {
		return nil
	}
	return b.flush()
}

// Close flushes a NewBoltRecords store and stops its timer; records completed later are
// written at once. Call it before closing the file.
func (b *Bolt) Close() error {
	if b.held == nil {
		return nil
	}
	b.pmu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.pmu.Unlock()
	return b.flush()
}

// flush writes the pending records in one commit, then drops them from memory; on failure they
// stay pending (and answered from memory) for the next flush.
func (b *Bolt) flush() error {
	b.pmu.Lock()
	batch := b.pending
	b.pending = map[string]boltEntry{}
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.pmu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(b.bucket)
		for key, e := range batch {
			if err := bk.Put([]byte(key), encodeEntry(e)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.pmu.Lock()
		for key, e := range batch {
			if _, newer := b.pending[key]; !newer {
				b.pending[key] = e
			}
		}
		b.armLocked()
		b.pmu.Unlock()
		return fmt.Errorf("lease: write records: %w", err)
	}
	for key := range batch {
		b.held.forgetDone(key)
	}
	return nil
}

// armLocked starts the flush timer for pending records, unless it runs or the store is closed.
func (b *Bolt) armLocked() {
	if b.timer != nil || b.closed || len(b.pending) == 0 {
		return
	}
	b.timer = time.AfterFunc(recordDelay, func() { _ = b.flush() })
}

type boltEntry struct {
	done    bool
	expires int64
	owner   string
	data    []byte
}

func encodeEntry(e boltEntry) []byte {
	v := make([]byte, 0, 1+8+binary.MaxVarintLen64+len(e.owner)+len(e.data))
	st := byte('h')
	if e.done {
		st = 'd'
	}
	v = append(v, st)
	v = binary.BigEndian.AppendUint64(v, uint64(e.expires))
	v = binary.AppendUvarint(v, uint64(len(e.owner)))
	v = append(v, e.owner...)
	return append(v, e.data...)
}

var errCorrupt = errors.New("lease: corrupt record")

func decodeEntry(v []byte) (boltEntry, error) {
	if len(v) < 10 || (v[0] != 'h' && v[0] != 'd') {
		return boltEntry{}, errCorrupt
	}
	e := boltEntry{done: v[0] == 'd', expires: int64(binary.BigEndian.Uint64(v[1:9]))}
	n, k := binary.Uvarint(v[9:])
	if k <= 0 || uint64(len(v)-9-k) < n {
		return boltEntry{}, errCorrupt
	}
	rest := v[9+k:]
	e.owner = string(rest[:n])
	e.data = bytes.Clone(rest[n:])
	return e, nil
}

// live returns the unexpired entry of key; a corrupt one counts as absent, so it is replaced.
func (b *Bolt) live(bk *bolt.Bucket, key string, now int64) (boltEntry, bool) {
	v := bk.Get([]byte(key))
	if v == nil {
		return boltEntry{}, false
	}
	e, err := decodeEntry(v)
	if err != nil || e.expires <= now {
		return boltEntry{}, false
	}
	return e, true
}

// blocking returns the claim a live entry gives a caller other than its owner, if it blocks.
func blocking(e boltEntry, owner string, now int64) (Claim, bool) {
	ttl := time.Duration(e.expires - now)
	switch {
	case e.done:
		return Claim{State: Done, Data: e.data, TTL: ttl}, true
	case e.owner != owner:
		return Claim{State: Held, Owner: e.owner, Data: e.data, TTL: ttl}, true
	}
	return Claim{}, false
}

// Acquire implements Store. A key held by another owner or done is answered from a read-only
// transaction, so waiters cost no writes.
func (b *Bolt) Acquire(ctx context.Context, key, owner string, data []byte, ttl time.Duration) (Claim, error) {
	if err := check(key, owner, ttl); err != nil {
		return Claim{}, err
	}
	if b.held != nil {
		return b.acquireHeld(ctx, key, owner, data, ttl)
	}
	var out Claim
	var found bool
	err := b.db.View(func(tx *bolt.Tx) error {
		now := b.now().UnixNano()
		if e, ok := b.live(tx.Bucket(b.bucket), key, now); ok {
			out, found = blocking(e, owner, now)
		}
		return nil
	})
	if err != nil || found {
		return out, err
	}
	err = b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(b.bucket)
		now := b.now().UnixNano()
		if e, ok := b.live(bk, key, now); ok {
			if out, found = blocking(e, owner, now); found {
				return nil
			}
		}
		out = Claim{State: Acquired, Owner: owner, Data: bytes.Clone(data), TTL: ttl}
		return bk.Put([]byte(key), encodeEntry(boltEntry{owner: owner, data: data, expires: now + int64(ttl)}))
	})
	if err != nil {
		return Claim{}, fmt.Errorf("lease: acquire %s: %w", key, err)
	}
	return out, nil
}

// acquireHeld is Acquire of a NewBoltRecords store. A record stays a Done lease in memory until
// it is in the file, so the file is looked for it only after the lease is taken in memory.
func (b *Bolt) acquireHeld(ctx context.Context, key, owner string, data []byte, ttl time.Duration) (Claim, error) {
	c, err := b.held.Acquire(ctx, key, owner, data, ttl)
	if err != nil || c.State != Acquired {
		return c, err
	}
	var rec Claim
	var found bool
	err = b.db.View(func(tx *bolt.Tx) error {
		now := b.now().UnixNano()
		if e, ok := b.live(tx.Bucket(b.bucket), key, now); ok && e.done {
			rec, found = blocking(e, owner, now)
		}
		return nil
	})
	if err != nil || found {
		_, _ = b.held.Release(ctx, key, owner)
		if err != nil {
			return Claim{}, fmt.Errorf("lease: acquire %s: %w", key, err)
		}
		return rec, nil
	}
	return c, nil
}

// change applies f to the owner's live lease; it reports whether owner held it.
func (b *Bolt) change(key, owner string, f func(bk *bolt.Bucket, e boltEntry, now int64) error) (bool, error) {
	ok := false
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(b.bucket)
		now := b.now().UnixNano()
		e, live := b.live(bk, key, now)
		if !live || e.done || e.owner != owner {
			return nil
		}
		ok = true
		return f(bk, e, now)
	})
	return ok, err
}

// Renew implements Store.
func (b *Bolt) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := check(key, owner, ttl); err != nil {
		return false, err
	}
	if b.held != nil {
		return b.held.Renew(ctx, key, owner, ttl)
	}
	return b.change(key, owner, func(bk *bolt.Bucket, e boltEntry, now int64) error {
		e.expires = now + int64(ttl)
		return bk.Put([]byte(key), encodeEntry(e))
	})
}

// Release implements Store.
func (b *Bolt) Release(ctx context.Context, key, owner string) (bool, error) {
	if b.held != nil {
		return b.held.Release(ctx, key, owner)
	}
	ok, err := b.change(key, owner, func(bk *bolt.Bucket, _ boltEntry, _ int64) error {
		return bk.Delete([]byte(key))
	})
	if ok && err == nil {
		b.hub.notify(key)
	}
	return ok, err
}

// Complete implements Store.
func (b *Bolt) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) (bool, error) {
	if err := check(key, owner, ttl); err != nil {
		return false, err
	}
	if b.held != nil {
		return b.completeHeld(ctx, key, owner, record, ttl)
	}
	ok, err := b.change(key, owner, func(bk *bolt.Bucket, _ boltEntry, now int64) error {
		return bk.Put([]byte(key), encodeEntry(boltEntry{done: true, data: record, expires: now + int64(ttl)}))
	})
	if ok && err == nil {
		b.hub.notify(key)
	}
	return ok, err
}

// completeHeld is Complete of a NewBoltRecords store: the lease becomes a Done record in memory
// (waking waiters; Acquire answers from it) and the record is written with the next flush —
// at once when the store was flushed for closing.
func (b *Bolt) completeHeld(ctx context.Context, key, owner string, record []byte, ttl time.Duration) (bool, error) {
	e := boltEntry{done: true, data: bytes.Clone(record), expires: b.now().Add(ttl).UnixNano()}
	// The entry is pending before the record is visible, so a flush that runs in between
	// writes it and then forgets the Done lease no sooner than it exists.
	b.pmu.Lock()
	b.pending[key] = e
	b.pmu.Unlock()
	if ok, err := b.held.Complete(ctx, key, owner, record, ttl); err != nil || !ok {
		b.pmu.Lock()
		if p, still := b.pending[key]; still && bytes.Equal(p.data, e.data) && p.expires == e.expires {
			delete(b.pending, key)
		}
		b.pmu.Unlock()
		return false, err
	}
	b.pmu.Lock()
	closed := b.closed
	b.armLocked()
	b.pmu.Unlock()
	if closed {
		if err := b.flush(); err != nil {
			return true, err
		}
	}
	return true, nil
}

// Watch implements Store.
func (b *Bolt) Watch(key string) (<-chan struct{}, func()) {
	if b.held != nil {
		return b.held.Watch(key)
	}
	return b.hub.watch(key)
}

// Signal implements Store.
func (b *Bolt) Signal(ctx context.Context, key string) error {
	if b.held != nil {
		return b.held.Signal(ctx, key)
	}
	b.hub.notify(key)
	return nil
}

// Sweep deletes expired leases and records (reads skip them meanwhile) and returns how many.
func (b *Bolt) Sweep() (int, error) {
	n := 0
	err := b.db.Update(func(tx *bolt.Tx) error {
		now := b.now().UnixNano()
		var err error
		n, err = boltstore.DeleteWhere(tx.Bucket(b.bucket), func(_, v []byte) (bool, error) {
			e, err := decodeEntry(v)
			return err != nil || e.expires <= now, nil
		})
		return err
	})
	return n, err
}
