package mcpgateway

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// TestSameToolsTwoServers runs the everything server twice, over stdio and over Streamable
// HTTP, under two prefixes: the same tool names live side by side.
func TestSameToolsTwoServers(t *testing.T) {
	c, _ := startGateway(t, testConfig(), Options{})
	port := freePort(t)
	startEverythingHTTP(t, port)
	addReady(t, c, everythingStdio(t, "ev", "ev"))
	addReady(t, c, httpSpec("evh", "evh", fmt.Sprintf("http://127.0.0.1:%d/mcp", port)))

	tools, err := c.ListTools(context.Background(), &pb.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(tools.GetTools())
	for _, n := range []string{"ev_echo", "evh_echo", "ev_get-sum", "evh_get-sum"} {
		if _, ok := names[n]; !ok {
			t.Errorf("%s missing from %v", n, names)
		}
	}
	for _, n := range []string{"ev_echo", "evh_echo"} {
		if r := call(t, c, n, `{"message":"`+n+`"}`); !r.GetSuccess() || r.GetOutput() != "Echo: "+n {
			t.Errorf("%s = %+v", n, r)
		}
	}
	// A prefix is a namespace: a third server may not take one in use.
	spec := everythingStdio(t, "ev2", "ev")
	_, err = c.AddServer(context.Background(), &pb.AddServerRequest{Spec: spec})
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("AddServer with a prefix in use: %v, want AlreadyExists", err)
	}
	if s := serverState(t, c, "evh"); s.GetPid() != 0 || s.GetProtocolVersion() == "" {
		t.Errorf("HTTP server state = %+v", s)
	}
}

// TestKilledServerComesBack kills the everything server's process mid-session: its tools
// answer "unavailable" at once (not after the 20 s call timeout), another server keeps
// working, and the killed one is reconnected and answers again.
func TestKilledServerComesBack(t *testing.T) {
	c, _ := startGateway(t, testConfig(), Options{})
	first := addReady(t, c, everythingStdio(t, "ev", "ev"))
	addReady(t, c, everythingStdio(t, "other", "other"))
	if r := call(t, c, "ev_get-sum", `{"a":1,"b":2}`); !r.GetSuccess() {
		t.Fatalf("before the kill: %+v", r)
	}
	pid := int(first.GetPid())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the gateway to notice the exit", func() bool {
		return serverState(t, c, "ev").GetPid() != int32(pid)
	})
	// 5 s is far below the call timeout: a call that hung would miss it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	r, err := c.CallTool(ctx, &pb.CallToolRequest{Name: "ev_get-sum", Arguments: `{"a":1,"b":2}`})
	cancel()
	if err != nil {
		t.Fatalf("CallTool while the server is down: %v", err)
	}
	if !r.GetSuccess() && r.GetErrorCode() != codeUnavailable {
		t.Errorf("while down: %+v, want error_code unavailable (or success once reconnected)", r)
	}
	if r := call(t, c, "other_get-sum", `{"a":2,"b":2}`); !r.GetSuccess() {
		t.Errorf("the other server is affected: %+v", r)
	}
	testenv.WaitFor(t, 60*time.Second, "the server to be reconnected", func() bool {
		s := serverState(t, c, "ev")
		return s.GetState() == pb.ServerState_SERVER_STATE_READY && s.GetPid() != 0 && s.GetPid() != int32(pid)
	})
	s := serverState(t, c, "ev")
	if s.GetReconnects() < 1 {
		t.Errorf("reconnects = %d after a kill", s.GetReconnects())
	}
	if r := call(t, c, "ev_get-sum", `{"a":1,"b":2}`); !r.GetSuccess() || r.GetOutput() != "The sum of 1 and 2 is 3." {
		t.Errorf("after reconnecting: %+v", r)
	}
}

// TestUnavailableIsImmediate checks the answer while a server is down: a killed server's tools
// answer "unavailable" with the reason, without waiting.
func TestUnavailableIsImmediate(t *testing.T) {
	cfg := testConfig()
	cfg.ReconnectMin, cfg.ReconnectMax = 30*time.Second, 30*time.Second // stay down for the test
	c, _ := startGateway(t, cfg, Options{})
	first := addReady(t, c, everythingStdio(t, "ev", "ev"))
	if err := syscall.Kill(int(first.GetPid()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the server to be failed", func() bool {
		return serverState(t, c, "ev").GetState() == pb.ServerState_SERVER_STATE_FAILED
	})
	s := serverState(t, c, "ev")
	if s.GetLastError() == "" || s.GetNextRetryAt() == nil {
		t.Errorf("failed server state = %+v, want last_error and next_retry_at", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := c.CallTool(ctx, &pb.CallToolRequest{Name: "ev_echo", Arguments: `{"message":"x"}`})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if r.GetSuccess() || r.GetErrorCode() != codeUnavailable {
		t.Fatalf("CallTool on a failed server = %+v, want unavailable", r)
	}
	_, err = c.ListResources(ctx, &pb.ListResourcesRequest{Server: "ev"})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("ListResources on a failed server: %v, want Unavailable", err)
	}
}

// TestHungServerIsReplaced stops the server process (SIGSTOP): pings fail, the server is marked
// failed so calls answer at once, the hung process is killed, and a new one takes its place.
func TestHungServerIsReplaced(t *testing.T) {
	cfg := testConfig()
	cfg.PingInterval, cfg.PingTimeout = 200*time.Millisecond, 300*time.Millisecond
	c, _ := startGateway(t, cfg, Options{})
	first := addReady(t, c, everythingStdio(t, "ev", "ev"))
	pid := int(first.GetPid())
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	testenv.WaitFor(t, 10*time.Second, "the hung server to be given up", func() bool {
		return serverState(t, c, "ev").GetPid() != int32(pid)
	})
	testenv.WaitFor(t, 10*time.Second, "the hung process to be killed", func() bool { return processGone(pid) })
	testenv.WaitFor(t, 60*time.Second, "a new server process", func() bool {
		s := serverState(t, c, "ev")
		return s.GetState() == pb.ServerState_SERVER_STATE_READY && s.GetPid() != 0
	})
	if r := call(t, c, "ev_get-sum", `{"a":4,"b":4}`); !r.GetSuccess() {
		t.Errorf("after replacing the hung server: %+v", r)
	}
}

// TestHTTPServerRestart restarts the everything server behind a Streamable HTTP endpoint: the
// gateway's session is gone with it, and the gateway opens a new one.
func TestHTTPServerRestart(t *testing.T) {
	c, _ := startGateway(t, testConfig(), Options{})
	testHTTPServerRestart(t, c)
}

// TestHTTPServerRestartedAtOnce is defect 7: with ready-wait, the first call after an HTTP
// server restarted at once finds the session gone, reconnects at once and succeeds (the request
// never reached the old server, so sending it again is safe).
func TestHTTPServerRestartedAtOnce(t *testing.T) {
	cfg := testConfig()
	cfg.ReadyWait = 10 * time.Second
	cfg.ReconnectMin, cfg.ReconnectMax = 500*time.Millisecond, 30*time.Second
	c, _ := startGateway(t, cfg, Options{})
	port := freePort(t)
	cmd := startEverythingHTTP(t, port)
	addReady(t, c, httpSpec("evh", "evh", fmt.Sprintf("http://127.0.0.1:%d/mcp", port)))
	_ = cmd.Process.Kill()
	testenv.WaitFor(t, 30*time.Second, "the old server to stop listening", func() bool {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err != nil
	})
	startEverythingHTTP(t, port)
	r := call(t, c, "evh_get-sum", `{"a":2,"b":2}`)
	if !r.GetSuccess() {
		t.Fatalf("the first call after the restart: %+v", r)
	}
}

func testHTTPServerRestart(t *testing.T, c pb.MCPGatewayServiceClient) {
	port := freePort(t)
	cmd := startEverythingHTTP(t, port)
	addReady(t, c, httpSpec("evh", "evh", fmt.Sprintf("http://127.0.0.1:%d/mcp", port)))
	if r := call(t, c, "evh_get-sum", `{"a":1,"b":1}`); !r.GetSuccess() {
		t.Fatalf("before the restart: %+v", r)
	}
	_ = cmd.Process.Kill()
	startEverythingHTTP(t, port)
	// The first call after the restart may find the old session gone; the gateway then probes,
	// reconnects, and the tool answers again.
	testenv.WaitFor(t, 60*time.Second, "the tool to answer on a new session", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.CallTool(ctx, &pb.CallToolRequest{Name: "evh_get-sum", Arguments: `{"a":2,"b":2}`})
		if err != nil {
			t.Fatalf("CallTool: %v", err)
		}
		if !r.GetSuccess() && r.GetErrorCode() != codeUnavailable {
			t.Fatalf("after the restart: %+v, want success or unavailable", r)
		}
		return r.GetSuccess()
	})
	if s := serverState(t, c, "evh"); s.GetReconnects() < 1 {
		t.Errorf("reconnects = %d after the HTTP server restarted", s.GetReconnects())
	}
}
