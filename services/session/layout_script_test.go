package session

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// layoutSessions are the sessions layoutScript writes: user, session id, turns.
var layoutSessions = []struct {
	uid, sid string
	turns    int
}{
	{"alice", "01JEXAMPLE0000000000000001", 7},
	{"alice", "01JEXAMPLE0000000000000002", 40},
	{"bob", "01JEXAMPLE0000000000000003", 3},
}

// layoutScript writes the same sessions into any store, with fixed ids and times: messages of
// every role and kind, client ids in the user's and the orchestrator's forms, sticky messages,
// search terms in English and Chinese, and a summary. testdata/layout1.db is this script's
// output as written by the store of layout 1 (9f31566), closed, then compacted (`bbolt compact`,
// which copies the buckets as they are).
func layoutScript(ctx context.Context, s Store) error {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	words := []string{"harbour", "lantern", "copper", "meadow", "港口", "灯笼", "铜", "草地"}
	for i, ls := range layoutSessions {
		at := t0.Add(time.Duration(i) * time.Hour)
		if err := s.CreateSession(ctx, &sessionv1.Session{Id: ls.sid, UserId: ls.uid, CreatedAt: timestamppb.New(at)}); err != nil {
			return err
		}
		for turn := range ls.turns {
			at = at.Add(time.Minute)
			w := words[(i+turn)%len(words)]
			tid := fmt.Sprintf("01JTURN%02d%017d", i, turn)
			msg := func(n int, role sessionv1.Role, kind sessionv1.MessageKind, content, cid string) AppendItem {
				m := &sessionv1.Message{
					Id: fmt.Sprintf("%s-%d", tid, n), Role: role, Kind: kind, Content: content, ClientId: cid,
					TokenCount: int32(len(content)), CreatedAt: timestamppb.New(at.Add(time.Duration(n) * time.Second)),
				}
				if kind != sessionv1.MessageKind_MESSAGE_KIND_TEXT {
					m.ToolCallId, m.ToolName = fmt.Sprintf("call-%d", turn), "calculator"
				}
				it := AppendItem{Message: m}
				if kind == sessionv1.MessageKind_MESSAGE_KIND_TEXT {
					it.Terms = textTerms(content)
				}
				return it
			}
			u := msg(0, sessionv1.Role_ROLE_USER, sessionv1.MessageKind_MESSAGE_KIND_TEXT,
				fmt.Sprintf("turn %d about the %s %s", turn, w, words[turn%len(words)]), fmt.Sprintf("client-%d-%d", i, turn))
			u.Message.Sticky = turn%5 == 1
			if _, err := s.Append(ctx, ls.uid, ls.sid, []AppendItem{u}, nil); err != nil {
				return err
			}
			batch := []AppendItem{
				msg(1, sessionv1.Role_ROLE_ASSISTANT, sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, `{"expression":"6*7"}`, tid+"/1"),
				msg(2, sessionv1.Role_ROLE_TOOL, sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, `{"value":42}`, tid+"/2"),
				msg(3, sessionv1.Role_ROLE_ASSISTANT, sessionv1.MessageKind_MESSAGE_KIND_TEXT, "the "+w+" answer is 42", ""),
			}
			if _, err := s.Append(ctx, ls.uid, ls.sid, batch, nil); err != nil {
				return err
			}
		}
		if i == 1 {
			sum := &Summary{Content: "the first turns, summed up", ThroughSeq: 12, TokenCount: 6, UpdatedAtUnixMilli: at.UnixMilli()}
			if _, err := s.UpdateSummary(ctx, ls.sid, sum); err != nil {
				return err
			}
		}
	}
	return nil
}
