package orchestrator

import (
	"context"
	"sync"
)

// workers runs a turn's background work (the RUNNING record's write, a step's write, the
// gathering's fetches, the turn.finished publish) on long-lived goroutines. A new goroutine per
// piece of work grew its stack by copying through the in-process call chain (session, bolt,
// tools, memory) every time: about 2% of a monolith turn's CPU. A worker keeps the stack it
// grew (the collector halves an idle one's at most once per cycle). Work that finds no idle
// worker gets a goroutine of its own, as before: none waits for a worker.
type workers struct {
	ch   chan func()
	quit chan struct{}
	once sync.Once
}

// turnWorkers is how many workers an orchestrator keeps: a turn runs up to five pieces of
// background work at once, and a replica several turns.
const turnWorkers = 64

func newWorkers(n int) *workers {
	w := &workers{ch: make(chan func()), quit: make(chan struct{})}
	for range n {
		go w.work()
	}
	return w
}

func (w *workers) work() {
	for {
		select {
		case f := <-w.ch:
			f()
		case <-w.quit:
			return
		}
	}
}

// run runs f on an idle worker, or on a goroutine of its own when none is idle (or after stop,
// or without workers: a Service not made by NewService, in tests).
func (w *workers) run(f func()) {
	if w == nil {
		go f()
		return
	}
	select {
	case w.ch <- f:
	default:
		go f()
	}
}

// stop lets the workers end once their work is done; later work gets goroutines of its own.
func (w *workers) stop() {
	if w != nil {
		w.once.Do(func() { close(w.quit) })
	}
}

// group is errgroup.WithContext's behaviour on workers: the first error cancels the context and
// is what wait returns; wait cancels the context too.
type group struct {
	w      *workers
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func newGroup(ctx context.Context, w *workers) (*group, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	return &group{w: w, cancel: cancel}, ctx
}

// do runs f in the group.
func (g *group) do(f func() error) {
	g.wg.Add(1)
	g.w.run(func() {
		defer g.wg.Done()
		if err := f(); err != nil {
			g.once.Do(func() {
				g.err = err
				g.cancel(err)
			})
		}
	})
}

// wait waits for the group's functions and returns the first error.
func (g *group) wait() error {
	g.wg.Wait()
	g.cancel(g.err)
	return g.err
}
