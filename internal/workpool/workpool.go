// Package workpool runs short pieces of background work on long-lived goroutines.
//
// A goroutine started per piece of work begins with a small stack and grows it by copying
// through the in-process call chain (gRPC interceptors, services, bbolt): stack growth was 6%
// of a sequential monolith turn's CPU, most of it in such goroutines. A worker keeps the stack
// it grew; the collector halves an idle worker's stack at most once per cycle. Workers are
// handed work most recently idle first, so the few that a light load needs stay warm, and the
// rest, idle, shrink.
package workpool

import (
	"context"
	"sync"
	"sync/atomic"
)

// Pool hands work to idle workers, starting up to max of them; work beyond that gets a
// goroutine of its own, so nothing ever waits for a worker. The zero of *Pool (nil) runs each
// piece on a goroutine of its own.
type Pool struct {
	max int

	mu sync.Mutex // guards the fields below
	// idle holds the idle workers' inboxes, the most recently idle last.
	idle    []chan func()
	started int
	stopped bool
}

// New returns a pool of at most max workers.
func New(max int) *Pool {
	return &Pool{max: max}
}

// Go runs f on an idle worker, a new one, or a goroutine of its own.
func (p *Pool) Go(f func()) {
	if p == nil {
		go f()
		return
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		in := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		in <- f // buffered: never blocks
		return
	}
	if p.stopped || p.started >= p.max {
		p.mu.Unlock()
		go f()
		return
	}
	p.started++
	p.mu.Unlock()
	go p.work(make(chan func(), 1), f)
}

func (p *Pool) work(in chan func(), f func()) {
	for {
		f()
		p.mu.Lock()
		if p.stopped {
			p.started--
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, in)
		p.mu.Unlock()
		var ok bool
		if f, ok = <-in; !ok {
			return
		}
	}
}

// Stop ends the idle workers, and the busy ones once their work is done. Work given after it
// runs on goroutines of its own.
func (p *Pool) Stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for _, in := range p.idle {
		close(in)
	}
	p.started -= len(p.idle)
	p.idle = nil
}

// Group is errgroup.WithContext's behaviour on a pool: the first error cancels the context and
// is what Wait returns; Wait cancels the context too.
//
// Wait runs, on the waiting goroutine, each function that no worker has started yet. A worker
// handed a function is made runnable, and on a loaded machine it may wait for a processor
// longer than the function takes: a turn's gathering (tools, memories, task state) waited on
// two cores for workers that the previous turn's background work kept from running, while the
// turn's own goroutine, which would only wait, sat idle. Whichever of the two claims a function
// first runs it; the other skips it.
type Group struct {
	p      *Pool
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error

	mu sync.Mutex // guards tasks
	// tasks are the functions given to Go, for Wait to run those not yet claimed.
	tasks []*task
}

// task is a function of a group that runs once, on whichever goroutine claims it first.
type task struct {
	claimed atomic.Bool
	f       func() error
}

// NewGroup returns a group whose functions run on p, and the context they share.
func NewGroup(ctx context.Context, p *Pool) (*Group, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	return &Group{p: p, cancel: cancel}, ctx
}

// Go runs f in the group: on a worker, or on the goroutine that calls Wait if that gets to it
// first.
func (g *Group) Go(f func() error) {
	t := &task{f: f}
	g.wg.Add(1)
	g.mu.Lock()
	g.tasks = append(g.tasks, t)
	g.mu.Unlock()
	g.p.Go(func() { g.run(t) })
}

// run runs t unless another goroutine claimed it.
func (g *Group) run(t *task) {
	if !t.claimed.CompareAndSwap(false, true) {
		return
	}
	defer g.wg.Done()
	g.fail(t.f())
}

// Do runs f in the group on the calling goroutine, for the last of a batch the caller would
// otherwise only wait for: its error counts as a Go function's does, and it costs no hand-off
// to a worker and back.
func (g *Group) Do(f func() error) {
	g.fail(f())
}

// fail records err if it is the group's first.
func (g *Group) fail(err error) {
	if err == nil {
		return
	}
	g.once.Do(func() {
		g.err = err
		g.cancel(err)
	})
}

// Wait runs the functions no worker has started, waits for the rest and returns the first
// error.
func (g *Group) Wait() error {
	for i := 0; ; i++ {
		g.mu.Lock()
		if i >= len(g.tasks) {
			g.mu.Unlock()
			break
		}
		t := g.tasks[i]
		g.mu.Unlock()
		g.run(t)
	}
	g.wg.Wait()
	g.cancel(g.err)
	return g.err
}
