// Package backoff computes the pauses of retry loops: exponential from a first delay up to a
// cap, with random jitter so that replicas which failed together do not retry together.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// maxDelay keeps a pause and its jitter far from overflowing.
const maxDelay = 1000 * time.Hour

// Policy is an exponential back-off. The zero value is not useful; set Initial and Max.
type Policy struct {
	// Initial is the pause before the first retry (attempt 0).
	Initial time.Duration
	// Max caps the pause, jitter included: a pause is never longer than Max.
	Max time.Duration
	// Jitter is the random part as a fraction of the pause: 0.2 spreads a pause d uniformly over
	// [0.8·d, 1.2·d], and a pause at the cap over [0.8·Max, Max]. Values outside [0, 1] are
	// clamped.
	Jitter float64
}

// Delay is the pause before retry attempt (0-based): Initial·2^attempt with jitter, never above
// Max (or Initial when that is larger). It is never less than a millisecond, so a loop using it
// cannot spin.
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Initial
	if d <= 0 {
		d = time.Millisecond
	}
	limit := min(max(p.Max, d), maxDelay)
	for range min(max(attempt, 0), 62) {
		if d >= limit/2 {
			d = limit
			break
		}
		d *= 2
	}
	d = min(d, limit)
	j := min(max(p.Jitter, 0), 1)
	d += time.Duration((2*rand.Float64() - 1) * j * float64(d)) // #nosec G404 -- jitter spreads retries; nothing secret depends on it
	if d > limit {
		// Folded back below the cap rather than clipped to it, so pauses at the cap stay spread
		// (over [(1-j)·limit, limit]) instead of piling up on limit itself.
		d = 2*limit - d
	}
	return max(d, time.Millisecond)
}

// Sleep waits d or until ctx ends, and reports whether the whole pause passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Until calls try until it reports true, pausing p.Delay(attempt) after each failed try, and
// reports whether it did before ctx ended. It is the loop of a retry or a poll whose try keeps
// its own errors.
func Until(ctx context.Context, p Policy, try func() bool) bool {
	for attempt := 0; ; attempt++ {
		if try() {
			return true
		}
		if !Sleep(ctx, p.Delay(attempt)) {
			return false
		}
	}
}
