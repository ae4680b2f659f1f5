package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/app"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/orchestrator"
)

func isSummaryRequest(req scripted.Request) bool {
	return len(req.Messages) > 0 && req.Messages[0].Content == orchestrator.SummarySystemPrompt
}

// TestSummary: with a window of 2 turns every turn evicts one; the model extends the
// structured summary, and when the summary model fails the extractive fallback keeps the
// facts, and after repeated failures the orchestrator stops asking the model for a while.
func TestSummary(t *testing.T) {
	tests := []struct {
		name         string
		failing      bool
		wantFallback bool
		wantCalls    int64
	}{
		{name: "model summary", wantCalls: 4},
		{name: "failing model falls back and backs off", failing: true, wantFallback: true, wantCalls: 2},
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
			}})
			ctx := context.Background()
			resp, err := s.sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "u1", Config: &sessionv1.SessionConfig{WindowTurns: 2}})
			if err != nil {
				t.Fatal(err)
			}
			sid := resp.GetSession().GetId()
			var fallbacks, updates int
			for i := 1; i <= 6; i++ {
				res := s.run(ctx, sid, "u1", fmt.Sprintf("fact %d: my budget is %d000 元", i, i), nil)
				if res.Completed == nil {
					t.Fatalf("turn %d: %v", i, res.Failed)
				}
				for _, ev := range res.Events {
					if su := ev.GetSummary(); su != nil {
						updates++
						if su.GetFallback() {
							fallbacks++
						}
					}
				}
			}
			// Turns 3..6 each evict one turn (window 2, the current turn included).
			if updates != 4 {
				t.Errorf("%d summary updates, want 4", updates)
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
