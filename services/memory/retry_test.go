package memory

import (
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/backoff"
)

// TestRetryPoliciesSpreadAndCap: the consumer's pauses (a busy turn, a failed event's
// redelivery) and the maintenance period are spread, so replicas that failed or started together
// do not act in step, and never exceed their caps.
func TestRetryPoliciesSpreadAndCap(t *testing.T) {
	c := &Consumer{cfg: Config{ConsumerRetryBackoff: 2 * time.Second}}
	tests := []struct {
		name    string
		p       backoff.Policy
		lo, max time.Duration // bounds of every pause, any attempt
	}{
		{"busy turn", busyRetry, 200 * time.Millisecond, 5 * time.Second},
		{"redelivery", c.redelivery(), 1600 * time.Millisecond, 10 * time.Minute},
		{"maintenance", maintenanceEvery(time.Hour), time.Hour, time.Hour * 11 / 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, attempt := range []int{0, 3, 30} {
				seen := map[time.Duration]bool{}
				for range 200 {
					d := tc.p.Delay(attempt)
					if d < tc.lo || d > tc.max {
						t.Fatalf("Delay(%d) = %s, want within [%s, %s]", attempt, d, tc.lo, tc.max)
					}
					seen[d] = true
				}
				if len(seen) < 20 {
					t.Errorf("Delay(%d) takes %d values in 200 draws; want it spread", attempt, len(seen))
				}
			}
		})
	}
}
