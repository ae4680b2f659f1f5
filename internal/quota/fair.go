package quota

import (
	"context"
	"sync"
)

// FairQueue admits at most slots turns at once in this process and, when they are all taken,
// gives the next free slot to the waiting callers round-robin by key (the user), so one user's
// many waiting turns do not starve another's single one.
type FairQueue struct {
	slots int

	// mu guards everything below.
	mu     sync.Mutex
	active int
	queues map[string][]*waiter
	// order is the round-robin of keys with waiters; next is the position of the next key served.
	order []string
	next  int
}

type waiter struct {
	ready chan struct{}
	// granted is set, under mu, when the waiter was given a slot.
	granted bool
}

// newFairQueue returns a queue of slots slots; slots <= 0 admits everyone at once.
func newFairQueue(slots int) *FairQueue {
	return &FairQueue{slots: slots, queues: map[string][]*waiter{}}
}

// Wait blocks until key's caller holds a slot or ctx ends; release frees the slot.
func (f *FairQueue) Wait(ctx context.Context, key string) (release func(), err error) {
	if f.slots <= 0 {
		return func() {}, nil
	}
	f.mu.Lock()
	if f.active < f.slots && len(f.order) == 0 {
		f.active++
		f.mu.Unlock()
		return f.releaser(), nil
	}
	w := &waiter{ready: make(chan struct{})}
	if len(f.queues[key]) == 0 {
		f.order = append(f.order, key)
	}
	f.queues[key] = append(f.queues[key], w)
	f.mu.Unlock()

	select {
	case <-w.ready:
		return f.releaser(), nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		if w.granted {
			// The slot came as the caller left: pass it on.
			f.active--
			f.grantLocked()
			return nil, ctx.Err()
		}
		f.removeLocked(key, w)
		return nil, ctx.Err()
	}
}

func (f *FairQueue) releaser() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.active--
			f.grantLocked()
		})
	}
}

// grantLocked hands free slots to waiters, one key after the other.
func (f *FairQueue) grantLocked() {
	for f.active < f.slots && len(f.order) > 0 {
		if f.next >= len(f.order) {
			f.next = 0
		}
		key := f.order[f.next]
		q := f.queues[key]
		w := q[0]
		if len(q) == 1 {
			delete(f.queues, key)
			f.order = append(f.order[:f.next], f.order[f.next+1:]...)
		} else {
			f.queues[key] = q[1:]
			f.next++
		}
		w.granted = true
		f.active++
		close(w.ready)
	}
}

func (f *FairQueue) removeLocked(key string, w *waiter) {
	q := f.queues[key]
	for i, x := range q {
		if x == w {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) > 0 {
		f.queues[key] = q
		return
	}
	delete(f.queues, key)
	for i, k := range f.order {
		if k == key {
			f.order = append(f.order[:i], f.order[i+1:]...)
			if f.next > i {
				f.next--
			}
			break
		}
	}
}

// Waiting is how many callers wait for a slot.
func (f *FairQueue) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, q := range f.queues {
		n += len(q)
	}
	return n
}
