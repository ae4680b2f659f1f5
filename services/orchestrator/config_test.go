package orchestrator

import (
	"flag"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestStepHold: the flag's default is the hold a zero Config gets; a negative hold stays (the
// step is written at once); a hold past the limit is cut to it.
func TestStepHold(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	got := []time.Duration{c.StepHold}
	for _, in := range []time.Duration{0, -time.Millisecond, 10 * time.Millisecond, time.Hour} {
		got = append(got, Config{StepHold: in}.withDefaults().StepHold)
	}
	want := []time.Duration{defaultStepHold, defaultStepHold, -time.Millisecond, 10 * time.Millisecond, maxStepHold}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("step holds (-want +got):\n%s", diff)
	}
}
