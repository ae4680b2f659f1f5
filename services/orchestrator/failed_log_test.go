package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-agent/hermes/internal/model"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A failed turn leaves a WARN line with its reason, so an operator sees that the model endpoint
// (or anything else) is failing without asking the client.
func TestFailedTurnIsLoggedAtWarn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tok, err := testTokenizer()
		if err != nil {
			t.Fatal(err)
		}
		store, err := OpenBoltStore(filepath.Join(t.TempDir(), "orchestrator.db"))
		if err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		m := &fakeModel{reply: func(context.Context, model.Request) (*model.Response, error) {
			return nil, errors.New("model endpoint: 401 invalid api key")
		}}
		svc, err := NewService(Config{Stream: true}, Options{
			Session: newFakeSession(), Tools: &fakeTools{}, Model: m, Tokenizer: tok, Store: store,
			Publish: func(context.Context, *eventsv1.TurnFinished, []byte) error { return nil },
			Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { svc.Close(time.Second); _ = store.Close() }()
		st := &fakeStream{ctx: context.Background()}
		if err := svc.RunTurn(&orchestratorv1.RunTurnRequest{SessionId: "s1", UserId: "u", Text: "hi", Options: &orchestratorv1.TurnOptions{SkipMemory: true}}, st); err != nil {
			t.Fatalf("RunTurn: %v", err)
		}
		failed := st.final().GetFailed()
		if failed == nil {
			t.Fatalf("final event %v, want a failure", st.final())
		}
		var line string
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, `msg="turn failed"`) {
				line = l
			}
		}
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "turn="+failed.GetTurnId()) ||
			!strings.Contains(line, "code="+failed.GetCode()) || !strings.Contains(line, "401 invalid api key") {
			t.Errorf("no WARN line with the turn, its code and its cause; logs:\n%s", logs.String())
		}
	})
}
