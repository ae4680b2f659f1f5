package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/orchestrator"
)

func isSummaryRequest(req scripted.Request) bool {
	return len(req.Messages) > 0 && req.Messages[0].Content == orchestrator.SummarySystemPrompt
}

// TestSummary: with a window of 2 turns and fold-turns 1 every turn evicts one; the model
// extends the structured summary, and when the summary model fails the extractive fallback
// keeps the facts, and after repeated failures the orchestrator stops asking the model for a
// while. With the default fold-turns (4), turns 3 to 5 stay in the window and turn 6 folds
// turns 1 to 4 in one summary call.
func TestSummary(t *testing.T) {
	tests := []struct {
		name         string
		fold         int // 0: the flag's default
		failing      bool
		wantFallback bool
		wantUpdates  int
		wantCalls    int64
	}{
		{name: "model summary", fold: 1, wantUpdates: 4, wantCalls: 4},
		{name: "failing model falls back and backs off", fold: 1, failing: true, wantFallback: true, wantUpdates: 4, wantCalls: 2},
		{name: "default fold: one call folds 4 turns", wantUpdates: 1, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var summaryCalls atomic.Int64
			h := func(req scripted.Request) scripted.Reply {
				if isSummaryRequest(req) {
					summaryCalls.Add(1)
					if tc.failing {
						return scripted.Reply{Status: http.StatusInternalServerError, NoRetry: true, Message: "summary model overloaded"}
					}
					return scripted.Text(`{"goal":"plan a trip to 杭州","decisions":["take the train"],"facts":["the user's budget is 3000 元"],"open_items":["book a hotel"]}`)
				}
				return scripted.Text("noted")
			}
			s := startStack(t, h, stackOptions{configure: func(c *app.Config) {
				c.Orchestrator.SummaryFailures = 2
				c.Orchestrator.SummaryBackoff = time.Hour
				if tc.fold != 0 {
					c.Session.FoldTurns = tc.fold
				}
			}})
			ctx := context.Background()
			resp, err := s.sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "u1", Config: &sessionv1.SessionConfig{WindowTurns: 2}})
			if err != nil {
				t.Fatal(err)
			}
			sid := resp.GetSession().GetId()
			var fallbacks, updates, folded int
			for i := 1; i <= 6; i++ {
				res := s.run(ctx, sid, "u1", fmt.Sprintf("fact %d: my budget is %d000 元", i, i), nil)
				if res.Completed == nil {
					t.Fatalf("turn %d: %v", i, res.Failed)
				}
				for _, ev := range res.Events {
					if su := ev.GetSummary(); su != nil {
						updates++
						folded += int(su.GetFoldedMessages())
						if su.GetFallback() {
							fallbacks++
						}
					}
				}
			}
			// Turns 1 to 4 are folded (window 2, the current turn included): with fold 1 one at
			// a time in turns 3 to 6, with fold 4 at once in turn 6.
			if updates != tc.wantUpdates || folded != 8 {
				t.Errorf("%d summary updates folding %d messages, want %d folding 8", updates, folded, tc.wantUpdates)
			}
			if tc.wantFallback && fallbacks != updates || !tc.wantFallback && fallbacks != 0 {
				t.Errorf("%d of %d updates used the fallback", fallbacks, updates)
			}
			if got := summaryCalls.Load(); got != tc.wantCalls {
				t.Errorf("the summary model was asked %d times, want %d", got, tc.wantCalls)
			}
			built, err := s.sessions.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "u1"})
			if err != nil {
				t.Fatal(err)
			}
			if built.GetSummary() == nil {
				t.Fatal("no summary stored")
			}
			sum := built.GetSummary().GetContent()
			if tc.failing {
				// The extractive fallback keeps the user's words of every folded turn.
				for i := 1; i <= 4; i++ {
					if !strings.Contains(sum, fmt.Sprintf("fact %d:", i)) {
						t.Errorf("fallback summary lost fact %d:\n%s", i, sum)
					}
				}
			} else if !strings.Contains(sum, "Goal: plan a trip to 杭州") || !strings.Contains(sum, "Open items:\n- book a hotel") {
				t.Errorf("model summary not stored in its structure:\n%s", sum)
			}
		})
	}
}
