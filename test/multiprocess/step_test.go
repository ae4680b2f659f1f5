package multiprocess

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// TestKillAfterToolStepMonolith: a turn's tool step whose next model call does not answer is
// written while the call waits (its write waits for the answer only briefly), so `hermes serve`
// killed with SIGKILL during that call keeps the step: after the restart the session's log
// holds the user's message, the call and its result, the turn is INTERRUPTED, and the session
// takes a new turn.
func TestKillAfterToolStepMonolith(t *testing.T) {
	ctx := context.Background()
	model, err := scripted.New(func(req scripted.Request) scripted.Reply {
		if len(req.ToolResults()) > 0 {
			return scripted.Reply{Text: "too late", Delay: 10 * time.Minute}
		}
		if req.LastUser() == "算一下 6*7" {
			return scripted.Calls(scripted.Call("calculator", map[string]string{"expression": "6*7"}))
		}
		return scripted.Text("ok")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	p, sessions, orch := startMonolith(t, t.TempDir(), model.URL(), "scripted-step")
	resp, err := sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "alice", Title: "step"})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	sid := resp.GetSession().GetId()

	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := orch.RunTurn(tctx, &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "alice", Text: "算一下 6*7"})
	if err != nil {
		t.Fatalf("RunTurn: %v", err)
	}
	var turnID string
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("RunTurn stream ended before the tool's result: %v", err)
		}
		if st := ev.GetEvent().GetStarted(); st != nil {
			turnID = st.GetTurnId()
		}
		if r := ev.GetEvent().GetToolResult(); r != nil {
			if !r.GetSuccess() {
				t.Fatalf("the calculator failed: %v", r)
			}
			break
		}
	}
	want := []sessionv1.MessageKind{sessionv1.MessageKind_MESSAGE_KIND_TEXT, sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT}
	kinds := func() []sessionv1.MessageKind {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		list, err := sessions.ListMessages(rctx, &sessionv1.ListMessagesRequest{SessionId: sid, UserId: "alice", PageSize: 50})
		if err != nil {
			t.Logf("ListMessages: %v", err)
			return nil
		}
		var out []sessionv1.MessageKind
		for _, m := range list.GetMessages() {
			out = append(out, m.GetKind())
		}
		return out
	}
	// Readers see a write once it is committed: the step, while the model call still waits.
	testenv.WaitFor(t, 30*time.Second, "the step is stored during the model call", func() bool { return slices.Equal(kinds(), want) })
	killed := restartAfterKill(t, p, cancel)
	waitInterrupted(t, orch, "alice", turnID, killed)
	if got := kinds(); !slices.Equal(got, want) {
		t.Errorf("after the restart the session's log is %v, want %v", got, want)
	}
	checkNextTurn(t, orch, sid, "alice")
}
