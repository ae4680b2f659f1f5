package orchestrator

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/session"
)

// localSession calls a session service in this process, without gRPC (the synctest bubble has
// no network).
type localSession struct {
	sessionv1.SessionServiceClient
	svc *session.Service
}

func (l localSession) GetSession(ctx context.Context, req *sessionv1.GetSessionRequest, _ ...grpc.CallOption) (*sessionv1.GetSessionResponse, error) {
	return l.svc.GetSession(ctx, req)
}

func (l localSession) AppendMessages(ctx context.Context, req *sessionv1.AppendMessagesRequest, _ ...grpc.CallOption) (*sessionv1.AppendMessagesResponse, error) {
	return l.svc.AppendMessages(incoming(ctx), req)
}

// incoming passes the caller's outgoing metadata to the service, as a gRPC call does.
func incoming(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	return metadata.NewIncomingContext(ctx, md)
}

func (l localSession) BuildContext(ctx context.Context, req *sessionv1.BuildContextRequest, _ ...grpc.CallOption) (*sessionv1.BuildContextResponse, error) {
	return l.svc.BuildContext(ctx, req)
}

func (l localSession) UpdateSummary(ctx context.Context, req *sessionv1.UpdateSummaryRequest, _ ...grpc.CallOption) (*sessionv1.UpdateSummaryResponse, error) {
	return l.svc.UpdateSummary(incoming(ctx), req)
}

// TestLoopFoldsTurnsIntoSummary: over the real session service with its flag defaults (a window
// of 12 turns, fold-turns 4), turns 13 to 15 ask the model for no summary; turn 16 folds turns
// 1 to 4 in one summary call, and so on every 4 turns: 3 summary calls in 24 turns, each folding
// 4 turns of 4 messages.
func TestLoopFoldsTurnsIntoSummary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cfg session.Config
		fs := flag.NewFlagSet("session", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		store, err := session.OpenBoltStore(filepath.Join(t.TempDir(), "session.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		tok, err := testTokenizer()
		if err != nil {
			t.Fatal(err)
		}
		svc, err := session.NewService(cfg, session.Options{Store: store, Tokenizer: tok})
		if err != nil {
			t.Fatal(err)
		}
		created, err := svc.CreateSession(context.Background(), &sessionv1.CreateSessionRequest{UserId: "u"})
		if err != nil {
			t.Fatal(err)
		}
		sid := created.GetSession().GetId()
		l := newLoopOn(t, Config{}, localSession{svc: svc}, toolThenAnswer)

		var summarised []int
		var folded []int32
		for turn := 1; turn <= 24; turn++ {
			before := l.model.count(true)
			st := l.run(t, sid, fmt.Sprint("turn ", turn), nil)
			if st.final().GetCompleted() == nil {
				t.Fatalf("turn %d: final event %v", turn, st.final())
			}
			<-l.published // the channel holds 16
			for _, ev := range st.events {
				if su := ev.GetSummary(); su != nil {
					folded = append(folded, su.GetFoldedMessages())
				}
			}
			if l.model.count(true) > before {
				summarised = append(summarised, turn)
			}
		}
		if diff := cmp.Diff([]int{16, 20, 24}, summarised); diff != "" {
			t.Errorf("turns that called the model for a summary (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int32{16, 16, 16}, folded); diff != "" {
			t.Errorf("messages folded per summary (-want +got):\n%s", diff)
		}
	})
}

// TestDeferredSessionWrites: the monolith's layout, the records in the session store's file and
// the turn's session writes deferred (DeferSessionWrites): every turn completes, and when its
// final event is sent its messages, summary and record are committed (read outside the
// writer's transaction), as they are in a reopened file; the session ends as it does without
// deferral, also when the evicted messages take several summary rounds (each reading the
// summary the one before stored).
func TestDeferredSessionWrites(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		window, maxEvicted, fold, turns int
	}{
		{"defaults", 12, 200, 4, 18},
		{"several summary rounds a turn", 2, 3, 4, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := session.Config{WindowTurns: tc.window, TokenBudget: 8000, MaxEvicted: tc.maxEvicted, FoldTurns: tc.fold}
			plain := runSessionTurns(t, cfg, false, tc.turns)
			deferred := runSessionTurns(t, cfg, true, tc.turns)
			if diff := cmp.Diff(plain, deferred); diff != "" {
				t.Errorf("the session with deferred writes differs (-plain +deferred):\n%s", diff)
			}
			if deferred.SummaryThrough == 0 {
				t.Error("no summary stored")
			}
		})
	}
}

// sessionEnd is what a session holds after runSessionTurns.
type sessionEnd struct {
	Messages, SummaryThrough int64
	Summary                  string
}

// runSessionTurns runs turns (each a tool call and an answer) on one session of the monolith's
// layout, with the session writes deferred or not, and returns the session as a reopened file
// has it.
func runSessionTurns(t *testing.T, cfg session.Config, deferWrites bool, turns int) sessionEnd {
	t.Helper()
	path := filepath.Join(t.TempDir(), "session.db")
	sstore, err := session.OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	db, g := sstore.File()
	ostore, err := OpenBoltStoreOn(db, g)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := testTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := session.NewService(cfg, session.Options{Store: sstore, Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	created, err := svc.CreateSession(context.Background(), &sessionv1.CreateSessionRequest{UserId: "u"})
	if err != nil {
		t.Fatal(err)
	}
	sid := created.GetSession().GetId()
	l := newLoopWith(t, Config{}, localSession{svc: svc}, toolThenAnswer, func(Store) Store { return ostore })
	l.svc.deps.DeferSessionWrites = deferWrites
	before := g.Commits()
	for turn := 1; turn <= turns; turn++ {
		st := l.run(t, sid, fmt.Sprintf("第 %d 轮 turn %d", turn, turn), nil)
		done := st.final().GetCompleted()
		if done == nil {
			t.Fatalf("turn %d: final event %v", turn, st.final())
		}
		<-l.published
		msgs, err := sstore.ListMessages(context.Background(), sid, done.GetAssistantMessageSeq()-1, 10)
		if err != nil || len(msgs) != 1 || msgs[0].GetContent() != done.GetText() {
			t.Fatalf("turn %d: the answer (seq %d) not committed when the turn ended: %v, %v", turn, done.GetAssistantMessageSeq(), msgs, err)
		}
		rec, err := ostore.GetTurn(context.Background(), done.GetTurnId())
		if err != nil || rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("turn %d: record %v, %v", turn, rec, err)
		}
	}
	// Two commits a turn (the RUNNING record's, the end's), and a few of the group's own when a
	// turn paused past its delay on a loaded machine; without deferral it is five a turn.
	if n := g.Commits() - before; deferWrites && n > int64(3*turns) {
		t.Errorf("%d commits for %d turns, want about 2 a turn", n, turns)
	}
	l.svc.Close(time.Second)
	if err := ostore.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sstore.Close(); err != nil {
		t.Fatal(err)
	}
	reopened, err := session.OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	s, err := reopened.GetSession(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	// Each turn: the user message, the tool call and its result, the answer.
	if got := s.GetState().GetMessageCount(); got != int64(4*turns) {
		t.Errorf("after reopening: %d messages, want %d", got, 4*turns)
	}
	end := sessionEnd{Messages: s.GetState().GetMessageCount(), SummaryThrough: s.GetState().GetSummaryThroughSeq()}
	if d, err := reopened.LoadContext(context.Background(), sid, 1, 0); err == nil && d.Summary != nil {
		end.Summary = d.Summary.Content
	}
	return end
}
