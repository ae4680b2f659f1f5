package boltstore

import (
	"errors"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Group runs the write transactions of concurrent callers in shared commits (group commit):
// while a commit is in progress the writes that arrive queue up, and the next commit runs them
// all in one transaction, one fsync for all of them. A write that finds no commit in progress
// commits at once, so nothing waits for a timer (bbolt's own Batch waits up to 10 ms for
// company, which a lone writer pays in full). Durability is unchanged: Update returns only after
// the commit that holds the write is on disk.
type Group struct {
	db *bolt.DB

	// mu guards queue and leading; it is never held across a commit.
	mu sync.Mutex
	// queue holds the writes waiting for the next commit; leading says a caller is committing.
	queue   []*groupWrite
	leading bool
	// commits counts transactions run, for tests.
	commits atomic.Int64
}

type groupWrite struct {
	fn func(*bolt.Tx) error
	// done receives the write's outcome, or errLead when its caller is to commit the queue.
	done chan error
}

var errLead = errors.New("lead the next commit")

// NewGroup returns a group committer for db.
func NewGroup(db *bolt.DB) *Group { return &Group{db: db} }

// Update runs fn in a write transaction shared with concurrent callers and returns its error.
// fn must only change the database through tx and may run more than once: when another write of
// its commit fails, the commit is rolled back and fn runs again without it.
func (g *Group) Update(fn func(*bolt.Tx) error) error {
	w := &groupWrite{fn: fn, done: make(chan error, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	if g.leading {
		g.mu.Unlock()
		err := <-w.done
		if err != errLead {
			return err
		}
	} else {
		g.leading = true
		g.mu.Unlock()
	}
	// This caller commits everything queued so far, its own write among it, then hands the
	// lead to a caller still waiting, if any.
	g.mu.Lock()
	batch := g.queue
	g.queue = nil
	g.mu.Unlock()
	g.commit(batch)
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].done <- errLead
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	return <-w.done
}

// commit runs the writes in one transaction; a write that fails is taken out and run alone (its
// error is its own), and the others are committed again without it.
func (g *Group) commit(batch []*groupWrite) {
	for len(batch) > 0 {
		failed := -1
		g.commits.Add(1)
		err := g.db.Update(func(tx *bolt.Tx) error {
			for i, w := range batch {
				if err := w.fn(tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed < 0 {
			for _, w := range batch {
				w.done <- err
			}
			return
		}
		w := batch[failed]
		g.commits.Add(1)
		w.done <- g.db.Update(w.fn)
		batch = append(batch[:failed:failed], batch[failed+1:]...)
	}
}

// queued is how many writes wait for a commit, for tests.
func (g *Group) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}
