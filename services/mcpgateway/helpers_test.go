package mcpgateway

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/egress"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
	"github.com/hermes-agent/hermes/services/tools"
)

// testConfig reconnects fast and gives up hung servers quickly, so the staying-up tests run in
// seconds.
func testConfig() Config {
	return Config{
		CallTimeout:     20 * time.Second,
		ConnectTimeout:  60 * time.Second,
		PingTimeout:     2 * time.Second,
		ReconnectMin:    100 * time.Millisecond,
		ReconnectMax:    time.Second,
		ListDebounce:    50 * time.Millisecond,
		MaxTextBytes:    64 << 10,
		CompactJSONOver: 1024,
		StopGrace:       500 * time.Millisecond,
		StdioAllow:      mcpgatewaytest.StdioAllow(),
	}
}

func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// startGateway serves a Gateway over gRPC (bufconn) and returns a client.
func startGateway(t testing.TB, cfg Config, opts Options) (pb.MCPGatewayServiceClient, *Gateway) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	g := New(cfg, opts)
	// The production server (internal/rpc), so errors reach the client classified as in hermes.
	s := rpc.NewServer(rpc.ServerOptions{Logger: opts.Logger, ShutdownTimeout: time.Second})
	s.Register(&pb.MCPGatewayService_ServiceDesc, NewServer(g))
	t.Cleanup(g.Close) // after the server has stopped: cleanups run last-in first-out
	conn := testenv.Serve(t, s)
	return pb.NewMCPGatewayServiceClient(conn), g
}

func everythingStdio(t testing.TB, name, prefix string) *pb.ServerSpec {
	return &pb.ServerSpec{
		Name:   name,
		Prefix: prefix,
		Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
			Command: mcpgatewaytest.Node(t),
			Args:    []string{mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"},
			Env:     map[string]string{"HERMES_MCP_TEST_VAR": "visible"},
		}},
	}
}

func httpSpec(name, prefix, url string) *pb.ServerSpec {
	return &pb.ServerSpec{Name: name, Prefix: prefix, Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: url}}}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int { return mcpgatewaytest.FreePort(t) }

// startEverythingHTTP runs the everything server's Streamable HTTP transport on port and waits
// until it accepts connections.
func startEverythingHTTP(t testing.TB, port int) *exec.Cmd {
	return mcpgatewaytest.StartEverythingHTTP(t, port)
}

// TestHelperMCPServer is the helper server that HelperStdio and StartHelperHTTP run; it does
// nothing in a normal test run.
func TestHelperMCPServer(t *testing.T) { mcpgatewaytest.ServeHelper(t) }

// addReady adds a server, waits for its first connection and requires it to be ready.
func addReady(t testing.TB, c pb.MCPGatewayServiceClient, spec *pb.ServerSpec) *pb.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := c.AddServer(ctx, &pb.AddServerRequest{Spec: spec, Wait: true})
	if err != nil {
		t.Fatalf("AddServer(%s): %v", spec.Name, err)
	}
	if s := resp.GetServer(); s.GetState() != pb.ServerState_SERVER_STATE_READY {
		t.Fatalf("server %s is %s after the first attempt: %s", spec.Name, s.GetState(), s.GetLastError())
	}
	return resp.GetServer()
}

func call(t *testing.T, c pb.MCPGatewayServiceClient, name, args string) *pb.CallToolResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.CallTool(ctx, &pb.CallToolRequest{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s): %v", name, err)
	}
	return resp
}

func callTimeout(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// server returns one server from ListServers.
func serverState(t *testing.T, c pb.MCPGatewayServiceClient, name string) *pb.Server {
	t.Helper()
	resp, err := c.ListServers(context.Background(), &pb.ListServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetServers() {
		if s.GetSpec().GetName() == name {
			return s
		}
	}
	t.Fatalf("server %s not listed", name)
	return nil
}

func toolNames(tools []*pb.MCPTool) map[string]string {
	out := map[string]string{}
	for _, tl := range tools {
		out[tl.GetName()] = tl.GetOriginalName()
	}
	return out
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(stat))
	return len(fields) > 2 && fields[2] == "Z"
}

// startToolService serves a tool service (bbolt registry, egress to loopback) whose MCP tools
// go to the gateway gw holds once it is stored; the gateway registers its tools there.
func startToolService(t *testing.T, gw *atomic.Pointer[pb.MCPGatewayServiceClient]) toolsv1.ToolServiceClient {
	t.Helper()
	tok, err := tokenizer.New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	store, err := tools.OpenBoltStore(filepath.Join(t.TempDir(), "tools.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	eg, err := egress.New([]string{"127.0.0.1:*"})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := tools.NewService(tools.DefaultConfig(), tools.Options{Store: store, Tokenizer: tok, Logger: testLogger(t), Egress: eg,
		MCP: func() (tools.MCPCaller, error) { return *gw.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(rpc.ServerOptions{Logger: testLogger(t), ShutdownTimeout: time.Second})
	srv.Register(&toolsv1.ToolService_ServiceDesc, svc)
	return toolsv1.NewToolServiceClient(testenv.Serve(t, srv))
}
