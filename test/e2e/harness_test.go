// Package e2e tests Hermes end to end: the real services in process (app), through
// their gRPC API over loopback, with the real Redis at 127.0.0.1:6379 and NATS JetStream at
// 127.0.0.1:4222 (CI starts both; the tests fail when they are missing), a real MCP server,
// real HTTP tool endpoints, and the scripted model — an OpenAI-compatible HTTP server that
// answers from a script, reached through the production model client.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/memory"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// stack is a running Hermes (hermestest.Start) with the helpers of these tests.
type stack struct {
	t      testing.TB
	model  *scripted.Server
	main   *app.App
	memory *app.App
	conn   *grpc.ClientConn
	memC   *grpc.ClientConn
	names  events.Names
	prefix string

	sessions sessionv1.SessionServiceClient
	tools    toolsv1.ToolServiceClient
	gateway  mcpgatewayv1.MCPGatewayServiceClient
	orch     orchestratorv1.OrchestratorServiceClient
	mem      memoryv1.MemoryServiceClient
}

type stackOptions struct {
	// noModel starts without a model endpoint.
	noModel bool
	// configure changes the main app's configuration.
	configure func(*app.Config)
	// embedded runs one monolithic app (all targets, embedded stores and NATS); otherwise the
	// hermestest.Split layout, on the shared Redis and NATS.
	embedded bool
	// extracts: the script answers the memory extractor itself; otherwise it gets no memories.
	extracts bool
}

func startStack(t testing.TB, h scripted.Handler, o stackOptions) *stack {
	t.Helper()
	layout := hermestest.Split
	if o.embedded {
		layout = hermestest.Monolith
	}
	hs := hermestest.Start(t, hermestest.Options{Layout: layout, Model: h, Args: []string{hermestest.AllowLoopback}, ScriptExtractor: o.extracts, NoModel: o.noModel, Configure: o.configure})
	return &stack{
		t: t, model: hs.Model, main: hs.App, memory: hs.MemoryApp, conn: hs.Conn, memC: hs.MemoryConn, names: hs.Names, prefix: hs.RedisPrefix,
		sessions: hs.Sessions, tools: hs.Tools, gateway: hs.Gateway, orch: hs.Orchestrator, mem: hs.Memory,
	}
}

func (s *stack) newSession(user string) string {
	s.t.Helper()
	resp, err := s.sessions.CreateSession(context.Background(), &sessionv1.CreateSessionRequest{UserId: user, Title: "e2e"})
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.GetSession().GetId()
}

// run plays one turn and returns its collected events.
func (s *stack) run(ctx context.Context, session, user, text string, opts *orchestratorv1.TurnOptions) *demo.TurnResult {
	s.t.Helper()
	res, err := demo.RunTurn(ctx, s.orch, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: user, Text: text, Options: opts}, nil)
	if err != nil {
		s.t.Fatalf("RunTurn(%q): %v", text, err)
	}
	return res
}

func (s *stack) messages(session, user string) []*sessionv1.Message {
	s.t.Helper()
	var out []*sessionv1.Message
	token := ""
	for {
		resp, err := s.sessions.ListMessages(context.Background(), &sessionv1.ListMessagesRequest{SessionId: session, UserId: user, PageSize: 1000, PageToken: token})
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, resp.GetMessages()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
}

// registerHTTPTool registers a webhook tool served by handler.
func (s *stack) registerHTTPTool(name, schema string, idempotent bool, handler http.HandlerFunc) *httptest.Server {
	s.t.Helper()
	srv := httptest.NewServer(handler)
	s.t.Cleanup(srv.Close)
	_, err := s.tools.RegisterTool(context.Background(), &toolsv1.RegisterToolRequest{Spec: &toolsv1.ToolSpec{
		Name: name, Description: "test tool " + name, InputSchema: schema, Idempotent: idempotent,
		Executor: &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{Url: srv.URL}},
	}})
	if err != nil {
		s.t.Fatalf("register %s: %v", name, err)
	}
	return srv
}

// counter is an HTTP tool endpoint that counts calls and answers with a JSON body.
type counter struct {
	calls  atomic.Int64
	mu     sync.Mutex
	bodies []string
}

func (c *counter) handler(reply func(body map[string]any) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.bodies = append(c.bodies, string(b))
		c.mu.Unlock()
		var in map[string]any
		_ = json.Unmarshal(b, &in)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(reply(in))
	}
}

// checkWellFormed verifies an OpenAI chat request: every assistant tool call is answered by a
// tool message right after it (before any other message), and no tool message answers a call
// that is not there.
func checkWellFormed(req scripted.Request) error {
	open := map[string]bool{}
	for i, m := range req.Messages {
		switch {
		case m.Role == "tool":
			if !open[m.ToolCallID] {
				return fmt.Errorf("message %d: tool result %q without its call right before it", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		case len(open) > 0:
			return fmt.Errorf("message %d (%s): tool calls %v were not answered before it", i, m.Role, keys(open))
		}
		for _, c := range m.ToolCalls {
			if open[c.ID] {
				return fmt.Errorf("message %d: call id %q repeated", i, c.ID)
			}
			open[c.ID] = true
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("tool calls %v unanswered at the end", keys(open))
	}
	return nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// systemText returns the joined system messages of a request.
func systemText(req scripted.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		if m.Role == "system" {
			b.WriteString(m.Content + "\n")
		}
	}
	return b.String()
}

func durationpbOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// lastTurnRequest is the last request a turn made: the memory extractor of a finished turn asks
// the model in the background and may do so after the next turn's requests.
func lastTurnRequest(reqs []scripted.Request) scripted.Request {
	var last scripted.Request
	for _, r := range reqs {
		if len(r.Messages) > 0 && r.Messages[0].Content != memory.ExtractionSystemPrompt {
			last = r
		}
	}
	return last
}
