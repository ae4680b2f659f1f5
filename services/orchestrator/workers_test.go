package orchestrator

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// TestWorkersNeverWait: work beyond the idle workers gets goroutines of its own (ten functions
// that each wait for all ten to have started, on two workers, end), and work after stop runs.
func TestWorkersNeverWait(t *testing.T) {
	for _, w := range []*workers{newWorkers(2), nil} {
		const n = 10
		var started, done sync.WaitGroup
		started.Add(n)
		done.Add(n)
		for range n {
			w.run(func() {
				defer done.Done()
				started.Done()
				started.Wait()
			})
		}
		done.Wait()
		w.stop()
		ran := make(chan struct{})
		w.run(func() { close(ran) })
		<-ran
	}
}

// TestGroupLikeErrgroup: the first error is wait's and the context's cause, and ends the context
// at once; wait ends the context too; without errors wait returns nil.
func TestGroupLikeErrgroup(t *testing.T) {
	w := newWorkers(4)
	defer w.stop()

	first, second := errors.New("first"), errors.New("second")
	g, ctx := newGroup(context.Background(), w)
	release := make(chan struct{})
	g.do(func() error { return first })
	g.do(func() error {
		<-ctx.Done() // the first error ended the context while this still runs
		<-release
		return second
	})
	g.do(func() error { return nil })
	<-ctx.Done()
	close(release)
	if err := g.wait(); err != first {
		t.Errorf("wait() = %v, want %v", err, first)
	}
	if cause := context.Cause(ctx); cause != first {
		t.Errorf("cause = %v, want %v", cause, first)
	}

	g, ctx = newGroup(context.Background(), w)
	g.do(func() error { return nil })
	if err := g.wait(); err != nil {
		t.Errorf("wait() = %v, want nil", err)
	}
	if ctx.Err() == nil {
		t.Error("the context did not end with wait")
	}
}
