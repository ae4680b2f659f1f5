package session

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/metadata"

	"github.com/hermes-agent/hermes/internal/boltstore"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// monolithTurn writes a turn's session messages as the monolith's orchestrator does: the user
// message with its context load, the tool call and its result, the answer, all deferred, then
// the commit of the turn's record (here an empty write).
func monolithTurn(tb testing.TB, s *BoltStore, sid string, i int) {
	tb.Helper()
	dctx := metadata.NewIncomingContext(ctx, metadata.Pairs(boltstore.DeferHeader, "next-commit"))
	turn := fmt.Sprintf("01JF%022d", i)
	msg := func(role sessionv1.Role, kind sessionv1.MessageKind, text, cid string) AppendItem {
		return AppendItem{
			Message: &sessionv1.Message{Id: newID(time.Now()), Role: role, Kind: kind, Content: text, ClientId: turn + cid, TokenCount: int32(len(text) / 4), Metadata: map[string]string{"turn_id": turn}},
			Terms:   textTerms(text),
		}
	}
	if _, _, err := s.AppendLoad(dctx, "alice", sid, []AppendItem{msg(sessionv1.Role_ROLE_USER, sessionv1.MessageKind_MESSAGE_KIND_TEXT, fmt.Sprintf("what is %d plus %d, please", i, i), ":user")}, nil, 12, 200); err != nil {
		tb.Fatal(err)
	}
	if err := s.group.Update(func(*bolt.Tx) error { return nil }); err != nil {
		tb.Fatal(err)
	}
	step := []AppendItem{
		msg(sessionv1.Role_ROLE_ASSISTANT, sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, fmt.Sprintf(`{"expression":"%d+%d"}`, i, i), ":1:call:0"),
		msg(sessionv1.Role_ROLE_TOOL, sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, fmt.Sprintf(`{"result":%d}`, 2*i), ":1:result:0"),
	}
	if _, err := s.Append(dctx, "alice", sid, step, nil); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.Append(dctx, "alice", sid, []AppendItem{msg(sessionv1.Role_ROLE_ASSISTANT, sessionv1.MessageKind_MESSAGE_KIND_TEXT, fmt.Sprintf("%d plus %d is %d.", i, i, 2*i), ":answer")}, nil); err != nil {
		tb.Fatal(err)
	}
	if err := s.group.Update(func(*bolt.Tx) error { return nil }); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkBoltMonolithTurn measures the session store's share of a monolith turn (two commits,
// four messages, one context load) in a session of 1,000 turns: run with -benchmem. It reports
// the pages written a turn (pwrites/turn, the meta pages included). In after-deletes, another
// user's sessions (8 MB of message text) were deleted first, leaving their pages free in the
// file, as in a store that has been in use for a while.
func BenchmarkBoltMonolithTurn(b *testing.B) {
	b.Run("fresh", func(b *testing.B) { benchMonolithTurn(b, false) })
	b.Run("after-deletes", func(b *testing.B) { benchMonolithTurn(b, true) })
}

func benchMonolithTurn(b *testing.B, deletes bool) {
	s := openBolt(b, filepath.Join(b.TempDir(), "s.db"), flushOptions{delay: defaultFlushDelay, postings: defaultFlushPostings})
	defer s.Close()
	if deletes {
		deleteSessions(b, s, 4, 2000, 1000)
	}
	s.group = boltstore.NewGroupDelay(s.db, time.Hour)
	sid := newSession(b, s, "alice", time.Now()).GetId()
	i := 0
	for ; i < 1000; i++ {
		monolithTurn(b, s, sid, i)
	}
	before := s.db.Stats().TxStats
	b.ResetTimer()
	for b.Loop() {
		monolithTurn(b, s, sid, i)
		i++
	}
	b.StopTimer()
	// Each page bbolt writes is its own pwrite and, apart from its neighbours, its own request to
	// the disk at the commit's sync (BenchmarkSyncPages in internal/boltstore).
	after := s.db.Stats().TxStats
	d := after.Sub(&before)
	b.ReportMetric(float64(d.GetWrite())/float64(b.N), "pwrites/turn")
	_ = s.db.View(func(tx *bolt.Tx) error {
		for _, n := range [][]byte{sessionBucketName(sid), bSessions, bUserSessions, bUnindexed, bPostings} {
			st := tx.Bucket(n).Stats()
			b.Logf("%s: keys %d depth %d branch pages %d leaf pages %d", n, st.KeyN, st.Depth, st.BranchPageN, st.LeafPageN)
		}
		return nil
	})
}

// deleteSessions creates n sessions of bob's, each with msgs messages of size bytes (and their
// search postings, flushed), then deletes them.
func deleteSessions(b *testing.B, s *BoltStore, n, msgs, size int) {
	b.Helper()
	text := strings.Repeat("lorem ipsum dolor sit amet ", size/27+1)[:size]
	for range n {
		sid := newSession(b, s, "bob", time.Now()).GetId()
		for i := 0; i < msgs; i += 50 {
			items := make([]AppendItem, 50)
			for j := range items {
				items[j] = AppendItem{
					Message: &sessionv1.Message{Id: newID(time.Now()), Role: sessionv1.Role_ROLE_USER, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: text, ClientId: fmt.Sprintf("%s-%d", sid, i+j)},
					Terms:   textTerms(text),
				}
			}
			if _, err := s.Append(ctx, "bob", sid, items, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.flush(); err != nil {
			b.Fatal(err)
		}
		if _, err := s.DeleteSession(ctx, "bob", sid); err != nil {
			b.Fatal(err)
		}
	}
	st := s.db.Stats()
	b.Logf("pages freed by the deletes: %d free, %d pending", st.FreePageN, st.PendingPageN)
}
