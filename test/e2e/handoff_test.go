package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// untilCompleted runs a turn and returns as soon as its final event arrives, the way an
// interactive client sends its next message: the rest of the stream is drained in the
// background. It returns how long the turn took from the call to its final event.
func untilCompleted(ctx context.Context, orch orchestratorv1.OrchestratorServiceClient, session, user, text string) (time.Duration, error) {
	start := time.Now()
	stream, err := orch.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: user, Text: text})
	if err != nil {
		return 0, err
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return 0, errors.New("the stream ended without a final event")
		}
		if err != nil {
			return 0, err
		}
		switch e := msg.GetEvent().GetEvent().(type) {
		case *orchestratorv1.TurnEvent_Completed:
			took := time.Since(start)
			go func() {
				for {
					if _, err := stream.Recv(); err != nil {
						return
					}
				}
			}()
			return took, nil
		case *orchestratorv1.TurnEvent_Failed:
			return 0, fmt.Errorf("turn failed: %s %s", e.Failed.GetCode(), e.Failed.GetMessage())
		}
	}
}

// TestBackToBackTurnsSmoke is the CI-sized smoke benchmark of the session lease hand-off: a
// turn sent on one session the moment the previous turn of that session reported TurnCompleted
// (back-to-back) must cost no more than a turn sent on a session whose last turn ended long ago
// (round-robin). Both run interleaved in one test against one stack with an instant model, and
// are compared as a ratio of medians, so the machine's load affects both alike. A hand-off that
// regressed to a sleep (the lease held past TurnCompleted and polled for) makes back-to-back
// turns several times slower.
func TestBackToBackTurnsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmark smoke test")
	}
	for _, mode := range []struct {
		name     string
		embedded bool
	}{{"monolithic", true}, {"redis", false}} {
		t.Run(mode.name, func(t *testing.T) {
			s := startStack(t, instantModel, stackOptions{embedded: mode.embedded})
			ctx := context.Background()
			// Sessions stay below the 12-turn window (no summary calls), the same shape in both
			// cases: each back-to-back session gets 2 turns in each of 5 rounds, each
			// round-robin session one turn in every third round.
			const rounds, perSession, spread = 24, 5, 3
			user := "smoke"
			ones := make([]string, rounds/perSession+1)
			for i := range ones {
				ones[i] = s.newSession(user)
			}
			others := make([]string, spread)
			for i := range others {
				others[i] = s.newSession(user)
			}
			turn := func(session string) time.Duration {
				t.Helper()
				d, err := untilCompleted(ctx, s.orch, session, user, "what time is it?")
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			// Warm up connections, caches and the tokenizer.
			for _, sid := range others {
				turn(sid)
			}
			var backToBack, roundRobin []time.Duration
			for i := range rounds {
				one := ones[i/perSession]
				turn(one)                                  // the previous turn of the session…
				backToBack = append(backToBack, turn(one)) // …and the next one, sent on its TurnCompleted
				roundRobin = append(roundRobin, turn(others[i%spread]))
			}
			slices.Sort(backToBack)
			slices.Sort(roundRobin)
			b2b, rr := backToBack[rounds/2], roundRobin[rounds/2]
			ratio := float64(b2b) / float64(rr)
			t.Logf("median turn: back-to-back on one session %s, round-robin over %d sessions %s; ratio %.2f", b2b, spread, rr, ratio)
			// Equal work gives 1.0; the 20 ms first back-off of a polled lease gave about 3.
			if ratio > 1.6 {
				t.Errorf("back-to-back turns on one session take %.2f× as long as turns spread over sessions (%s vs %s): the session lease is not handed over at once", ratio, b2b, rr)
			}
		})
	}
}
