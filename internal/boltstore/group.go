package boltstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Group runs the write transactions of concurrent callers in shared commits (group commit):
// while a commit is in progress the writes that arrive queue up, and the next commit runs them
// all in one transaction, one fsync for all of them. A write that finds no commit in progress
// commits at once, so nothing waits for a timer (bbolt's own Batch waits up to 10 ms for
// company, which a lone writer pays in full). Update returns only after the commit that holds
// the write is on disk.
//
// Defer is the other kind of write: it is applied at once, in a write transaction the group
// keeps open, and made durable by the next commit (of an Update, or at most the group's delay
// later). A turn uses it for the steps whose durability its own final write provides: their
// fsyncs are that write's. Until then readers (View) do not see a deferred write, and a crash
// loses it. Deferred writes that arrive while the transaction is busy (a commit's fsyncs, another
// write) queue up, and whoever holds the transaction applies them before letting it go: the
// next commit before it commits, a commit after its fsyncs, a deferred write after its own. Under
// load one running goroutine applies many in a row, where a lock would pass from waiter to waiter
// through the scheduler, each waking in turn (a convoy: most of the waiting at 64 turns at once).
type Group struct {
	db    *bolt.DB
	delay time.Duration
	// laterDelay is how long a later write waits for a commit at most.
	laterDelay time.Duration

	// mu guards queue, leading, committers, deferQueue and the later writes (later,
	// laterTimer, laterDue); it is never held across a commit. It may be taken while txMu is
	// held, never the other way round.
	mu sync.Mutex
	// queue holds the writes waiting for the next commit; leading says a caller is committing.
	queue   []*groupWrite
	leading bool
	// committers counts the commits that took their batch and wait for txMu (at most one).
	committers int
	// deferQueue holds the deferred writes waiting for the transaction.
	deferQueue []*deferWrite
	// later holds the writes waiting for their delay (Later), laterTimer the timer that ends
	// it; laterDue says the delay passed (or a Sync came): the next commit takes them.
	later      []func(*bolt.Tx) error
	laterTimer *time.Timer
	laterDue   bool

	// txMu guards open, deferred and timer: the write transaction that holds the deferred
	// writes (nil when none), those writes (to apply again when open must be rolled back), and
	// the timer that commits them. It is held across the work on open, including its commit,
	// and released through unlockTx.
	txMu     sync.Mutex
	open     *bolt.Tx
	deferred []func(*bolt.Tx, bool) error
	timer    *time.Timer
	// waiting holds the channels of the deferred writes (DeferDurable) that wait to hear of
	// the commit that makes them durable; txMu guards it too.
	waiting []chan error
	// lockedAt is when txMu was taken; txMu guards it too.
	lockedAt time.Time

	// busy is the time txMu was held in all, in nanoseconds (Busy).
	busy atomic.Int64

	// commits counts transactions run, for tests.
	commits atomic.Int64
}

type groupWrite struct {
	fn func(*bolt.Tx) error
	// done receives the write's outcome, or errLead when its caller is to commit the queue.
	done chan error
}

// deferWrite is a deferred write waiting to be applied.
type deferWrite struct {
	fn func(*bolt.Tx, bool) error
	// done receives the write's outcome.
	done chan error
	// durable, when not nil, receives the outcome of the commit that makes the write durable.
	durable chan error
}

var errLead = errors.New("lead the next commit")

// DefaultDeferDelay is how long a deferred write waits for a commit at most.
const DefaultDeferDelay = 20 * time.Millisecond

// NewGroup returns a group committer for db whose deferred writes wait at most
// DefaultDeferDelay for a commit.
func NewGroup(db *bolt.DB) *Group { return NewGroupDelay(db, DefaultDeferDelay) }

// DefaultLaterDelay is how long a later write waits for a commit at most. Later writes are
// counters no caller waits on; a longer wait lets them ride on commits that happen anyway. Where
// the sessions are spread over several files, the quota's counters in the first would otherwise
// cost it a commit of its own every DefaultDeferDelay while the turns commit in the others.
const DefaultLaterDelay = time.Second

// NewGroupDelay returns a group committer for db whose deferred writes wait at most delay (and
// later writes at most DefaultLaterDelay, or delay when longer).
func NewGroupDelay(db *bolt.DB, delay time.Duration) *Group {
	return &Group{db: db, delay: delay, laterDelay: max(delay, DefaultLaterDelay)}
}

// Update runs fn in a write transaction shared with concurrent callers (and with the deferred
// writes not yet committed) and returns its error once the transaction is on disk. fn must only
// change the database through tx and may run more than once: when another write of its commit
// fails, the transaction is rolled back and fn runs again without it.
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
	g.committers++
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

// Busy returns how long the file's writer has been busy in all: the time the group held the
// write transaction, applying writes, committing and syncing. Every durable write of the file
// goes through it, one at a time, so its share of the wall time is how close the file is to
// what one writer can do (hermes_boltstore_writer_busy_seconds_total).
func (g *Group) Busy() time.Duration { return time.Duration(g.busy.Load()) }

// Defer applies fn at once in the group's open write transaction and returns its error; the
// write becomes durable with the next commit: an Update's, or the group's own at most its
// delay later. fn must only change the database through tx. It may run again after Defer
// returned, with again true, when the open transaction is rolled back for another write's
// failure: then it must leave alone the variables and arguments its caller reads or changes.
//
// fn may run on another caller's goroutine (the one applying the queued writes, or a commit's):
// what it sets, its caller reads once Defer returned.
func (g *Group) Defer(fn func(tx *bolt.Tx, again bool) error) error {
	return g.deferWrite(&deferWrite{fn: fn, done: make(chan error, 1)})
}

// DeferDurable is Defer for a caller that goes on at once but must learn when its write is on
// disk: once the write is applied it returns a channel that receives the outcome of the commit
// that makes it durable (nil: on disk). That commit is the next one, as for Defer; a caller that
// cannot wait for it calls Sync.
func (g *Group) DeferDurable(fn func(tx *bolt.Tx, again bool) error) (<-chan error, error) {
	d := &deferWrite{fn: fn, done: make(chan error, 1), durable: make(chan error, 1)}
	if err := g.deferWrite(d); err != nil {
		return nil, err
	}
	return d.durable, nil
}

func (g *Group) deferWrite(d *deferWrite) error {
	g.mu.Lock()
	g.deferQueue = append(g.deferQueue, d)
	g.mu.Unlock()
	// Whoever holds the transaction now applies the write before letting it go.
	if g.txMu.TryLock() {
		g.lockedAt = time.Now()
		g.applyDeferred()
		g.unlockTx()
	}
	return <-d.done
}

// notify tells the deferred writes waiting for their commit its outcome. txMu is held.
func (g *Group) notify(err error) {
	for _, w := range g.waiting {
		w <- err
	}
	g.waiting = nil
}

// unlockTx releases txMu, then applies the deferred writes queued meanwhile if it gets txMu
// again; when it does not, the caller that has it does. A write queued while txMu is held is
// thus never left waiting for a later caller. When a commit is coming (writes wait for one), it
// is left to that commit, which applies them first: applying the writes that keep arriving here
// would hold the commit back, and the turns waiting for it.
func (g *Group) unlockTx() {
	for {
		g.busy.Add(int64(time.Since(g.lockedAt)))
		g.txMu.Unlock()
		g.mu.Lock()
		pending := len(g.deferQueue) > 0 && len(g.queue) == 0 && g.committers == 0
		g.mu.Unlock()
		if !pending || !g.txMu.TryLock() {
			return
		}
		g.lockedAt = time.Now()
		g.applyDeferred()
	}
}

// applyDeferred applies the queued deferred writes in the open transaction and tells each
// caller its outcome. txMu is held.
func (g *Group) applyDeferred() {
	g.mu.Lock()
	batch := g.deferQueue
	g.deferQueue = nil
	g.mu.Unlock()
	for _, d := range batch {
		tx, err := g.openTx()
		if err == nil {
			if err = d.fn(tx, false); err != nil {
				// bbolt cannot undo part of a transaction: it is rolled back whole, and the
				// deferred writes before this one are applied again by the next openTx.
				g.rollback()
			}
		}
		if err == nil {
			g.deferred = append(g.deferred, d.fn)
			if d.durable != nil {
				g.waiting = append(g.waiting, d.durable)
			}
		}
		d.done <- err
	}
	if len(g.deferred) > 0 && g.timer == nil {
		g.timer = time.AfterFunc(g.delay, g.SyncDeferred)
	}
}

// Later runs fn in the transaction of a commit at most the group's delay for later writes
// (DefaultLaterDelay) from now, just before it commits, and returns at once. It is for writes
// no caller waits on, and that read what they write when they run (a counter's value as it is
// then): the changes of that time cost one write, and no caller waits for the transaction. The
// commit is the first one after the delay, an Update's or the group's own, or a Sync's (a crash
// loses what was written since the last such commit). The writes wait for the delay even when
// other commits come sooner: each bucket a commit writes costs it a leaf and the branches above
// it, which every fsync then pays for (the quota's counters, written by every turn's commit
// where they rode along, were 3 of its 30 pages). A fn
// that fails is dropped (and logged), its write lost as in a crash; fn must only change the
// database through tx. fn may run more than once: when a write after it in its commit fails,
// the transaction is rolled back and fn runs again in the next one, where it must write again
// what it wrote in the first.
func (g *Group) Later(fn func(tx *bolt.Tx) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.later = append(g.later, fn)
	if g.laterTimer == nil {
		g.laterTimer = time.AfterFunc(g.laterDelay, g.Sync)
	}
}

// Sync commits the deferred and later writes, if any; stores call it before closing the file.
func (g *Group) Sync() { g.sync(true) }

// SyncDeferred commits the deferred writes, if any, now: for a caller that cannot wait for the
// next commit. Later writes still wait for their delay.
func (g *Group) SyncDeferred() { g.sync(false) }

func (g *Group) sync(later bool) {
	if later {
		g.mu.Lock()
		g.laterDue = len(g.later) > 0
		g.mu.Unlock()
	}
	g.txMu.Lock()
	g.lockedAt = time.Now()
	pending := len(g.deferred) > 0
	if g.timer != nil {
		// Fired or not, this commit serves it; deferred writes after it start another.
		g.timer.Stop()
		g.timer = nil
	}
	g.unlockTx()
	g.mu.Lock()
	pending = pending || g.laterDue
	g.mu.Unlock()
	if !pending {
		return
	}
	if err := g.Update(func(*bolt.Tx) error { return nil }); err != nil {
		slog.Error("deferred writes not committed", "error", err)
	}
}

// openTx returns the open write transaction, beginning one (with the deferred writes applied
// again) when there is none. txMu is held.
func (g *Group) openTx() (*bolt.Tx, error) {
	if g.open != nil {
		return g.open, nil
	}
	tx, err := g.db.Begin(true)
	if err != nil {
		return nil, err
	}
	g.commits.Add(1)
	for _, fn := range g.deferred {
		if err := fn(tx, true); err != nil {
			// The state is the one they were applied to before, so this is a failing disk or
			// a bug: the deferred writes are lost, as in a crash.
			slog.Error("deferred writes lost: applying them again failed", "error", err)
			_ = tx.Rollback()
			g.deferred = nil
			g.notify(fmt.Errorf("deferred write lost: %w", err))
			if tx, err = g.db.Begin(true); err != nil {
				return nil, err
			}
			g.commits.Add(1)
			break
		}
	}
	g.open = tx
	return tx, nil
}

// rollback discards the open transaction; the deferred writes are applied again by the next
// openTx. txMu is held.
func (g *Group) rollback() {
	if g.open != nil {
		_ = g.open.Rollback()
		g.open = nil
	}
}

// commit runs the writes in the open transaction and commits it. A write that fails gets its
// error (the state it saw is the writes before it, which stay); the transaction is rolled back
// and the others run again without it.
func (g *Group) commit(batch []*groupWrite) {
	g.txMu.Lock()
	g.lockedAt = time.Now()
	defer g.unlockTx()
	g.mu.Lock()
	g.committers--
	var later []func(*bolt.Tx) error
	if g.laterDue {
		later, g.later, g.laterDue = g.later, nil, false
		if g.laterTimer != nil {
			g.laterTimer.Stop()
			g.laterTimer = nil
		}
	}
	g.mu.Unlock()
	// The deferred writes waiting for the transaction go first: this commit makes them durable.
	g.applyDeferred()
	var beginErr error
	for len(batch) > 0 {
		tx, err := g.openTx()
		if err != nil {
			for _, w := range batch {
				w.done <- err
			}
			batch, beginErr = nil, err
			break
		}
		failed := -1
		for i, w := range batch {
			if err = w.fn(tx); err != nil {
				failed = i
				break
			}
		}
		if failed >= 0 {
			g.rollback()
			batch[failed].done <- err
			batch = append(batch[:failed:failed], batch[failed+1:]...)
			continue
		}
		// The deferred writes queued while the batch ran, and the later ones, are covered by
		// this commit too. A failing one rolls the transaction back: the others run again.
		if g.applyDeferred(); g.open != tx {
			continue
		}
		if !g.applyLater(tx, &later) {
			continue
		}
		g.open = nil
		err = tx.Commit()
		if err != nil && len(g.deferred) > 0 {
			slog.Error("deferred writes lost: their commit failed", "error", err)
		}
		g.deferred = nil
		g.notify(err)
		if g.timer != nil {
			g.timer.Stop()
			g.timer = nil
		}
		for _, w := range batch {
			w.done <- err
		}
		return
	}
	// Every write failed (or no transaction began): the deferred ones still wait in a
	// transaction of their own, which their timer commits; the later ones wait for the next
	// commit. On a closed file no commit ever comes: they are lost, rather than tried by their
	// timer for ever.
	if errors.Is(beginErr, berrors.ErrDatabaseNotOpen) {
		if len(later) > 0 {
			slog.Error("later writes lost: the file is closed", "writes", len(later))
			later = nil
		}
		g.notify(beginErr) // nor will a commit come for the deferred writes
	}
	if len(later) > 0 {
		g.mu.Lock()
		g.later = append(later, g.later...)
		g.laterDue = true // for the next commit, or the timer's
		if g.laterTimer == nil {
			g.laterTimer = time.AfterFunc(g.laterDelay, g.Sync)
		}
		g.mu.Unlock()
	}
}

// applyLater runs the later writes in tx. When one fails it is dropped from later, tx is
// rolled back, and applyLater reports false. txMu is held.
func (g *Group) applyLater(tx *bolt.Tx, later *[]func(*bolt.Tx) error) bool {
	for i, fn := range *later {
		if err := fn(tx); err != nil {
			slog.Error("a later write lost: it failed", "error", err)
			*later = append((*later)[:i:i], (*later)[i+1:]...)
			g.rollback()
			return false
		}
	}
	return true
}

// Commits is how many write transactions the group has begun (each committed or rolled back),
// for tests and measurements.
func (g *Group) Commits() int64 { return g.commits.Load() }

// deferQueued is how many deferred writes wait for the transaction, for tests.
func (g *Group) deferQueued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.deferQueue)
}

// queued is how many writes wait for a commit, for tests.
func (g *Group) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// ObserveBusy exports Busy as hermes_boltstore_writer_busy_seconds_total{file=file} through the
// global meter provider. Call it once for each file a process keeps open; the observation holds
// g for the process's life.
func (g *Group) ObserveBusy(file string) error {
	at := metric.WithAttributes(attribute.String("file", file))
	_, err := otel.Meter("github.com/hermes-agent/hermes/internal/boltstore").Float64ObservableCounter(
		"hermes.boltstore.writer.busy", metric.WithUnit("s"),
		metric.WithDescription("Time the file's one writer was busy: applying writes, committing and syncing"),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			o.Observe(g.Busy().Seconds(), at)
			return nil
		}))
	return err
}
