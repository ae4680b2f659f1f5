package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// edgeServer is a Go SDK MCP server on a fixed loopback port that can be stopped and started
// again, for the rough edges of issue 27: a tool whose HTTP connection drops after it ran, a
// tool that asks for two samples, and a server that goes away and comes back.
type edgeServer struct {
	srv  *mcp.Server
	addr string
	ran  atomic.Int32 // calls of "drop" that ran

	mu   sync.Mutex // guards http
	http *http.Server
}

func newEdgeServer(t *testing.T) *edgeServer {
	t.Helper()
	e := &edgeServer{srv: mcp.NewServer(&mcp.Implementation{Name: "edges", Version: "1"}, nil)}
	obj := json.RawMessage(`{"type":"object"}`)
	e.srv.AddTool(&mcp.Tool{Name: "ok", Description: "answers", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	})
	e.srv.AddTool(&mcp.Tool{Name: "sample_twice", Description: "asks the client's model twice", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var codes []string
		for range 2 {
			_, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
			var rpcErr *jsonrpc.Error
			switch {
			case err == nil:
				codes = append(codes, "ok")
			case errors.As(err, &rpcErr):
				codes = append(codes, fmt.Sprintf("%d %s", rpcErr.Code, rpcErr.Message))
			default:
				codes = append(codes, "error "+err.Error())
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(codes, "\n")}}}, nil
	})
	e.srv.AddTool(&mcp.Tool{Name: "ask", Description: "asks the user for a name", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"}}})
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "action: " + res.Action}}}, nil
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = l.Addr().String()
	e.serve(l)
	t.Cleanup(e.stop)
	return e
}

// handler serves MCP, except that a call of the tool "drop" runs (counted in ran) and then
// loses its connection before any answer is written.
func (e *edgeServer) handler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return e.srv }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method == http.MethodPost && bytes.Contains(body, []byte(`"tools/call"`)) && bytes.Contains(body, []byte(`"name":"drop"`)) {
			e.ran.Add(1)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (e *edgeServer) serve(l net.Listener) {
	s := &http.Server{Handler: e.handler(), ReadHeaderTimeout: 10 * time.Second}
	e.mu.Lock()
	e.http = s
	e.mu.Unlock()
	go func() { _ = s.Serve(l) }()
}

func (e *edgeServer) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.http != nil {
		_ = e.http.Close()
		e.http = nil
	}
}

func (e *edgeServer) start(t *testing.T) {
	t.Helper()
	var l net.Listener
	testenv.WaitFor(t, 30*time.Second, "the port to be free again", func() bool {
		var err error
		l, err = net.Listen("tcp", e.addr)
		return err == nil
	})
	e.serve(l)
}

func (e *edgeServer) url() string { return "http://" + e.addr + "/mcp" }

// TestDroppedConnectionMayHaveRun replays issue 27: an HTTP connection dropped during a call
// was reported as "rejected" ("rejected by transport"), though the tool had run.
func TestDroppedConnectionMayHaveRun(t *testing.T) {
	e := newEdgeServer(t)
	e.srv.AddTool(&mcp.Tool{Name: "drop", Description: "runs, then its connection drops", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "never seen"}}}, nil
		})
	g := New(testConfig(), Options{Logger: testLogger(t)})
	defer g.Close()
	gwReady(t, g, httpSpec("edges", "edges", e.url()))
	r := gwCall(t, g, "edges", "drop", `{}`)
	if e.ran.Load() == 0 {
		t.Fatal("the tool did not run")
	}
	if r.GetSuccess() || r.GetErrorCode() != codeUnavailable || !r.GetMayHaveRun() || !strings.Contains(r.GetOutput(), "may have run") || strings.Contains(r.GetOutput(), "rejected the call") {
		t.Errorf("dropped connection: %+v; want unavailable and may_have_run, not rejected", r)
	}
	if r := gwCall(t, g, "edges", "ok", `{}`); !r.GetSuccess() {
		t.Errorf("the next call: %+v", r)
	}
}

// TestSamplingRateLimitCode replays issue 27: sampling refused by the rate limit answered the
// server with JSON-RPC code 0.
func TestSamplingRateLimitCode(t *testing.T) {
	e := newEdgeServer(t)
	g := New(testConfig(), Options{Logger: testLogger(t), Sampler: &scriptedSampler{answer: "hello"}})
	defer g.Close()
	spec := httpSpec("edges", "edges", e.url())
	spec.Sampling = &pb.SamplingPolicy{Allow: true, PerMinute: 1}
	gwReady(t, g, spec)
	r := gwCall(t, g, "edges", "sample_twice", `{}`)
	lines := strings.Split(r.GetOutput(), "\n")
	if !r.GetSuccess() || len(lines) != 2 || lines[0] != "ok" || !strings.HasPrefix(lines[1], fmt.Sprint(codeSamplingRateLimited)+" ") {
		t.Fatalf("sampling twice with a limit of one a minute: %q; want ok, then code %d", r.GetOutput(), codeSamplingRateLimited)
	}
}

// TestIdleHTTPServerReconnectsPromptly replays issue 27: a recovered HTTP server with no calls
// stayed FAILED for the whole exponential reconnect delay (reconnect-max 30 s).
func TestIdleHTTPServerReconnectsPromptly(t *testing.T) {
	e := newEdgeServer(t)
	cfg := testConfig()
	cfg.ReconnectMin, cfg.ReconnectMax, cfg.HTTPReconnectMax = 500*time.Millisecond, 30*time.Second, time.Second
	cfg.PingInterval = 200 * time.Millisecond
	g := New(cfg, Options{Logger: testLogger(t)})
	defer g.Close()
	gwReady(t, g, httpSpec("edges", "edges", e.url()))
	e.stop()
	// Enough failed attempts that the general backoff would be at 16 s and more.
	testenv.WaitFor(t, 60*time.Second, "six failed reconnect attempts", func() bool {
		s := gwServer(t, g, "edges")
		return s.GetState() == pb.ServerState_SERVER_STATE_FAILED && s.GetReconnects() >= 6
	})
	if s := gwServer(t, g, "edges"); time.Until(s.GetNextRetryAt().AsTime()) > cfg.HTTPReconnectMax {
		t.Errorf("next retry in %s, after the HTTP maximum %s", time.Until(s.GetNextRetryAt().AsTime()), cfg.HTTPReconnectMax)
	}
	e.start(t)
	start := time.Now()
	testenv.WaitFor(t, 30*time.Second, "the recovered server to be ready without any call", func() bool {
		return gwServer(t, g, "edges").GetState() == pb.ServerState_SERVER_STATE_READY
	})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the recovered server was ready after %s", took)
	}
}

// gwServer is one server of g.Servers.
func gwServer(t *testing.T, g *Gateway, name string) *pb.Server {
	t.Helper()
	for _, s := range g.Servers() {
		if s.GetSpec().GetName() == name {
			return s
		}
	}
	t.Fatalf("server %s not listed", name)
	return nil
}

// TestElicitationOutlastsCallTimeout replays issue 27: an "ask" elicitation nobody answered
// ended at the call's timeout as timeout/may-have-run, not as a decline after the elicitation
// timeout. The call's clock now stands still while the person is asked; the unanswered request
// is declined after elicit-timeout, and the tool finishes.
func TestElicitationOutlastsCallTimeout(t *testing.T) {
	e := newEdgeServer(t)
	cfg := testConfig()
	cfg.CallTimeout, cfg.ElicitTimeout = 4*time.Second, 7*time.Second
	g := New(cfg, Options{Logger: testLogger(t)})
	defer g.Close()
	spec := httpSpec("edges", "edges", e.url())
	spec.Elicitation = "ask"
	gwReady(t, g, spec)
	var asked atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	r, err := g.CallToolProgress(ctx, &pb.CallToolRequest{Server: "edges", Tool: "ask", Arguments: `{}`}, func(p *pb.Progress) {
		if p.GetElicitation() != nil {
			asked.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if asked.Load() != 1 || !r.GetSuccess() || r.GetOutput() != "action: decline" {
		t.Fatalf("asked %d times; result %+v; want one request, declined after %s, and the tool's answer", asked.Load(), r, cfg.ElicitTimeout)
	}
	if took < cfg.ElicitTimeout {
		t.Errorf("the call took %s, less than the elicitation timeout %s", took, cfg.ElicitTimeout)
	}
}
