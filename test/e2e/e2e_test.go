package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// hermes is a whole Hermes (every target, embedded backends) started in this test.
type hermes struct {
	*hermestest.Stack
	app    *app.App
	gw     pb.MCPGatewayServiceClient
	tools  toolsv1.ToolServiceClient
	mcpURL string
}

// startHermes starts Hermes on dataDir with the gateway's test timings and `hermes serve` flags
// extra. The MCP endpoint's port is picked free and then listened on, so another package's
// test may take it in between: a start that finds it taken tries another port.
func startHermes(t testing.TB, dataDir string, extra ...string) *hermes {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	for attempt := 1; ; attempt++ {
		port := mcpgatewaytest.FreePort(t)
		args := append([]string{
			"--target=all",
			"--nats-namespace=mcpgw" + fmt.Sprint(time.Now().UnixNano()%1e6),
			fmt.Sprintf("--mcp-listen=127.0.0.1:%d", port),
			"--mcpgateway.reconnect-min=100ms",
			"--mcpgateway.reconnect-max=1s",
			"--mcpgateway.stop-grace=500ms",
			"--mcpgateway.tools-refresh=200ms",
			// The test's webhooks and HTTP MCP servers listen on loopback; the operator allows it.
			hermestest.AllowLoopback,
			"--mcpgateway.stdio-allow=" + strings.Join(mcpgatewaytest.StdioAllow(), ","),
		}, extra...)
		s, err := hermestest.New(context.Background(), hermestest.Options{DataDir: dataDir, Args: args, NoModel: true, Log: log})
		if err != nil {
			if attempt < 3 && errors.Is(err, syscall.EADDRINUSE) {
				t.Logf("port %d was taken before Hermes listened on it (%v); trying another", port, err)
				continue
			}
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("stopping Hermes: %v", err)
			}
		})
		return &hermes{Stack: s, app: s.App, gw: s.Gateway, tools: s.Tools, mcpURL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}
	}
}

// stop stops Hermes before the test ends (to start it again on its data).
func (h *hermes) stop(t testing.TB) {
	if err := h.Close(); err != nil {
		t.Errorf("stopping Hermes: %v", err)
	}
}

func everything(t *testing.T, name string) *pb.ServerSpec {
	return &pb.ServerSpec{Name: name, Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
		Command: mcpgatewaytest.Node(t),
		Args:    []string{mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"},
	}}}
}

func (h *hermes) addReady(t *testing.T, spec *pb.ServerSpec) *pb.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := h.gw.AddServer(ctx, &pb.AddServerRequest{Spec: spec, Wait: true})
	if err != nil {
		t.Fatalf("AddServer: %v", err)
	}
	if resp.GetServer().GetState() != pb.ServerState_SERVER_STATE_READY {
		t.Fatalf("server %s: %s %s", spec.Name, resp.GetServer().GetState(), resp.GetServer().GetLastError())
	}
	return resp.GetServer()
}

func (h *hermes) execute(t *testing.T, name, args string) *toolsv1.ToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := h.tools.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("ExecuteTool(%s): %v", name, err)
	}
	return resp.GetResult()
}

func (h *hermes) toolSet(t *testing.T) map[string]*toolsv1.Tool {
	t.Helper()
	resp, err := h.tools.ListTools(context.Background(), &toolsv1.ListToolsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*toolsv1.Tool{}
	for _, tl := range resp.GetTools() {
		out[tl.GetSpec().GetName()] = tl
	}
	return out
}

func (h *hermes) server(t *testing.T, name string) *pb.Server {
	t.Helper()
	resp, err := h.gw.ListServers(context.Background(), &pb.ListServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetServers() {
		if s.GetSpec().GetName() == name {
			return s
		}
	}
	t.Fatalf("no server %s", name)
	return nil
}

// TestHelperMCPServer is the helper server that mcpgatewaytest.HelperStdio and
// StartHelperHTTP run; it does nothing in a normal test run.
func TestHelperMCPServer(t *testing.T) { mcpgatewaytest.ServeHelper(t) }

// listChangingServer serves an MCP server with one tool over Streamable HTTP and returns its URL
// and a function that adds a tool at run time (which sends tools/list_changed); a tool answers
// its own name.
func listChangingServer(t *testing.T) (url string, addTool func(name string)) {
	s := mcp.NewServer(&mcp.Implementation{Name: "probe", Version: "1"}, nil)
	addTool = func(name string) {
		s.AddTool(&mcp.Tool{Name: name, Description: "answers " + name, InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
	}
	addTool("first")
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(ts.Close)
	return ts.URL, addTool
}

// TestHowItIsChecked is the acceptance check, through the real gRPC API of a whole
// Hermes process: the everything server under prefix ev shows up in ToolService.ListTools as
// ev_echo, ev_get-sum …; ExecuteTool of ev_get-sum returns the sum; a second server with the
// same tools under another prefix coexists; after the server process is killed, calls answer
// unavailable promptly and work again once it is back.
func TestHowItIsChecked(t *testing.T) {
	h := startHermes(t, t.TempDir())
	spec := everything(t, "everything")
	spec.Prefix = "ev"
	first := h.addReady(t, spec)

	tools := h.toolSet(t)
	for _, n := range []string{"ev_echo", "ev_get-sum", "ev_get-structured-content"} {
		tl, ok := tools[n]
		if !ok {
			t.Fatalf("%s is not in ToolService.ListTools", n)
		}
		if tl.GetSource() != "mcp:everything" || tl.GetSpec().GetMcp().GetServer() != "everything" {
			t.Errorf("%s: source %q executor %v", n, tl.GetSource(), tl.GetSpec().GetExecutor())
		}
	}
	if got := tools["ev_get-sum"].GetSpec().GetMcp().GetTool(); got != "get-sum" {
		t.Errorf("ev_get-sum maps to %q", got)
	}
	byGroup, err := h.tools.ListTools(context.Background(), &toolsv1.ListToolsRequest{Groups: []string{"ev"}})
	if err != nil || len(byGroup.GetTools()) != int(first.GetToolCount()) {
		t.Errorf("group ev holds %d tools (%v), the server registered %d", len(byGroup.GetTools()), err, first.GetToolCount())
	}

	r := h.execute(t, "ev_get-sum", `{"a": 2, "b": 3}`)
	if !r.GetSuccess() || !strings.Contains(r.GetOutput(), "The sum of 2 and 3 is 5.") {
		t.Fatalf("ExecuteTool(ev_get-sum) = %v", r)
	}
	// The tool service validates against the server's schema before the call leaves Hermes.
	if r := h.execute(t, "ev_get-sum", `{"a": 2}`); r.GetSuccess() || r.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_VALIDATION {
		t.Errorf("ExecuteTool with a missing argument = %v, want a validation failure", r)
	}
	if r := h.execute(t, "ev_get-structured-content", `{"location": "New York"}`); !r.GetSuccess() || !strings.Contains(r.GetOutput(), `"temperature":33`) {
		t.Errorf("structured content through the tool service = %v", r)
	}

	spec2 := everything(t, "everything2")
	spec2.Prefix = "ev2"
	h.addReady(t, spec2)
	if r := h.execute(t, "ev2_get-sum", `{"a": 5, "b": 5}`); !r.GetSuccess() || !strings.Contains(r.GetOutput(), "is 10.") {
		t.Errorf("ExecuteTool(ev2_get-sum) = %v", r)
	}
	if r := h.execute(t, "ev_get-sum", `{"a": 1, "b": 1}`); !r.GetSuccess() {
		t.Errorf("the first server after adding the second: %v", r)
	}

	pid := int(h.server(t, "everything").GetPid())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the gateway to see the exit", func() bool { return h.server(t, "everything").GetPid() != int32(pid) })
	start := time.Now()
	r = h.execute(t, "ev_get-sum", `{"a": 1, "b": 2}`)
	t.Logf("ExecuteTool right after the kill: %v in %s", r.GetError().GetCode(), time.Since(start).Round(time.Millisecond))
	if !r.GetSuccess() && r.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE {
		t.Errorf("after the kill: %v, want unavailable (or success if it was already back)", r)
	}
	if r := h.execute(t, "ev2_get-sum", `{"a": 1, "b": 2}`); !r.GetSuccess() {
		t.Errorf("the second server is affected by the first one's death: %v", r)
	}
	testenv.WaitFor(t, 60*time.Second, "ev_get-sum to work again", func() bool {
		return h.execute(t, "ev_get-sum", `{"a": 1, "b": 2}`).GetSuccess()
	})

	rm, err := h.gw.RemoveServer(context.Background(), &pb.RemoveServerRequest{Name: "everything2"})
	if err != nil || rm.GetRemovedTools() == 0 {
		t.Fatalf("RemoveServer: %v, %v", rm, err)
	}
	if _, err := h.tools.GetTool(context.Background(), &toolsv1.GetToolRequest{Name: "ev2_get-sum"}); status.Code(err) != codes.NotFound {
		t.Errorf("a removed server's tool is still registered: %v", err)
	}
}

// TestRegistryCollisionsAndChanges: a name the tool service already has from elsewhere is not
// replaced; a server's list change reaches the tool service; a restart reconnects the servers
// added at run time and prunes the tools of a server the gateway no longer has.
func TestRegistryCollisionsAndChanges(t *testing.T) {
	dir := t.TempDir()
	h := startHermes(t, dir)
	ctx := context.Background()
	api := &toolsv1.ToolSpec{
		Name: "col_echo", Description: "someone else's echo", InputSchema: `{"type":"object"}`,
		Executor: &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{Url: "http://127.0.0.1:9/echo"}},
	}
	if _, err := h.tools.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: api}); err != nil {
		t.Fatal(err)
	}
	spec := everything(t, "col")
	srv := h.addReady(t, spec)
	var reason string
	for _, s := range srv.GetSkippedTools() {
		if s.GetOriginalName() == "echo" {
			reason = s.GetReason()
		}
	}
	if !strings.Contains(reason, "from api") {
		t.Errorf("skipped echo reason = %q, want a collision with the api tool", reason)
	}
	got, err := h.tools.GetTool(ctx, &toolsv1.GetToolRequest{Name: "col_echo"})
	if err != nil || got.GetTool().GetSource() != "api" || got.GetTool().GetVersion() != 1 {
		t.Errorf("the api tool was touched: %v %v", got, err)
	}
	if _, ok := h.toolSet(t)["col_get-sum"]; !ok {
		t.Error("the server's other tools are missing")
	}

	url, addTool := listChangingServer(t)
	h.addReady(t, &pb.ServerSpec{Name: "probe", Prefix: "pr", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: url}}})
	addTool("late")
	testenv.WaitFor(t, 10*time.Second, "pr_late in the tool service", func() bool {
		_, ok := h.toolSet(t)["pr_late"]
		return ok
	})
	if r := h.execute(t, "pr_late", `{}`); !r.GetSuccess() || !strings.Contains(r.GetOutput(), "late") {
		t.Errorf("pr_late = %v", r)
	}

	// A tool left by a server this gateway does not have (as after a restart).
	ghost := &toolsv1.ToolSpec{Name: "ghost_tool", Description: "left behind", InputSchema: `{"type":"object"}`,
		Executor: &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Server: "ghost", Tool: "tool"}}}
	if _, err := h.tools.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: ghost, Source: "mcp:ghost"}); err != nil {
		t.Fatal(err)
	}
	h.stop(t)
	h2 := startHermes(t, dir)
	// The servers added at run time are stored, so they come back; only the ghost's tool goes.
	testenv.WaitFor(t, 20*time.Second, "the restart to prune the servers it no longer has and keep the stored ones", func() bool {
		tools := h2.toolSet(t)
		_, ghost := tools["ghost_tool"]
		_, col := tools["col_get-sum"]
		return !ghost && col
	})
	if _, ok := h2.toolSet(t)["col_echo"]; !ok {
		t.Error("pruning removed the api tool")
	}
}

// TestHermesAsMCPServer connects the Go SDK's MCP client to Hermes' Streamable HTTP endpoint:
// the tool service's tools (builtins and MCP-backed ones) are listed and callable, with the
// tool service's validation.
func TestHermesAsMCPServer(t *testing.T) {
	h := startHermes(t, t.TempDir())
	spec := everything(t, "everything")
	spec.Prefix = "ev"
	h.addReady(t, spec)

	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.mcpURL}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", h.mcpURL, err)
	}
	defer sess.Close()
	if info := sess.InitializeResult().ServerInfo; info == nil || info.Name != "hermes" {
		t.Errorf("serverInfo = %+v", info)
	}
	names := map[string]*mcp.Tool{}
	for tl, err := range sess.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names[tl.Name] = tl
	}
	for _, n := range []string{"current_time", "ev_get-sum", "ev_echo"} {
		if _, ok := names[n]; !ok {
			t.Errorf("%s not served over MCP (have %d tools: %v)", n, len(names), slices.Collect(maps.Keys(names)))
		}
	}
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "ev_get-sum", Arguments: map[string]any{"a": 20, "b": 22}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) == 0 || res.Content[0].(*mcp.TextContent).Text != "The sum of 20 and 22 is 42." {
		t.Errorf("ev_get-sum over MCP = %+v", res)
	}
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "ev_get-sum", Arguments: map[string]any{"a": "twenty"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "/a") {
		t.Errorf("invalid arguments over MCP = %+v, want isError naming /a", res.Content)
	}
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "current_time", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("current_time = %+v, %v", res, err)
	}
	if res.StructuredContent != nil {
		if _, err := json.Marshal(res.StructuredContent); err != nil {
			t.Error(err)
		}
	}
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool"}); err == nil {
		t.Error("calling an unknown tool succeeded")
	}

	// A tool registered after the session started is announced and callable.
	late := &toolsv1.ToolSpec{Name: "late_builtin_clock", Description: "another clock", InputSchema: `{"type":"object"}`,
		Executor: &toolsv1.ToolSpec_Builtin{Builtin: &toolsv1.BuiltinExecutor{Name: "current_time"}}}
	if _, err := h.tools.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: late}); err != nil {
		t.Fatal(err)
	}
	if res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "late_builtin_clock", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Errorf("a newly registered tool over MCP: %+v, %v", res, err)
	}
}

// TestMicroservices runs the gateway and the tool service as two processes' worth of targets,
// the gateway first: its tools wait for the tool service, get registered once it is up, and
// the tool service executes them through the gateway.
func TestMicroservices(t *testing.T) {
	toolsPort := mcpgatewaytest.FreePort(t)
	gw := startHermes(t, t.TempDir(), "--target=mcpgateway", fmt.Sprintf("--tools-addr=127.0.0.1:%d", toolsPort))
	spec := everything(t, "everything")
	spec.Prefix = "ev"
	srv := gw.addReady(t, spec)
	if !strings.Contains(srv.GetLastError(), "tool service") {
		t.Errorf("with the tool service down, last_error = %q, want it to say so", srv.GetLastError())
	}
	if srv.GetToolCount() != 0 {
		t.Errorf("tool_count = %d with no tool service to register in", srv.GetToolCount())
	}
	tl := startHermes(t, t.TempDir(), "--target=tools", fmt.Sprintf("--listen=127.0.0.1:%d", toolsPort), "--mcpgateway-addr="+gw.app.Addr())
	testenv.WaitFor(t, 60*time.Second, "the tools to be registered once the tool service is up", func() bool {
		_, ok := tl.toolSet(t)["ev_get-sum"]
		return ok
	})
	if r := tl.execute(t, "ev_get-sum", `{"a": 3, "b": 4}`); !r.GetSuccess() || !strings.Contains(r.GetOutput(), "is 7.") {
		t.Errorf("ExecuteTool across services = %v", r)
	}
	testenv.WaitFor(t, 10*time.Second, "last_error to clear", func() bool { return gw.server(t, "everything").GetLastError() == "" })
}

// TestAppendOnce is defect 1: a tool that appends a line, whose server dies during the call,
// appends once whatever the retry settings, over stdio and Streamable HTTP alike, and the result
// says it may have run. A tool the server declares idempotent is retried and succeeds once the
// server is back.
func TestAppendOnce(t *testing.T) {
	h := startHermes(t, t.TempDir(), "--tools.retry-backoff=2s", "--tools.retry-max-backoff=2s")
	lines := func(path string) int {
		data, _ := os.ReadFile(path)
		return strings.Count(string(data), "\n")
	}
	ctx := context.Background()
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			journal := filepath.Join(t.TempDir(), "journal")
			env := map[string]string{"HERMES_HELPER_APPEND": journal}
			var spec *pb.ServerSpec
			if transport == "stdio" {
				spec = mcpgatewaytest.HelperStdio(t, "once"+transport, env)
			} else {
				spec = &pb.ServerSpec{Name: "once" + transport, Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: mcpgatewaytest.StartHelperHTTP(t, env)}}}
			}
			h.addReady(t, spec)
			defer func() { _, _ = h.gw.RemoveServer(ctx, &pb.RemoveServerRequest{Name: spec.Name}) }()
			tl := h.toolSet(t)[spec.Name+"_append_line"]
			if a := tl.GetSpec().GetAnnotations(); !a.GetDestructiveHint() || a.GetIdempotentHint() || tl.GetSpec().GetIdempotent() {
				t.Fatalf("append_line in the tool service: annotations %v, idempotent %v", a, tl.GetSpec().GetIdempotent())
			}
			r := h.execute(t, spec.Name+"_append_line", `{"line": "once"}`)
			if r.GetSuccess() || !r.GetMayHaveRun() || r.GetAttempts() != 1 {
				t.Errorf("append_line: success %v may_have_run %v attempts %d (%s)", r.GetSuccess(), r.GetMayHaveRun(), r.GetAttempts(), r.GetError().GetMessage())
			}
			if n := lines(journal); n != 1 {
				t.Errorf("the journal has %d lines, want 1", n)
			}
			if transport == "http" {
				return // nobody restarts the HTTP server; the retry of an idempotent tool is shown over stdio
			}
			// The first attempt kills the server; how many attempts reach the restarted one
			// depends on how fast it comes back, within the retry budget.
			r = h.execute(t, spec.Name+"_append_idempotent", `{"line": "again"}`)
			if !r.GetSuccess() || r.GetAttempts() < 2 {
				t.Errorf("append_idempotent: success %v attempts %d (%s)", r.GetSuccess(), r.GetAttempts(), r.GetError().GetMessage())
			}
		})
	}
}

// BenchmarkExecuteToolMCP is the performance comparison, side by side in one run:
// ExecuteTool of the everything server's echo through a whole Hermes (gRPC to the tool service,
// which calls the gateway) against the official TypeScript SDK client calling the same server
// directly, over stdio and over Streamable HTTP. The ts-sdk timings cover the calls only (the
// client connects before the timer starts).
func BenchmarkExecuteToolMCP(b *testing.B) {
	port := mcpgatewaytest.FreePort(b)
	mcpgatewaytest.StartEverythingHTTP(b, port)
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	script := mcpgatewaytest.NodeScript(b, "@modelcontextprotocol/server-everything/dist/index.js")
	for _, transport := range []string{"stdio", "http"} {
		b.Run("ts-sdk-direct/"+transport, func(b *testing.B) {
			target := script
			if transport == "http" {
				target = url
			}
			benchTSClient(b, transport, target)
		})
		b.Run("hermes-execute/"+transport, func(b *testing.B) {
			h := startHermes(b, b.TempDir())
			spec := &pb.ServerSpec{Name: "bench" + transport, Prefix: "b" + transport, Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
				Command: mcpgatewaytest.Node(b), Args: []string{script, "stdio"},
			}}}
			if transport == "http" {
				spec.Transport = &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: url}}
			}
			ctx := context.Background()
			resp, err := h.gw.AddServer(ctx, &pb.AddServerRequest{Spec: spec, Wait: true})
			if err != nil || resp.GetServer().GetState() != pb.ServerState_SERVER_STATE_READY {
				b.Fatalf("AddServer: %v %v", resp, err)
			}
			req := &toolsv1.ExecuteToolRequest{Name: spec.Prefix + "_echo", Arguments: `{"message":"hello"}`}
			for b.Loop() {
				r, err := h.tools.ExecuteTool(ctx, req)
				if err != nil || !r.GetResult().GetSuccess() {
					b.Fatal(err, r)
				}
			}
		})
	}
}

// benchTSClient runs testdata/npm/bench-client.mjs and times b.N calls.
func benchTSClient(b *testing.B, transport, target string) {
	b.StopTimer()
	cmd := exec.Command(mcpgatewaytest.Node(b), filepath.Join(mcpgatewaytest.NPMDir(b), "bench-client.mjs"), transport, target)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		b.Fatalf("bench client: %q", lines.Text())
	}
	b.StartTimer()
	fmt.Fprintf(stdin, "%d\n", b.N)
	if !lines.Scan() || lines.Text() != "done" {
		b.Fatalf("bench client: %q", lines.Text())
	}
}
