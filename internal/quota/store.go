package quota

import (
	"context"
	"sync"
	"time"
)

// Store keeps the counters behind the limits. The Redis store shares them between replicas; the
// memory store keeps them in the process (the monolith), and the bolt store keeps its counters
// (sessions, stored bytes) in a file so they survive a restart.
type Store interface {
	// Take spends n tokens of key's bucket, which holds up to perMinute tokens and refills at
	// perMinute a minute (a burst of perMinute, then perMinute a minute). It spends nothing and
	// returns how long until n tokens are there when there are fewer.
	Take(ctx context.Context, key string, n, perMinute int64) (time.Duration, error)
	// Acquire holds one of key's limit slots for holder until Release or, without a renewal
	// (Acquire again), until ttl passes, so a crashed holder frees its slot. It reports false
	// when limit other holders hold one.
	Acquire(ctx context.Context, key, holder string, limit int64, ttl time.Duration) (bool, error)
	// Release frees holder's slot.
	Release(ctx context.Context, key, holder string) error
	// Add adds n to key's counter unless n > 0, limit > 0 and the result would pass limit; it
	// returns the counter (after the addition when it was made) and whether it was made. A
	// counter never goes below 0. A ttl > 0 lets the counter expire that long after its last
	// change.
	Add(ctx context.Context, key string, n, limit int64, ttl time.Duration) (int64, bool, error)
	// Drain returns key's counter and deletes it.
	Drain(ctx context.Context, key string) (int64, error)
}

// MemoryStore keeps the counters in this process.
type MemoryStore struct {
	now func() time.Time

	// mu guards the maps.
	mu       sync.Mutex
	buckets  map[string]time.Time // key → theoretical arrival time (GCRA)
	slots    map[string]map[string]time.Time
	counters map[string]memCounter
}

type memCounter struct {
	v       int64
	expires time.Time // zero: never
}

// newMemoryStore returns an empty in-process store.
func newMemoryStore() *MemoryStore {
	return &MemoryStore{now: time.Now, buckets: map[string]time.Time{}, slots: map[string]map[string]time.Time{}, counters: map[string]memCounter{}}
}

// Take implements Store with GCRA: each token is an emission interval of a minute/perMinute,
// and the bucket allows the theoretical arrival time to run a minute ahead of now.
func (m *MemoryStore) Take(_ context.Context, key string, n, perMinute int64) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	interval := time.Minute / time.Duration(perMinute)
	tat := m.buckets[key]
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(time.Duration(n) * interval)
	if wait := next.Sub(now) - time.Minute; wait > 0 {
		return wait, nil
	}
	m.buckets[key] = next
	if len(m.buckets) > maxMemoryKeys {
		m.sweepBuckets(now)
	}
	return 0, nil
}

// maxMemoryKeys is when the memory store drops what no longer counts (full buckets, expired
// counters), so a stream of new user ids cannot grow it for ever.
const maxMemoryKeys = 1 << 16

func (m *MemoryStore) sweepBuckets(now time.Time) {
	for k, tat := range m.buckets {
		if !tat.After(now) {
			delete(m.buckets, k)
		}
	}
	for k, c := range m.counters {
		if !c.expires.IsZero() && !c.expires.After(now) {
			delete(m.counters, k)
		}
	}
}

// Acquire implements Store.
func (m *MemoryStore) Acquire(_ context.Context, key, holder string, limit int64, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	held := m.slots[key]
	if held == nil {
		held = map[string]time.Time{}
		m.slots[key] = held
	}
	for h, exp := range held {
		if !exp.After(now) {
			delete(held, h)
		}
	}
	if _, mine := held[holder]; !mine && int64(len(held)) >= limit {
		return false, nil
	}
	held[holder] = now.Add(ttl)
	return true, nil
}

// Release implements Store.
func (m *MemoryStore) Release(_ context.Context, key, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.slots[key], holder)
	if len(m.slots[key]) == 0 {
		delete(m.slots, key)
	}
	return nil
}

// Add implements Store.
func (m *MemoryStore) Add(_ context.Context, key string, n, limit int64, ttl time.Duration) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	c := m.counters[key]
	if !c.expires.IsZero() && !c.expires.After(now) {
		c = memCounter{}
	}
	v, ok := addCounter(c.v, n, limit)
	if !ok {
		return v, false, nil
	}
	c.v = v
	if ttl > 0 {
		c.expires = now.Add(ttl)
	}
	m.counters[key] = c
	if len(m.counters) > maxMemoryKeys {
		m.sweepBuckets(now)
	}
	return v, true, nil
}

// addCounter is Add's arithmetic: the new value and whether the addition is allowed.
func addCounter(v, n, limit int64) (int64, bool) {
	if n > 0 && limit > 0 && v+n > limit {
		return v, false
	}
	return max(v+n, 0), true
}

// Drain implements Store.
func (m *MemoryStore) Drain(_ context.Context, key string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.counters[key]
	delete(m.counters, key)
	if !ok || (!c.expires.IsZero() && !c.expires.After(m.now())) {
		return 0, nil
	}
	return c.v, nil
}
