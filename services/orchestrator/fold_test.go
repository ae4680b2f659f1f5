package orchestrator

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

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
	return l.svc.AppendMessages(ctx, req)
}

func (l localSession) BuildContext(ctx context.Context, req *sessionv1.BuildContextRequest, _ ...grpc.CallOption) (*sessionv1.BuildContextResponse, error) {
	return l.svc.BuildContext(ctx, req)
}

func (l localSession) UpdateSummary(ctx context.Context, req *sessionv1.UpdateSummaryRequest, _ ...grpc.CallOption) (*sessionv1.UpdateSummaryResponse, error) {
	return l.svc.UpdateSummary(ctx, req)
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
