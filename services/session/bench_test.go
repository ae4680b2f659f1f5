package session_test

import (
	"fmt"
	"path/filepath"
	"testing"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/session"
)

// benchBackends opens each backend for a benchmark.
func benchBackends() map[string]func(b *testing.B) session.Store {
	return map[string]func(b *testing.B) session.Store{
		"redis": func(b *testing.B) session.Store { return redisStore(b) },
		"bolt": func(b *testing.B) session.Store {
			s := boltStore(b, filepath.Join(b.TempDir(), "s.db"))
			b.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
}

// fill appends n messages as turns of 4 (user, tool call, tool result, answer).
func fill(b *testing.B, c sessionv1.SessionServiceClient, sid string, n int) {
	b.Helper()
	appendTurns(b, c, sid, "alice", 1, n/4, 3, n/8)
}

// BenchmarkBuildContext measures BuildContext over gRPC on sessions of 100 and 10,000 messages
// whose summary is current (the orchestrator keeps it so), so the cost is that of the window:
// it must not grow with the session's length. The no-summary variant returns up to 200 evicted
// messages besides.
func BenchmarkBuildContext(b *testing.B) {
	for _, name := range []string{"redis", "bolt"} {
		for _, n := range []int{100, 10_000} {
			for _, summarized := range []bool{true, false} {
				label := fmt.Sprintf("%s/messages=%d/summary=%v", name, n, summarized)
				b.Run(label, func(b *testing.B) {
					c := serve(b, benchBackends()[name](b))
					sid := create(b, c, "alice")
					fill(b, c, sid, n)
					req := &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"}
					first, err := c.BuildContext(bg, req)
					if err != nil {
						b.Fatal(err)
					}
					if summarized && first.GetWindowStartSeq() > 1 {
						if _, err := c.UpdateSummary(bg, &sessionv1.UpdateSummaryRequest{SessionId: sid, UserId: "alice", Content: "summary", ThroughSeq: first.GetWindowStartSeq() - 1}); err != nil {
							b.Fatal(err)
						}
					}
					b.ResetTimer()
					for b.Loop() {
						if _, err := c.BuildContext(bg, req); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkAppendMessages measures appending one turn (4 messages) over gRPC to sessions that
// already hold 100 or 10,000 messages.
func BenchmarkAppendMessages(b *testing.B) {
	for _, name := range []string{"redis", "bolt"} {
		for _, n := range []int{100, 10_000} {
			b.Run(fmt.Sprintf("%s/messages=%d", name, n), func(b *testing.B) {
				c := serve(b, benchBackends()[name](b))
				sid := create(b, c, "alice")
				fill(b, c, sid, n)
				i := 0
				b.ResetTimer()
				for b.Loop() {
					i++
					id := fmt.Sprintf("bench-%d", i)
					_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: []*sessionv1.NewMessage{
						text(sessionv1.Role_ROLE_USER, "one more question about the reservation"),
						toolCall(id, "search_restaurant", `{"cuisine":"sichuan"}`),
						toolResult(id, "search_restaurant", `{"results":["蜀香园"]}`),
						text(sessionv1.Role_ROLE_ASSISTANT, "here you go"),
					}})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
