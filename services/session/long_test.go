package session_test

import (
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/oklog/ulid/v2"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// orchestratorTurn appends one turn the way the orchestrator does: the user's message with
// build_context, then the tool step, then the answer, each message with a client id under the
// turn's ULID.
func orchestratorTurn(b *testing.B, c sessionv1.SessionServiceClient, sid string, i int) {
	b.Helper()
	id := ulid.MustNew(ulid.Now(), rand.Reader).String()
	app := func(build bool, m ...*sessionv1.NewMessage) {
		req := &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: m}
		if build {
			req.BuildContext = &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"}
		}
		res, err := c.AppendMessages(bg, req)
		if err != nil {
			b.Fatal(err)
		}
		// The orchestrator folds what left the window into the summary.
		if ctx := res.GetContext(); len(ctx.GetEvicted()) > 0 {
			if _, err := c.UpdateSummary(bg, &sessionv1.UpdateSummaryRequest{SessionId: sid, UserId: "alice", Content: "算术", ThroughSeq: ctx.GetWindowStartSeq() - 1}); err != nil {
				b.Fatal(err)
			}
		}
	}
	u := text(sessionv1.Role_ROLE_USER, fmt.Sprintf("请帮我算一下 %d*%d+%d。", i+2, i+3, i))
	u.ClientId = id + ":user"
	app(true, u)
	call := toolCall(id+"-c", "calculator", fmt.Sprintf(`{"expression":"%d*%d+%d"}`, i+2, i+3, i))
	call.ClientId = id + ":1:call:0"
	res := toolResult(id+"-c", "calculator", fmt.Sprintf(`{"success":true,"output":{"result":%d}}`, (i+2)*(i+3)+i))
	res.ClientId = id + ":1:result:0"
	app(false, call, res)
	a := text(sessionv1.Role_ROLE_ASSISTANT, fmt.Sprintf("结果是 %d。", (i+2)*(i+3)+i))
	a.ClientId = id + ":answer"
	app(false, a)
}

// BenchmarkLongSession measures one orchestrator-shaped turn's appends (the user's message with
// build_context, the tool step, the answer; the summary kept current) on a bbolt session that
// already holds 25 or 200 such turns: the cost should not grow with the session. Command:
//
//	go test -run '^$' -bench LongSession -benchtime 30x -benchmem ./services/session/
func BenchmarkLongSession(b *testing.B) {
	for _, n := range []int{25, 200} {
		b.Run(fmt.Sprintf("turns=%d", n), func(b *testing.B) {
			s := boltStore(b, filepath.Join(b.TempDir(), "s.db"))
			b.Cleanup(func() { _ = s.Close() })
			c := serve(b, s)
			sid := create(b, c, "alice")
			for i := range n {
				orchestratorTurn(b, c, sid, i)
			}
			i := n
			b.ResetTimer()
			// The session grows by one turn per iteration: run it with a small -benchtime (30x).
			b.ReportAllocs()
			for b.Loop() {
				orchestratorTurn(b, c, sid, i)
				i++
			}
		})
	}
}
