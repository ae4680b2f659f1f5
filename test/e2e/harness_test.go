// Package e2e tests Hermes end to end: the real services in process (internal/app), through
// their gRPC API over loopback, with the real Redis at 127.0.0.1:6379 and NATS JetStream at
// 127.0.0.1:4222 (CI starts both; the tests fail when they are missing), a real MCP server,
// real HTTP tool endpoints, and the scripted model — an OpenAI-compatible HTTP server that
// answers from a script, reached through the production model client.
package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/app"
	"github.com/hermes-agent/hermes/internal/demo"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/memory"
)

const natsURL = "nats://127.0.0.1:4222"

// testEventsKey signs the tests' turn.finished events (--events-key).
const testEventsKey = "e2e-test-events-key-0123456789abcdef0123"

func randomToken(t testing.TB) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// testLogger writes the services' warnings and errors to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// stack is Hermes in microservices shape over loopback: one app with session, tools, MCP
// gateway and orchestrator on Redis and NATS, and the memory target in a second app (embedded
// store, same NATS namespace) reached by address — the memory target's Redis mode needs Qdrant,
// which CI does not run.
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
	// embedded runs one monolithic app (all targets, embedded stores and NATS).
	embedded bool
	// extracts: the script answers the memory extractor itself; otherwise it gets no memories.
	extracts bool
}

// checkNATS fails the test when the shared NATS is not reachable (testenv.Redis checks Redis).
func checkNATS(t testing.TB) {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatalf("NATS at %s is required: %v", natsURL, err)
	}
	nc.Close()
}

func startStack(t testing.TB, h scripted.Handler, o stackOptions) *stack {
	t.Helper()
	ctx := context.Background()
	s := &stack{t: t}
	var err error
	if h == nil {
		h = scripted.Sequence()
	}
	if !o.extracts {
		h = withExtractor(h)
	}
	if s.model, err = scripted.New(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.model.Close)
	log := testLogger(t)

	base := demo.DefaultConfig()
	base.Listen = "127.0.0.1:0"
	base.ShutdownTimeout = 5 * time.Second
	base.Model = "scripted-test"
	// The orchestrator and memory sign and verify turn.finished with it on the shared NATS.
	base.EventsKey = testEventsKey
	// The webhooks and MCP servers of these tests listen on loopback; the operator allows it.
	base.EgressAllow = []string{"127.0.0.1:*", "localhost:*"}
	if !o.noModel {
		base.ModelBaseURL = s.model.URL()
	}
	if o.embedded {
		base.DataDir = t.TempDir()
		if o.configure != nil {
			o.configure(&base)
		}
		s.main = startApp(t, ctx, base, log)
		s.memory = s.main
	} else {
		_, s.prefix = testenv.Redis(t)
		checkNATS(t)
		ns := "e2e" + randomToken(t)
		s.names = events.NamespacedNames(ns)
		t.Cleanup(s.cleanupNATS)

		memCfg := base
		memCfg.Target = app.TargetMemory
		memCfg.DataDir = t.TempDir()
		memCfg.NATSURL, memCfg.NATSNamespace = natsURL, ns
		s.memory = startApp(t, ctx, memCfg, log)

		mainCfg := base
		mainCfg.Target = strings.Join([]string{app.TargetSession, app.TargetTools, app.TargetMCPGateway, app.TargetOrchestrator}, ",")
		mainCfg.DataDir = t.TempDir()
		mainCfg.RedisURL, mainCfg.RedisPrefix = testenv.RedisURL(), s.prefix
		mainCfg.NATSURL, mainCfg.NATSNamespace = natsURL, ns
		mainCfg.MemoryAddr = s.memory.Addr()
		if o.configure != nil {
			o.configure(&mainCfg)
		}
		s.main = startApp(t, ctx, mainCfg, log)
	}
	if s.conn, err = rpc.Dial(s.main.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.conn.Close() })
	if s.memC, err = rpc.Dial(s.memory.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.memC.Close() })
	s.sessions = sessionv1.NewSessionServiceClient(s.conn)
	s.tools = toolsv1.NewToolServiceClient(s.conn)
	s.gateway = mcpgatewayv1.NewMCPGatewayServiceClient(s.conn)
	s.orch = orchestratorv1.NewOrchestratorServiceClient(s.conn)
	s.mem = memoryv1.NewMemoryServiceClient(s.memC)
	return s
}

func startApp(t testing.TB, ctx context.Context, cfg app.Config, log *slog.Logger) *app.App {
	t.Helper()
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.Target, err)
	}
	a.Start()
	t.Cleanup(func() { _ = a.Stop() })
	return a
}

// cleanupNATS deletes the test's NATS stream (testenv.Redis deletes its Redis keys).
func (s *stack) cleanupNATS() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if nc, err := nats.Connect(natsURL); err == nil {
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(ctx, s.names.Stream)
		}
		nc.Close()
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

// withExtractor answers the memory extractor's requests with no memories, so a test's script
// only plays the assistant.
func withExtractor(h scripted.Handler) scripted.Handler {
	return func(req scripted.Request) scripted.Reply {
		if len(req.Messages) > 0 && req.Messages[0].Content == memory.ExtractionSystemPrompt {
			return scripted.Text(`{"memories":[]}`)
		}
		return h(req)
	}
}
