package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/app/demo/restaurant"
	"github.com/hermes-agent/hermes/internal/events"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	"github.com/hermes-agent/hermes/test/hermestest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRestaurantExample plays the article's example over two sessions on Redis and NATS: the
// restaurant the user mentioned in session 1 is extracted into memory from turn.finished,
// recalled in session 2, and fills the missing restaurant_name; the explicit time and party
// size are kept, and one reservation is made on the real MCP server.
func TestRestaurantExample(t *testing.T) {
	s := startStack(t, demo.Model(), stackOptions{extracts: true})
	ctx := context.Background()
	mcp, err := restaurant.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mcp.Close)
	added, err := s.gateway.AddServer(ctx, &mcpgatewayv1.AddServerRequest{Wait: true, Spec: &mcpgatewayv1.ServerSpec{
		Name: demo.MCPServerName, Prefix: demo.MCPServerName,
		Transport: &mcpgatewayv1.ServerSpec_Http{Http: &mcpgatewayv1.HTTPTransport{Url: mcp.URL()}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if added.GetServer().GetToolCount() != 2 {
		t.Fatalf("MCP server registered %d tools: %v", added.GetServer().GetToolCount(), added.GetServer())
	}

	// Watch turn.finished on the test's namespace.
	nc, err := nats.Connect(hermestest.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	s1 := s.newSession(demo.User)
	r1 := s.run(ctx, s1, demo.User, demo.FirstMessage, nil)
	if r1.Completed == nil {
		t.Fatalf("session 1 failed: %v", r1.Failed)
	}
	if len(r1.Results) != 1 || !r1.Results[0].GetSuccess() || !strings.Contains(r1.Completed.GetText(), "朝阳区建国路") {
		t.Fatalf("session 1: results %v, answer %q", r1.Results, r1.Completed.GetText())
	}
	mems, err := demo.WaitForMemory(ctx, s.mem, demo.User, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// The event the extractor consumed: the turn's messages, the tool result flagged.
	cons, err := js.OrderedConsumer(ctx, s.names.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.names.TurnFinishedSubject(demo.User)}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.UnmarshalTurnFinished(msg.Data())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range ev.GetMessages() {
		k := strings.TrimPrefix(m.GetMessage().GetKind().String(), "MESSAGE_KIND_")
		if m.GetIsToolResult() {
			k += "(flagged)"
		}
		kinds = append(kinds, k)
	}
	if diff := cmp.Diff([]string{"TEXT", "TOOL_CALL", "TOOL_RESULT(flagged)", "TEXT"}, kinds); diff != "" {
		t.Errorf("turn.finished messages (-want +got):\n%s", diff)
	}
	if ev.GetTurnId() != r1.Completed.GetTurnId() || ev.GetSessionId() != s1 {
		t.Errorf("event turn %s session %s, want %s %s", ev.GetTurnId(), ev.GetSessionId(), r1.Completed.GetTurnId(), s1)
	}

	s2 := s.newSession(demo.User)
	r2 := s.run(ctx, s2, demo.User, demo.SecondMessage, nil)
	if r2.Completed == nil {
		t.Fatalf("session 2 failed: %v", r2.Failed)
	}
	if problems := demo.Check(r2, mems, mcp.Reservations()); len(problems) > 0 {
		t.Fatalf("restaurant example: %s", strings.Join(problems, "; "))
	}
	// The memory went into the context as a system message at the front that says it may not apply.
	reqs := s.model.Requests()
	var last = reqs[len(reqs)-1]
	for _, r := range reqs {
		if strings.Contains(r.LastUser(), "订") && len(r.Tools) > 0 {
			last = r
		}
	}
	if len(last.Messages) < 2 || last.Messages[1].Role != "system" || !strings.Contains(last.Messages[1].Content, "may not apply") || !strings.Contains(last.Messages[1].Content, "蜀香园") {
		t.Errorf("second message of the request = %+v, want the recalled memories", last.Messages[1])
	}
	// Session 2's context holds nothing of session 1 but the memory.
	for _, m := range last.Messages {
		if strings.Contains(m.Content, "帮我查一下它的地址") {
			t.Errorf("session 1's message leaked into session 2: %q", m.Content)
		}
	}
	// The turn record: three model calls of the turn and one fill decision (the remembered
	// restaurant_name, decided by the model by default).
	got, err := s.orch.GetTurn(ctx, &orchestratorv1.GetTurnRequest{TurnId: r2.Completed.GetTurnId(), UserId: demo.User})
	if err != nil {
		t.Fatal(err)
	}
	turn := got.GetTurn()
	if turn.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED || len(turn.GetToolCalls()) != 2 || turn.GetUsage().GetModelCalls() != 4 || turn.GetUsage().GetSource() != "provider" {
		t.Errorf("turn record: status %s, %d tool calls, usage %v", turn.GetStatus(), len(turn.GetToolCalls()), turn.GetUsage())
	}
	if turn.GetAnswer() != r2.Completed.GetText() || len(turn.GetEvents()) == 0 {
		t.Errorf("turn record answer %q with %d events", turn.GetAnswer(), len(turn.GetEvents()))
	}
	// The stored trajectory of session 2: user, then each step as complete pairs, then the answer.
	var roles []string
	for _, m := range s.messages(s2, demo.User) {
		roles = append(roles, strings.TrimPrefix(m.GetKind().String(), "MESSAGE_KIND_")+"/"+strings.TrimPrefix(m.GetRole().String(), "ROLE_"))
	}
	want := []string{"TEXT/USER", "TOOL_CALL/ASSISTANT", "TOOL_RESULT/TOOL", "TOOL_CALL/ASSISTANT", "TOOL_RESULT/TOOL", "TEXT/ASSISTANT"}
	if diff := cmp.Diff(want, roles); diff != "" {
		t.Errorf("session 2 log (-want +got):\n%s", diff)
	}
	for _, r := range reqs {
		if err := checkWellFormed(r); err != nil {
			t.Errorf("request %d: %v", r.N, err)
		}
	}
}
