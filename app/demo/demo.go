// Package demo plays the article's restaurant example end to end on a fresh embedded Hermes:
// every service in one process with its embedded stores and NATS in a temporary directory, the
// scripted model (an OpenAI-compatible HTTP server in the process that answers from a script —
// no real model runs), and a real MCP server offering search_restaurant and make_reservation,
// added to the gateway through AddServer. Session 1 mentions the restaurant; the memory
// extractor picks it up from turn.finished; session 2 asks to book "the Sichuan restaurant I
// mentioned", and the recalled memory fills the missing restaurant name while the explicit time
// and party size are kept.
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/app/demo/restaurant"
	"github.com/hermes-agent/hermes/internal/backoff"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// User is the demo's user.
const User = "demo-user"

// MCPServerName is the gateway's name (and tool prefix) of the restaurant MCP server.
const MCPServerName = "locallife"

// Options tune a demo run.
type Options struct {
	// Out receives the transcript.
	Out io.Writer
	// Log receives the services' logs; nil discards them.
	Log *slog.Logger
	// DataDir is where the embedded stores go; empty uses a new temporary directory, removed
	// afterwards.
	DataDir string
	// Verbose prints the tool list of every step.
	Verbose bool
	// Serve, when set, keeps the stack serving on this gRPC address after the demo until ctx
	// ends, so that grpcurl or `hermes chat` can talk to it (the scripted model stays the model).
	Serve string
	// HTTPListen, when set, also serves the HTTP/JSON API on this address.
	HTTPListen string
}

// defaultConfig is the serving configuration with every default and nothing from the
// environment, so a demo is the same on every machine.
func defaultConfig() app.Config {
	var cfg app.Config
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(nil)
	return cfg
}

// stack is a running demo stack.
type stack struct {
	App        *app.App
	Model      *scripted.Server
	Restaurant *restaurant.HTTPServer
	Conn       *grpc.ClientConn

	Sessions     sessionv1.SessionServiceClient
	Memory       memoryv1.MemoryServiceClient
	Gateway      mcpgatewayv1.MCPGatewayServiceClient
	Orchestrator orchestratorv1.OrchestratorServiceClient
}

// startStack starts the scripted model, the restaurant MCP server and a monolithic Hermes in
// dataDir, and adds the MCP server to the gateway. (Tests start their stacks with
// test/hermestest.)
func startStack(ctx context.Context, dataDir, listen, httpListen string, log *slog.Logger) (*stack, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st := &stack{}
	var err error
	if st.Model, err = scripted.New(Model()); err != nil {
		return nil, err
	}
	if st.Restaurant, err = restaurant.Listen("127.0.0.1:0", log); err != nil {
		st.Close()
		return nil, err
	}
	cfg := defaultConfig()
	cfg.Listen = listen
	cfg.HTTP.Listen = httpListen
	cfg.DataDir = dataDir
	cfg.ModelBaseURL = st.Model.URL()
	cfg.Model = "restaurant-demo"
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Version = "demo"
	// The demo's restaurant server listens on loopback: as its operator, the demo allows exactly
	// that address (outbound connections to internal addresses are refused by default).
	cfg.EgressAllow = append(cfg.EgressAllow, strings.TrimSuffix(strings.TrimPrefix(st.Restaurant.URL(), "http://"), "/mcp"))
	if st.App, err = app.New(ctx, cfg, log); err != nil {
		st.Close()
		return nil, err
	}
	st.App.Start()
	if st.Conn, err = rpc.Dial(st.App.Addr()); err != nil {
		st.Close()
		return nil, err
	}
	st.Sessions = sessionv1.NewSessionServiceClient(st.Conn)
	st.Memory = memoryv1.NewMemoryServiceClient(st.Conn)
	st.Gateway = mcpgatewayv1.NewMCPGatewayServiceClient(st.Conn)
	st.Orchestrator = orchestratorv1.NewOrchestratorServiceClient(st.Conn)

	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := st.Gateway.AddServer(actx, &mcpgatewayv1.AddServerRequest{
		Spec: &mcpgatewayv1.ServerSpec{
			Name:      MCPServerName,
			Prefix:    MCPServerName,
			Transport: &mcpgatewayv1.ServerSpec_Http{Http: &mcpgatewayv1.HTTPTransport{Url: st.Restaurant.URL()}},
		},
		Wait: true,
	})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("add the restaurant MCP server: %w", err)
	}
	if s := resp.GetServer(); s.GetState() != mcpgatewayv1.ServerState_SERVER_STATE_READY || s.GetToolCount() != 2 {
		st.Close()
		return nil, fmt.Errorf("the restaurant MCP server is %s with %d tools (%s)", s.GetState(), s.GetToolCount(), s.GetLastError())
	}
	return st, nil
}

// Close stops everything.
func (st *stack) Close() {
	if st.Conn != nil {
		_ = st.Conn.Close()
	}
	if st.App != nil {
		_ = st.App.Stop()
	}
	if st.Restaurant != nil {
		st.Restaurant.Close()
	}
	if st.Model != nil {
		st.Model.Close()
	}
}

// TurnResult is what a played turn produced.
type TurnResult struct {
	Events    []*orchestratorv1.TurnEvent
	Completed *orchestratorv1.TurnCompleted
	Failed    *orchestratorv1.TurnFailed
	Calls     []*orchestratorv1.ToolCallStarted
	Results   []*orchestratorv1.ToolCallFinished
	Memories  []*orchestratorv1.RecalledMemory
	Contexts  []*orchestratorv1.ContextAssembled
}

// RunTurn runs a turn and collects (and, with a printer, prints) its events.
func RunTurn(ctx context.Context, c orchestratorv1.OrchestratorServiceClient, req *orchestratorv1.RunTurnRequest, p *Printer) (*TurnResult, error) {
	stream, err := c.RunTurn(ctx, req)
	if err != nil {
		return nil, err
	}
	res := &TurnResult{}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, err
		}
		ev := msg.GetEvent()
		res.Events = append(res.Events, ev)
		if p != nil {
			p.Event(ev)
		}
		switch e := ev.GetEvent().(type) {
		case *orchestratorv1.TurnEvent_Completed:
			res.Completed = e.Completed
		case *orchestratorv1.TurnEvent_Failed:
			res.Failed = e.Failed
		case *orchestratorv1.TurnEvent_ToolCall:
			res.Calls = append(res.Calls, e.ToolCall)
		case *orchestratorv1.TurnEvent_ToolResult:
			res.Results = append(res.Results, e.ToolResult)
		case *orchestratorv1.TurnEvent_Memories:
			res.Memories = append(res.Memories, e.Memories.GetMemories()...)
		case *orchestratorv1.TurnEvent_Context:
			res.Contexts = append(res.Contexts, e.Context)
		}
	}
	if p != nil {
		p.Flush()
	}
	if res.Completed == nil && res.Failed == nil {
		return res, errors.New("the turn's stream ended without a final event")
	}
	return res, nil
}

// WaitForMemory waits until the user has at least one memory (the extractor works
// asynchronously, from turn.finished on NATS).
func WaitForMemory(ctx context.Context, c memoryv1.MemoryServiceClient, user string, timeout time.Duration) ([]*memoryv1.Memory, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var mems []*memoryv1.Memory
	err := errors.New("no memory was extracted")
	if backoff.Until(wctx, backoff.Policy{Initial: 50 * time.Millisecond, Max: 250 * time.Millisecond, Jitter: 0.2}, func() bool {
		resp, lerr := c.ListMemories(wctx, &memoryv1.ListMemoriesRequest{UserId: user})
		if lerr != nil && wctx.Err() == nil {
			err = lerr
		}
		mems = resp.GetMemories()
		return lerr == nil && len(mems) > 0
	}) {
		return mems, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("waiting %s for the memory extractor: %w", timeout, err)
}

// Run plays the demo and checks its outcome; an error means the example did not work.
func Run(ctx context.Context, opts Options) error {
	out := opts.Out
	if out == nil {
		out = os.Stdout
	}
	dir := opts.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "hermes-demo-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		dir = tmp
	}
	fmt.Fprintln(out, "Hermes demo — the article's restaurant example, offline.")
	fmt.Fprintf(out, "Fresh embedded stack in %s. The model is the SCRIPTED MODEL (an OpenAI-compatible server in this process answering from a script; no real model runs).\n", dir)
	listen := opts.Serve
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	st, err := startStack(ctx, dir, listen, opts.HTTPListen, opts.Log)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Fprintf(out, "Hermes serving on %s (all five services). Scripted model at %s.\n", st.App.Addr(), st.Model.URL())
	fmt.Fprintf(out, "MCP server %q (Streamable HTTP at %s) added through MCPGatewayService.AddServer: tools %s_search_restaurant, %s_make_reservation.\n",
		MCPServerName, st.Restaurant.URL(), MCPServerName, MCPServerName)
	p := &Printer{W: out, Verbose: opts.Verbose}
	tok, err := tokenizer.New("o200k_base")
	if err != nil {
		return err
	}

	// Session 1.
	s1, err := st.Sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: User, Title: "查餐厅"})
	if err != nil {
		return err
	}
	rule(out, "Session 1 ("+s1.GetSession().GetId()+")")
	fmt.Fprintf(out, "user › %s\n", FirstMessage)
	r1, err := RunTurn(ctx, st.Orchestrator, &orchestratorv1.RunTurnRequest{SessionId: s1.GetSession().GetId(), UserId: User, Text: FirstMessage}, p)
	if err != nil {
		return err
	}
	if r1.Failed != nil {
		return fmt.Errorf("session 1 failed: %s: %s", r1.Failed.GetCode(), r1.Failed.GetMessage())
	}
	fmt.Fprintln(out, "\n… the turn.finished event went to NATS JetStream; the memory extractor (the scripted model in JSON mode) is reading it …")
	mems, err := WaitForMemory(ctx, st.Memory, User, 30*time.Second)
	if err != nil {
		return err
	}
	for _, m := range mems {
		fmt.Fprintf(out, "  memory written: (%s, %s tier, confidence %.2f) %s%s\n", memoryTypeName(m.GetType()), strings.ToLower(strings.TrimPrefix(m.GetTier().String(), "TIER_")), m.GetConfidence(), m.GetContent(), attrs(m.GetAttributes()))
	}

	// Session 2: a new window, nothing shared with session 1 but the user's memory.
	s2, err := st.Sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: User, Title: "订位"})
	if err != nil {
		return err
	}
	rule(out, "Session 2 ("+s2.GetSession().GetId()+") — a new session; its context shares nothing with session 1")
	fmt.Fprintf(out, "user › %s\n", SecondMessage)
	r2, err := RunTurn(ctx, st.Orchestrator, &orchestratorv1.RunTurnRequest{SessionId: s2.GetSession().GetId(), UserId: User, Text: SecondMessage}, p)
	if err != nil {
		return err
	}
	if r2.Failed != nil {
		return fmt.Errorf("session 2 failed: %s: %s", r2.Failed.GetCode(), r2.Failed.GetMessage())
	}
	if last := p.LastContext; last != nil {
		fmt.Fprintf(out, "\nToken composition of the last request and its reply: %s\n", articleComposition(last.GetTokens(), int32(tok.Count(r2.Completed.GetText()))))
	}

	rule(out, "Checks")
	problems := Check(r2, mems, st.Restaurant.Reservations())
	for _, line := range CheckLines(r2, st.Restaurant.Reservations()) {
		fmt.Fprintln(out, "  ✓ "+line)
	}
	if len(problems) > 0 {
		for _, pr := range problems {
			fmt.Fprintln(out, "  ✗ "+pr)
		}
		return fmt.Errorf("the restaurant example did not work: %s", strings.Join(problems, "; "))
	}
	fmt.Fprintln(out, "\nThe demo played end to end.")
	if opts.Serve != "" {
		fmt.Fprintf(out, "\nStill serving on %s with the scripted model (user %q, sessions %s and %s); Ctrl-C stops.\n",
			st.App.Addr(), User, s1.GetSession().GetId(), s2.GetSession().GetId())
		if a := st.App.HTTPAddr(); a != "" {
			fmt.Fprintf(out, "HTTP/JSON API on http://%s (OpenAPI: http://%s/openapi.json).\n", a, a)
		}
		<-ctx.Done()
	}
	return nil
}

// Check verifies session 2: the search call's restaurant_name was filled from a recalled
// memory, and exactly one reservation was made at 蜀香园 with the user's explicit time and party
// size (not the memory's usual 4).
func Check(r2 *TurnResult, mems []*memoryv1.Memory, reservations []restaurant.Reservation) []string {
	var problems []string
	memIDs := map[string]bool{}
	for _, m := range mems {
		memIDs[m.GetId()] = true
	}
	filled := false
	for _, c := range r2.Calls {
		for _, f := range c.GetFilled() {
			if f.GetName() == "restaurant_name" && f.GetValue() == `"蜀香园"` && memIDs[f.GetMemoryId()] {
				filled = true
			}
			if f.GetName() == "party_size" || f.GetName() == "time" {
				problems = append(problems, "memory overrode the explicit "+f.GetName())
			}
		}
	}
	if !filled {
		problems = append(problems, "restaurant_name was not filled from the recalled memory")
	}
	if len(reservations) != 1 {
		problems = append(problems, fmt.Sprintf("%d reservations were made, want 1", len(reservations)))
	} else if r := reservations[0]; r.RestaurantName != "蜀香园" || r.PartySize != partySize || r.Time != reservationTime {
		problems = append(problems, fmt.Sprintf("reservation %+v, want 蜀香园 at %s for %d", r, reservationTime, partySize))
	}
	if r2.Completed == nil || !strings.Contains(r2.Completed.GetText(), "蜀香园") {
		problems = append(problems, "the final answer does not name 蜀香园")
	}
	return problems
}

// CheckLines describes what session 2 did, for the transcript.
func CheckLines(r2 *TurnResult, reservations []restaurant.Reservation) []string {
	var lines []string
	for _, c := range r2.Calls {
		for _, f := range c.GetFilled() {
			lines = append(lines, fmt.Sprintf("%s: the missing %s was filled from memory %s with %s", c.GetName(), f.GetName(), f.GetMemoryId(), f.GetValue()))
		}
	}
	for _, r := range reservations {
		lines = append(lines, fmt.Sprintf("reservation %s at %s for %s, %d people — the user's explicit time and party size were kept (the memory says a usual 4)", r.ConfirmationID, r.RestaurantName, r.Time, r.PartySize))
	}
	return lines
}

func memoryTypeName(t memoryv1.MemoryType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "MEMORY_TYPE_"))
}

func rule(w io.Writer, title string) {
	fmt.Fprintf(w, "\n── %s %s\n", title, strings.Repeat("─", max(0, 70-len([]rune(title)))))
}
