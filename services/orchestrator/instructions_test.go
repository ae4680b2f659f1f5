package orchestrator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"

	"github.com/hermes-agent/hermes/internal/model"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
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
				for _, w := range tc.want {
					if !strings.Contains(system, w) {
						t.Errorf("system prompt lacks %q:\n%s", w, system)
					}
				}
				for _, n := range tc.not {
					if strings.Contains(system, n) {
						t.Errorf("system prompt has %q:\n%s", n, system)
					}
				}
			})
		})
	}
}
