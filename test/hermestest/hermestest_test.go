package hermestest

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// TestStart plays a turn on each layout and restarts a monolith on its data.
func TestStart(t *testing.T) {
	for _, layout := range []Layout{Monolith, Split, PerTarget} {
		s := Start(t, Options{Layout: layout, Model: scripted.Sequence(scripted.Text("hello"))})
		ctx := context.Background()
		cs, err := s.Sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "u"})
		if err != nil {
			t.Fatalf("layout %d: %v", layout, err)
		}
		res, err := demo.RunTurn(ctx, s.Orchestrator, &orchestratorv1.RunTurnRequest{SessionId: cs.GetSession().GetId(), UserId: "u", Text: "hi", Options: &orchestratorv1.TurnOptions{SkipMemory: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff("hello", res.Completed.GetText()); diff != "" {
			t.Errorf("layout %d: answer (-want +got):\n%s", layout, diff)
		}
	}
}

// TestRestartOnData: a stack closed early and started again on its data directory finds its
// sessions.
func TestRestartOnData(t *testing.T) {
	dir := t.TempDir()
	s := Start(t, Options{DataDir: dir})
	cs, err := s.Sessions.CreateSession(context.Background(), &sessionv1.CreateSessionRequest{UserId: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := Start(t, Options{DataDir: dir})
	if _, err := s2.Sessions.GetSession(context.Background(), &sessionv1.GetSessionRequest{SessionId: cs.GetSession().GetId(), UserId: "u"}); err != nil {
		t.Errorf("session after restart: %v", err)
	}
}

// TestNewPortTaken: a start whose listener's port is taken fails with an error that says so
// (errors.Is EADDRINUSE, which callers that pick ports retry on) and closes what it started,
// not a panic (New's cleanup once ran on the nil it was about to return).
func TestNewPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := New(context.Background(), Options{DataDir: t.TempDir(), Args: []string{"--mcp-listen=" + l.Addr().String()}})
	if s != nil || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("New with a taken port: %v, %v; want no stack and EADDRINUSE", s, err)
	}
}
