package mcpgateway

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errCallTimeout ends a call whose timeout passed.
var errCallTimeout = errors.New("the call's timeout passed")

// callClock is a call's timeout that stands still while a person is asked for input (an
// elicitation passed to the caller): the time a person takes to answer, up to
// mcpgateway.elicit-timeout, is not taken from the tool's time.
type callClock struct {
	cancel context.CancelCauseFunc

	mu       sync.Mutex // guards the fields below
	timer    *time.Timer
	deadline time.Time     // when the call times out, while the clock runs
	left     time.Duration // the time left, while it is held
	held     int           // holds in force
}

// newCallClock returns a context that ends with errCallTimeout as its cause after d of running
// time, and the clock that measures it.
func newCallClock(ctx context.Context, d time.Duration) (context.Context, *callClock) {
	cctx, cancel := context.WithCancelCause(ctx)
	c := &callClock{cancel: cancel, deadline: time.Now().Add(d)}
	c.timer = time.AfterFunc(d, func() { cancel(errCallTimeout) })
	return cctx, c
}

// hold stops the clock until release is called (once or more: only the first counts).
func (c *callClock) hold() (release func()) {
	if c == nil {
		return func() {}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == 0 {
		if !c.timer.Stop() {
			return func() {} // the call timed out already
		}
		c.left = time.Until(c.deadline)
	}
	c.held++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.held--; c.held == 0 {
				c.deadline = time.Now().Add(c.left)
				c.timer.Reset(c.left)
			}
		})
	}
}

// remaining is the call's time left.
func (c *callClock) remaining() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held > 0 {
		return c.left
	}
	return time.Until(c.deadline)
}

// stop ends the clock and its context.
func (c *callClock) stop() {
	c.mu.Lock()
	c.timer.Stop()
	c.mu.Unlock()
	c.cancel(context.Canceled)
}

// timedOut reports whether ctx, a clock's context, ended because the call's time ran out.
func timedOut(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errCallTimeout)
}
