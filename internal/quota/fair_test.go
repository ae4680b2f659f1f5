package quota

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/internal/testenv"
)

// TestFairQueueRoundRobin: with the one slot taken, a flood of one user's waiters and a single
// waiter of another, the other's waiter is served second, not after the flood.
func TestFairQueueRoundRobin(t *testing.T) {
	f := newFairQueue(1)
	ctx := context.Background()
	hold, err := f.Wait(ctx, "flood")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan string, 10)
	wait := func(key string) {
		release, err := f.Wait(ctx, key)
		if err != nil {
			t.Error(err)
			return
		}
		served <- key
		release()
	}
	for range 4 {
		go wait("flood")
	}
	testenv.WaitFor(t, 10*time.Second, "4 waiters", func() bool { return f.Waiting() == 4 })
	go wait("quiet")
	testenv.WaitFor(t, 10*time.Second, "5 waiters", func() bool { return f.Waiting() == 5 })
	hold()
	var got []string
	for range 5 {
		got = append(got, <-served)
	}
	want := []string{"flood", "quiet", "flood", "flood", "flood"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("order served (-want +got):\n%s", d)
	}
}

// TestFairQueueCancel: a waiter that leaves is removed and the slot goes to the next.
func TestFairQueueCancel(t *testing.T) {
	f := newFairQueue(1)
	hold, _ := f.Wait(context.Background(), "a")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := f.Wait(ctx, "b"); errc <- err }()
	testenv.WaitFor(t, 10*time.Second, "a waiter", func() bool { return f.Waiting() == 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled waiter got a slot")
	}
	if f.Waiting() != 0 {
		t.Errorf("%d waiting after the cancel", f.Waiting())
	}
	hold()
	release, err := f.Wait(context.Background(), "c")
	if err != nil {
		t.Fatal(err)
	}
	release()
}
