package lease

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// Memory keeps leases in this process only: for leases whose holders live and die with the
// process (a monolith's session turn leases), where a lease that outlived a crash would only
// block the restarted process.
type Memory struct {
	hub hub
	now func() time.Time

	// mu guards entries and writes; it is released before watchers are woken (hub.mu).
	mu sync.Mutex
	// entries holds the leases and records; expired ones are removed when met and by sweeps.
	entries map[string]memEntry
	writes  int
}

type memEntry struct {
	done    bool
	owner   string
	data    []byte
	expires time.Time
}

// NewMemory returns an empty in-process store.
func NewMemory() *Memory {
	return &Memory{now: time.Now, entries: map[string]memEntry{}}
}

// sweepEvery is how many writes pass between sweeps of expired entries.
const sweepEvery = 1024

func (m *Memory) live(key string, now time.Time) (memEntry, bool) {
	e, ok := m.entries[key]
	if ok && !now.Before(e.expires) {
		delete(m.entries, key)
		return memEntry{}, false
	}
	return e, ok
}

func (m *Memory) put(key string, e memEntry, now time.Time) {
	m.entries[key] = e
	if m.writes++; m.writes%sweepEvery == 0 {
		for k, e := range m.entries {
			if !now.Before(e.expires) {
				delete(m.entries, k)
			}
		}
	}
}

// Acquire implements Store.
func (m *Memory) Acquire(_ context.Context, key, owner string, data []byte, ttl time.Duration) (Claim, error) {
	if err := check(key, owner, ttl); err != nil {
		return Claim{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.live(key, now); ok {
		switch {
		case e.done:
			return Claim{State: Done, Data: bytes.Clone(e.data), TTL: e.expires.Sub(now)}, nil
		case e.owner != owner:
			return Claim{State: Held, Owner: e.owner, Data: bytes.Clone(e.data), TTL: e.expires.Sub(now)}, nil
		}
	}
	m.put(key, memEntry{owner: owner, data: bytes.Clone(data), expires: now.Add(ttl)}, now)
	return Claim{State: Acquired, Owner: owner, Data: bytes.Clone(data), TTL: ttl}, nil
}

// held returns the owner's live lease.
func (m *Memory) held(key, owner string, now time.Time) (memEntry, bool) {
	e, ok := m.live(key, now)
	return e, ok && !e.done && e.owner == owner
}

// Renew implements Store.
func (m *Memory) Renew(_ context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := check(key, owner, ttl); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e, ok := m.held(key, owner, now)
	if ok {
		e.expires = now.Add(ttl)
		m.entries[key] = e
	}
	return ok, nil
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, key, owner string) (bool, error) {
	m.mu.Lock()
	_, ok := m.held(key, owner, m.now())
	if ok {
		delete(m.entries, key)
	}
	m.mu.Unlock()
	if ok {
		m.hub.notify(key)
	}
	return ok, nil
}

// Complete implements Store.
func (m *Memory) Complete(_ context.Context, key, owner string, record []byte, ttl time.Duration) (bool, error) {
	if err := check(key, owner, ttl); err != nil {
		return false, err
	}
	m.mu.Lock()
	now := m.now()
	_, ok := m.held(key, owner, now)
	if ok {
		m.put(key, memEntry{done: true, data: bytes.Clone(record), expires: now.Add(ttl)}, now)
	}
	m.mu.Unlock()
	if ok {
		m.hub.notify(key)
	}
	return ok, nil
}

// Watch implements Store.
func (m *Memory) Watch(key string) (<-chan struct{}, func()) { return m.hub.watch(key) }

// Signal implements Store.
func (m *Memory) Signal(_ context.Context, key string) error {
	m.hub.notify(key)
	return nil
}

// forgetDone drops key's record, if it is one (not a lease held meanwhile), without waking
// anyone: for a NewBoltRecords store once the record is in its file.
func (m *Memory) forgetDone(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[key]; ok && e.done {
		delete(m.entries, key)
	}
}
