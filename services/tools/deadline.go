package tools

import (
	"context"
	"sync"
	"time"
)

// callDeadline is a call's deadline that can be pushed back while the tool waits for a person:
// an MCP server's request for user input (elicitation) passed to the caller holds the call for
// up to the request's own time limit, which is not taken from the tool's timeout. It is never
// pushed past the caller's deadline, which ends the call regardless.
type callDeadline struct {
	cancel context.CancelFunc
	limit  time.Time // the caller's deadline; zero when it has none

	mu    sync.Mutex // guards at and timer
	at    time.Time
	timer *time.Timer
}

// newCallDeadline returns a context that ends at at (or when ctx ends), and its deadline.
func newCallDeadline(ctx context.Context, at time.Time) (context.Context, *callDeadline) {
	rctx, cancel := context.WithCancel(ctx)
	d := &callDeadline{cancel: cancel, at: at}
	if dl, ok := ctx.Deadline(); ok {
		d.limit = dl
	}
	d.timer = time.AfterFunc(time.Until(at), cancel)
	return rctx, d
}

// pushBack moves the deadline by extra, within the caller's deadline.
func (d *callDeadline) pushBack(extra time.Duration) {
	if d == nil || extra <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at := d.at.Add(extra)
	if !d.limit.IsZero() && at.After(d.limit) {
		at = d.limit
	}
	if !at.After(d.at) || !d.timer.Stop() {
		return // not later, or already passed
	}
	d.at = at
	d.timer.Reset(time.Until(at))
}

// deadline is when the call times out.
func (d *callDeadline) deadline() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// until is the time left.
func (d *callDeadline) until() time.Duration { return time.Until(d.deadline()) }

// stop releases the deadline's timer and context.
func (d *callDeadline) stop() {
	d.mu.Lock()
	d.timer.Stop()
	d.mu.Unlock()
	d.cancel()
}
