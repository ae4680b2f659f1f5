package workpool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestNeverWaits: work beyond the workers gets goroutines of its own (ten functions that each
// wait for all ten to have started, on two workers, end), and work after Stop runs.
func TestNeverWaits(t *testing.T) {
	for _, p := range []*Pool{New(2), New(0), nil} {
		const n = 10
		var started, done sync.WaitGroup
		started.Add(n)
		done.Add(n)
		for range n {
			p.Go(func() {
				defer done.Done()
				started.Done()
				started.Wait()
			})
		}
		done.Wait()
		p.Stop()
		ran := make(chan struct{})
		p.Go(func() { close(ran) })
		<-ran
	}
}

// TestMostRecentlyIdleFirst: work goes to the worker that became idle last, so a light load
// keeps reusing the same warm workers; Stop ends the idle ones.
func TestMostRecentlyIdleFirst(t *testing.T) {
	p := New(4)
	// Three workers busy at once, then idle in the order 0, 1, 2.
	var started sync.WaitGroup
	started.Add(3)
	release := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	finished := make(chan int)
	for i := range 3 {
		p.Go(func() {
			started.Done()
			<-release[i]
			finished <- i
		})
	}
	started.Wait()
	idleAfter := func(n int) []chan func() {
		t.Helper()
		for {
			p.mu.Lock()
			idle := append([]chan func(){}, p.idle...)
			p.mu.Unlock()
			if len(idle) == n {
				return idle
			}
			runtime.Gosched()
		}
	}
	for i := range 3 {
		close(release[i])
		<-finished
		idleAfter(i + 1)
	}
	idle := idleAfter(3)

	ran := make(chan struct{})
	block := make(chan struct{})
	p.Go(func() { close(ran); <-block })
	<-ran
	p.mu.Lock()
	got := append([]chan func(){}, p.idle...)
	started3 := p.started
	p.mu.Unlock()
	if len(got) != 2 || got[0] != idle[0] || got[1] != idle[1] {
		t.Errorf("the work did not go to the most recently idle worker: idle before %v, after %v", idle, got)
	}
	if started3 != 3 {
		t.Errorf("started = %d, want 3 (no new worker while one is idle)", started3)
	}

	p.Stop()
	close(block)
	for {
		p.mu.Lock()
		n := p.started
		p.mu.Unlock()
		if n == 0 {
			break
		}
		runtime.Gosched()
	}
}

// TestGroupLikeErrgroup: the first error is Wait's and the context's cause, and ends the
// context at once; Wait ends the context too; without errors Wait returns nil.
func TestGroupLikeErrgroup(t *testing.T) {
	p := New(4)
	defer p.Stop()

	first, second := errors.New("first"), errors.New("second")
	g, ctx := NewGroup(context.Background(), p)
	release := make(chan struct{})
	g.Go(func() error { return first })
	g.Go(func() error {
		<-ctx.Done() // the first error ended the context while this still runs
		<-release
		return second
	})
	g.Go(func() error { return nil })
	<-ctx.Done()
	close(release)
	if err := g.Wait(); err != first {
		t.Errorf("Wait() = %v, want %v", err, first)
	}
	if cause := context.Cause(ctx); cause != first {
		t.Errorf("cause = %v, want %v", cause, first)
	}

	g, ctx = NewGroup(context.Background(), p)
	g.Go(func() error { return nil })
	if err := g.Wait(); err != nil {
		t.Errorf("Wait() = %v, want nil", err)
	}
	if ctx.Err() == nil {
		t.Error("the context did not end with Wait")
	}
}

// TestGroupDo checks that a function run by Do counts as one of the group's: its error, the
// first, cancels the context and is Wait's; a Go function's earlier error wins over it.
func TestGroupDo(t *testing.T) {
	p := New(2)
	defer p.Stop()
	mine := errors.New("mine")
	g, ctx := NewGroup(context.Background(), p)
	ran := make(chan struct{})
	g.Go(func() error {
		<-ctx.Done() // ended by Do's error
		close(ran)
		return errors.New("later")
	})
	g.Do(func() error { return mine })
	<-ran
	if err := g.Wait(); err != mine {
		t.Errorf("Wait() = %v, want %v", err, mine)
	}

	first := errors.New("first")
	g, ctx = NewGroup(context.Background(), p)
	g.Go(func() error { return first })
	<-ctx.Done()
	g.Do(func() error { return mine })
	if err := g.Wait(); err != first {
		t.Errorf("Wait() = %v, want the Go function's %v", err, first)
	}

	g, _ = NewGroup(context.Background(), p)
	var did bool
	g.Do(func() error { did = true; return nil })
	if err := g.Wait(); err != nil || !did {
		t.Errorf("Wait() = %v, did = %v; want nil, true", err, did)
	}
}

// TestWaitRunsUnstarted: Wait runs a function whose worker has not got to it, on the waiting
// goroutine; the worker, when it runs at last, skips it. The pool's one idle worker here is an
// inbox nobody reads until the test does.
func TestWaitRunsUnstarted(t *testing.T) {
	inbox := make(chan func(), 1)
	p := &Pool{max: 1, started: 1, idle: []chan func(){inbox}}
	g, ctx := NewGroup(context.Background(), p)
	want := errors.New("ran")
	runs := 0
	g.Go(func() error { runs++; return want })
	if err := g.Wait(); err != want {
		t.Errorf("Wait() = %v, want %v", err, want)
	}
	if context.Cause(ctx) != want {
		t.Errorf("cause = %v, want %v", context.Cause(ctx), want)
	}
	(<-inbox)() // the worker's turn
	if runs != 1 {
		t.Errorf("the function ran %d times, want once", runs)
	}
}

// TestGroupRunsEachOnce: with workers and the waiter claiming functions at once, each function
// runs exactly once (run with -race).
func TestGroupRunsEachOnce(t *testing.T) {
	p := New(2)
	defer p.Stop()
	for range 200 {
		g, _ := NewGroup(context.Background(), p)
		var runs [4]atomic.Int32
		for i := range runs {
			g.Go(func() error { runs[i].Add(1); return nil })
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		for i := range runs {
			if n := runs[i].Load(); n != 1 {
				t.Fatalf("function %d ran %d times, want once", i, n)
			}
		}
	}
}

//go:noinline
func deep(n int) byte {
	var buf [256]byte
	buf[n%len(buf)] = byte(n)
	if n == 0 {
		return buf[0]
	}
	return deep(n-1) + buf[n%len(buf)]
}

// BenchmarkDeepStack: work that needs about 32 KiB of stack, on a goroutine of its own each
// time against on the pool's warm workers.
func BenchmarkDeepStack(b *testing.B) {
	for _, tc := range []struct {
		name string
		p    *Pool
	}{{"goroutine", nil}, {"pool", New(4)}} {
		b.Run(tc.name, func(b *testing.B) {
			done := make(chan struct{})
			for b.Loop() {
				tc.p.Go(func() {
					deep(100)
					done <- struct{}{}
				})
				<-done
			}
			tc.p.Stop()
		})
	}
}
