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
// background. It returns how long after the call TurnStarted came (the session's lease taken
// and the user's message stored) and how long the turn took to its final event.
func untilCompleted(ctx context.Context, orch orchestratorv1.OrchestratorServiceClient, session, user, text string) (started, took time.Duration, err error) {
	start := time.Now()
	stream, err := orch.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: user, Text: text})
	if err != nil {
		return 0, 0, err
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return 0, 0, errors.New("the stream ended without a final event")
		}
		if err != nil {
			return 0, 0, err
		}
		switch e := msg.GetEvent().GetEvent().(type) {
		case *orchestratorv1.TurnEvent_Started:
			started = time.Since(start)
		case *orchestratorv1.TurnEvent_Completed:
			took := time.Since(start)
			go func() {
				for {
					if _, err := stream.Recv(); err != nil {
						return
					}
				}
			}()
			return started, took, nil
		case *orchestratorv1.TurnEvent_Failed:
			return 0, 0, fmt.Errorf("turn failed: %s %s", e.Failed.GetCode(), e.Failed.GetMessage())
		}
	}
}

// TestBackToBackTurnsSmoke is the CI-sized smoke benchmark of the session lease hand-off: a
// turn sent on one session the moment the previous turn of that session reported TurnCompleted
// (back-to-back) must start as fast as a turn sent on a session whose last turn ended long ago
// (round-robin). Both run interleaved in one test against one stack with an instant model and
// are compared as a ratio of medians of the time to TurnStarted (the lease taken, the user's
// message stored), which a lease held past TurnCompleted and polled for lengthens by its
// back-off; the whole turns are compared too, more loosely, since the rest of a turn is noisy on
// a loaded machine.
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
			const rounds, perSession, spread = 30, 5, 3
			user := "smoke"
			type timing struct{ started, took time.Duration }
			turn := func(session string) timing {
				t.Helper()
				st, d, err := untilCompleted(ctx, s.orch, session, user, "what time is it?")
				if err != nil {
					t.Fatal(err)
				}
				return timing{st, d}
			}
			median := func(d []time.Duration) time.Duration {
				slices.Sort(d)
				return d[len(d)/2]
			}
			// A measurement on a loaded machine can be unlucky; a lease that is not handed over
			// is late in every one. So up to three measurements, and one within bounds passes.
			for attempt := 1; ; attempt++ {
				// Fresh sessions each time, so they stay below the window.
				ones := make([]string, rounds/perSession+1)
				for i := range ones {
					ones[i] = s.newSession(user)
				}
				others := make([]string, spread)
				for i := range others {
					others[i] = s.newSession(user)
				}
				// Warm up connections, caches and the tokenizer.
				for _, sid := range others {
					turn(sid)
				}
				var b2bStart, rrStart, b2bTurn, rrTurn []time.Duration
				for i := range rounds {
					one := ones[i/perSession]
					turn(one)      // the previous turn of the session…
					b := turn(one) // …and the next one, sent on its TurnCompleted
					r := turn(others[i%spread])
					b2bStart, b2bTurn = append(b2bStart, b.started), append(b2bTurn, b.took)
					rrStart, rrTurn = append(rrStart, r.started), append(rrTurn, r.took)
				}
				bs, rs, bt, rt := median(b2bStart), median(rrStart), median(b2bTurn), median(rrTurn)
				startRatio, turnRatio := float64(bs)/float64(rs), float64(bt)/float64(rt)
				t.Logf("measurement %d: median to TurnStarted: back-to-back on one session %s, round-robin over %d sessions %s, ratio %.2f; whole turn %s vs %s, ratio %.2f",
					attempt, bs, spread, rs, startRatio, bt, rt, turnRatio)
				// Equal work gives about 1; the polled lease's 20 ms first back-off gave 5–10 for
				// the start and 1.5–2.5 for the whole turn.
				if startRatio <= 2 && turnRatio <= 1.8 {
					break
				}
				if attempt == 3 {
					t.Errorf("back-to-back turns on one session start %.2f× (whole turn %.2f×) as late as turns spread over sessions, in three measurements: the session lease is not handed over at once", startRatio, turnRatio)
					break
				}
			}
		})
	}
}
