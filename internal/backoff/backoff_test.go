package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}
	for _, tc := range []struct {
		attempt int
		base    time.Duration
	}{
		{-1, 100 * time.Millisecond},
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{2, 400 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{4, time.Second},
		{1000, time.Second},
	} {
		lo, hi := tc.base*8/10, min(tc.base*12/10, p.Max)
		var sawLow, sawHigh bool
		for range 2000 {
			d := p.Delay(tc.attempt)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", tc.attempt, d, lo, hi)
			}
			sawLow = sawLow || d < tc.base*95/100
			sawHigh = sawHigh || d > tc.base*105/100 || (tc.base == p.Max && d > tc.base*97/100)
		}
		if !sawLow || !sawHigh {
			t.Errorf("Delay(%d): jitter does not spread over ±20%% (below 0.95: %v, above 1.05: %v)", tc.attempt, sawLow, sawHigh)
		}
	}
}

// TestDelayNeverAboveMax replays the reconnect delay of 32.7 s seen with a maximum of 30 s: the
// jitter was added after the cap.
func TestDelayNeverAboveMax(t *testing.T) {
	p := Policy{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2}
	for attempt := range 20 {
		for range 500 {
			if d := p.Delay(attempt); d > p.Max {
				t.Fatalf("Delay(%d) = %s, above Max %s", attempt, d, p.Max)
			}
		}
	}
}

func TestDelayWithoutJitterAndDegenerate(t *testing.T) {
	if d := (Policy{Initial: time.Second, Max: time.Minute}).Delay(3); d != 8*time.Second {
		t.Errorf("no jitter: got %s, want 8s", d)
	}
	if d := (Policy{}).Delay(0); d != time.Millisecond {
		t.Errorf("zero policy: got %s, want 1ms", d)
	}
	if d := (Policy{Initial: time.Second, Max: time.Millisecond}).Delay(5); d != time.Second {
		t.Errorf("Max below Initial: got %s, want Initial", d)
	}
	if d := (Policy{Initial: time.Hour, Max: 1 << 62, Jitter: 5}).Delay(100); d <= 0 {
		t.Errorf("overflow: got %s", d)
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep without cancellation returned false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep on an ended context returned true")
	}
}

func TestUntil(t *testing.T) {
	p := Policy{Initial: time.Millisecond, Max: 4 * time.Millisecond, Jitter: 0.2}
	tries := 0
	if !Until(context.Background(), p, func() bool { tries++; return tries == 5 }) || tries != 5 {
		t.Errorf("Until stopped after %d tries, want true after 5", tries)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if Until(ctx, p, func() bool { return false }) {
		t.Error("Until of a try that never holds reported true")
	}
	if ctx.Err() == nil {
		t.Error("Until returned before its context ended")
	}
}
