package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/rpc"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

type fakeServers struct {
	servers []*mcpgatewayv1.Server
	err     error
}

func (f fakeServers) ListServers(context.Context, *mcpgatewayv1.ListServersRequest, ...grpc.CallOption) (*mcpgatewayv1.ListServersResponse, error) {
	return &mcpgatewayv1.ListServersResponse{Servers: f.servers}, f.err
}

// TestServerInstructions: the instructions of the MCP servers the operator named, and only
// those, follow the system prompt; a gateway that cannot answer does not fail the turn.
func TestServerInstructions(t *testing.T) {
	servers := []*mcpgatewayv1.Server{
		{Spec: &mcpgatewayv1.ServerSpec{Name: "fs"}, Instructions: "Paths are absolute."},
		{Spec: &mcpgatewayv1.ServerSpec{Name: "other"}, Instructions: "Always call other__everything first."},
		{Spec: &mcpgatewayv1.ServerSpec{Name: "quiet"}},
	}
	for _, tc := range []struct {
		name      string
		names     []string
		lister    fakeServers
		want, not []string
	}{
		{"none named", nil, fakeServers{servers: servers}, nil, []string{"Paths are absolute.", "other__everything"}},
		{"one named", []string{"fs"}, fakeServers{servers: servers}, []string{`MCP server "fs"`, "Paths are absolute."}, []string{"other__everything"}},
		{"every server", []string{"*"}, fakeServers{servers: servers}, []string{"Paths are absolute.", "other__everything"}, []string{`"quiet"`}},
		{"gateway down", []string{"fs"}, fakeServers{err: errors.New("unavailable")}, nil, []string{"Paths are absolute."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var system string
				l := newLoop(t, Config{}, func(ctx context.Context, req model.Request) (*model.Response, error) {
					if !isSummary(req) {
						mu.Lock()
						system = req.Messages[0].Content
						mu.Unlock()
					}
					return toolThenAnswer(ctx, req)
				})
				l.svc.instructions = &serverInstructions{names: tc.names, servers: tc.lister, now: l.svc.now, log: l.svc.log}
				if done := l.run(t, "s1", "list my files", nil).final().GetCompleted(); done == nil {
					t.Fatal("the turn did not complete")
				}
				mu.Lock()
				defer mu.Unlock()
				if !strings.HasPrefix(system, DefaultSystemPrompt) {
					t.Errorf("system prompt %q does not start with the operator's", system)
				}
				checkText(t, "system prompt", system, tc.want, tc.not)
			})
		})
	}
}

// elicitingTools is a tool service whose one call asks for the user's input, then waits for the
// answer the gateway got and returns it as the result.
type elicitingTools struct {
	fakeTools
	answers chan *mcpgatewayv1.AnswerElicitationRequest
}

func (f *elicitingTools) ExecuteToolStream(ctx context.Context, _ *toolsv1.ExecuteToolStreamRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[toolsv1.ExecuteToolStreamResponse], error) {
	return &elicitingStream{ctx: ctx, answers: f.answers}, nil
}

type elicitingStream struct {
	grpc.ClientStream
	ctx     context.Context
	answers chan *mcpgatewayv1.AnswerElicitationRequest
	asked   bool
}

func (s *elicitingStream) Recv() (*toolsv1.ExecuteToolStreamResponse, error) {
	if !s.asked {
		s.asked = true
		return &toolsv1.ExecuteToolStreamResponse{Event: &toolsv1.ExecuteToolStreamResponse_Progress{Progress: &toolsv1.ToolProgress{
			Message:     "the server asks for input: your name?",
			Elicitation: &toolsv1.Elicitation{Id: "e1", Server: "ev", Message: "your name?", RequestedSchema: `{"type":"object","properties":{"name":{"type":"string"}}}`},
		}}}, nil
	}
	select {
	case a := <-s.answers:
		return &toolsv1.ExecuteToolStreamResponse{Event: &toolsv1.ExecuteToolStreamResponse_Response{Response: &toolsv1.ExecuteToolResponse{
			Result: &toolsv1.ToolResult{Success: true, Output: a.GetAction() + " " + a.GetContent()},
		}}}, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// answeringGateway passes answers to the waiting tool.
type answeringGateway struct {
	fakeServers
	answers chan *mcpgatewayv1.AnswerElicitationRequest
}

func (g answeringGateway) AnswerElicitation(_ context.Context, in *mcpgatewayv1.AnswerElicitationRequest, _ ...grpc.CallOption) (*mcpgatewayv1.AnswerElicitationResponse, error) {
	select {
	case g.answers <- in:
		return &mcpgatewayv1.AnswerElicitationResponse{}, nil
	default:
		return nil, status.Error(codes.NotFound, "nothing waits")
	}
}

// slowRunningRecord stores a turn's RUNNING record a second late, as a slow store may (the turn
// waits for it before TurnStarted).
type slowRunningRecord struct{ Store }

func (s slowRunningRecord) PutTurn(ctx context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error {
	if turn.GetStatus() == orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		time.Sleep(time.Second)
	}
	return s.Store.PutTurn(ctx, turn, ttl)
}

// TestAnswerElicitation: a tool's request for input reaches the turn's stream; its owner's
// answer reaches the tool; another user cannot answer, nor anyone once the turn is over. The
// owner who answers the moment the request arrives is not told the turn is unknown, however late
// its RUNNING record is stored (an answer found no record about once in 50 runs of the suite).
func TestAnswerElicitation(t *testing.T) {
	for _, slow := range []bool{false, true} {
		t.Run(fmt.Sprintf("slow running record %v", slow), func(t *testing.T) { testAnswerElicitation(t, slow) })
	}
}

func testAnswerElicitation(t *testing.T, slowRecord bool) {
	synctest.Test(t, func(t *testing.T) {
		var wrap func(Store) Store
		if slowRecord {
			wrap = func(s Store) Store { return slowRunningRecord{s} }
		}
		fake := newFakeSession()
		l := newLoopWith(t, Config{}, fake, toolThenAnswer, wrap)
		l.session = fake
		answers := make(chan *mcpgatewayv1.AnswerElicitationRequest, 1)
		l.svc.deps.Tools = &elicitingTools{fakeTools: *l.tools, answers: answers}
		l.svc.deps.Gateway = answeringGateway{answers: answers}
		ctx := context.Background()
		var turnID string
		var errs []error
		st := l.run(t, "s1", "book it", func(ev *orchestratorv1.TurnEvent) {
			if s := ev.GetStarted(); s != nil {
				turnID = s.GetTurnId()
			}
			e := ev.GetToolProgress().GetElicitation()
			if e == nil {
				return
			}
			_, other := l.svc.AnswerElicitation(ctx, &orchestratorv1.AnswerElicitationRequest{TurnId: turnID, UserId: "mallory", ElicitationId: e.GetId(), Action: "accept", Content: `{"name":"Mallory"}`})
			_, bad := l.svc.AnswerElicitation(ctx, &orchestratorv1.AnswerElicitationRequest{TurnId: turnID, UserId: "u", ElicitationId: e.GetId(), Action: "yes"})
			_, err := l.svc.AnswerElicitation(ctx, &orchestratorv1.AnswerElicitationRequest{TurnId: turnID, UserId: "u", ElicitationId: e.GetId(), Action: "accept", Content: `{"name":"Ada"}`})
			errs = append(errs, other, bad, err)
		})
		done := st.final().GetCompleted()
		if done == nil || len(errs) != 3 {
			t.Fatalf("final %v; answers %v", st.final(), errs)
		}
		if replyCode(errs[0]) != codes.PermissionDenied || replyCode(errs[1]) != codes.InvalidArgument || errs[2] != nil {
			t.Errorf("answers: another user %v (want PERMISSION_DENIED), bad action %v (want INVALID_ARGUMENT), owner %v", errs[0], errs[1], errs[2])
		}
		rec, err := l.store.GetTurn(ctx, done.GetTurnId())
		if err != nil || len(rec.GetToolCalls()) != 1 || !strings.Contains(rec.GetToolCalls()[0].GetResult().GetOutput(), `accept {"name":"Ada"}`) {
			t.Errorf("the tool did not get the owner's answer: %v, %v", rec.GetToolCalls(), err)
		}
		if _, err := l.svc.AnswerElicitation(ctx, &orchestratorv1.AnswerElicitationRequest{TurnId: done.GetTurnId(), UserId: "u", ElicitationId: "e1", Action: "decline"}); replyCode(err) != codes.FailedPrecondition {
			t.Errorf("an answer after the turn: %v, want FAILED_PRECONDITION", err)
		}
	})
}

// replyCode is the code a caller gets for a handler's error called directly here: the gRPC
// boundary (rpc.Classify) chooses it.
func replyCode(err error) codes.Code {
	return status.Code(rpc.Classify(context.Background(), nil, "test", err))
}
