// Package lease is Hermes' one lease primitive: a claim on a key by an owner token for a TTL,
// which only its owner can renew, release, or complete into a record that later claims find.
// It serves session turn leases, idempotency records, outbox claims and extraction claims, in
// Redis (shared by replicas), in a bbolt file (one process, durable) and in memory (one
// process, gone with it). Every backend wakes waiters when a lease is released or completed, so
// a hand-off costs a notification, not a polling interval.
package lease

import (
	"context"
	"errors"
	"time"
)

// State is what Acquire found.
type State int

// Acquire outcomes.
const (
	// Acquired: the caller holds the lease now (newly, or again as its owner, which extends it).
	Acquired State = iota + 1
	// Held: another owner holds the lease.
	Held
	// Done: the lease was completed; Claim.Data is the stored record.
	Done
)

func (s State) String() string {
	switch s {
	case Acquired:
		return "acquired"
	case Held:
		return "held"
	case Done:
		return "done"
	}
	return "unknown"
}

// Claim is the state of a key as Acquire left it.
type Claim struct {
	State State
	// Owner is the holder when Acquired or Held.
	Owner string
	// Data is the holder's data when Acquired or Held, the completed record when Done.
	Data []byte
	// TTL is how long the lease or record lasts from now unless renewed; waiters use it to
	// retry when a holder dies without releasing.
	TTL time.Duration
}

// Store keeps leases. Every method is atomic; keys and owners are opaque non-empty strings.
type Store interface {
	// Acquire takes key for owner with data for ttl unless another owner holds it or it is
	// done. The owner acquiring again extends its lease and replaces its data.
	Acquire(ctx context.Context, key, owner string, data []byte, ttl time.Duration) (Claim, error)
	// Renew extends the owner's lease to ttl from now; false when owner no longer holds it.
	Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// Release ends the owner's lease and wakes the key's waiters; false when owner did not
	// hold it (it expired, or went to another owner).
	Release(ctx context.Context, key, owner string) (bool, error)
	// Complete turns the owner's lease into a record kept for ttl that Acquire returns as Done,
	// and wakes the key's waiters; false when owner did not hold it.
	Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) (bool, error)
	// Watch returns a channel that is closed the next time key is released, completed or
	// signalled (by any process sharing the backend), and a function that stops watching. Watch
	// before reading the state the wait depends on, so a change in between is not missed.
	Watch(key string) (<-chan struct{}, func())
	// Signal wakes key's watchers without changing any lease: for state kept elsewhere that
	// watchers re-read (a cancellation flag).
	Signal(ctx context.Context, key string) error
}

// errInvalid is returned for an empty key or owner or a non-positive TTL.
var errInvalid = errors.New("lease: key and owner must be non-empty and the TTL positive")

func check(key, owner string, ttl time.Duration) error {
	if key == "" || owner == "" || ttl <= 0 {
		return errInvalid
	}
	return nil
}

// maxWaitSlice bounds one wait between attempts: a wake-up lost with a dropped connection costs
// at most this much.
const maxWaitSlice = time.Second

// Wait acquires key for owner, waiting while another owner holds it: it wakes when the lease is
// released or completed, or when the holder's lease would expire (a holder that died), and
// tries again. It returns the first claim that is Acquired or Done, or Held when keepWaiting
// (nil: always) says to stop waiting for that holder; when ctx ends first, the last claim seen
// (who held the lease) with ctx's error.
func Wait(ctx context.Context, s Store, key, owner string, data []byte, ttl time.Duration, keepWaiting func(Claim) bool) (Claim, error) {
	for {
		ch, stop := s.Watch(key)
		c, err := s.Acquire(ctx, key, owner, data, ttl)
		if err != nil || c.State != Held || (keepWaiting != nil && !keepWaiting(c)) {
			stop()
			return c, err
		}
		slice := min(max(c.TTL, time.Millisecond), maxWaitSlice)
		t := time.NewTimer(slice)
		select {
		case <-ctx.Done():
			t.Stop()
			stop()
			return c, ctx.Err()
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		stop()
	}
}
