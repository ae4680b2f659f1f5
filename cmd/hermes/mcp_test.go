package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/testenv"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// startToolService starts a Hermes process with the tool service on listen.
func startToolService(t *testing.T, listen, dataDir string) *hermestest.App {
	t.Helper()
	cfg := hermestest.Config(t, "--listen="+listen, "--data-dir="+dataDir, "--target=tools", "--mcpgateway-addr=127.0.0.1:1")
	return hermestest.StartApp(t, cfg, slog.New(slog.DiscardHandler))
}

// serveStdio runs `hermes mcp serve --stdio` with args in the background and connects the Go
// SDK's MCP client to its stdin and stdout; done gets the exit status.
func serveStdio(ctx context.Context, t *testing.T, args ...string) (sess *mcp.ClientSession, done <-chan int, stderr *bytes.Buffer) {
	t.Helper()
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	stderr = &bytes.Buffer{}
	exit := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"mcp", "serve", "--stdio"}, args...), serverIn, serverOut, stderr,
			func(k string) string { return map[string]string{"HERMES_LISTEN": "0.0.0.0:7070"}[k] })
		_ = serverOut.Close()
		exit <- code
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatalf("connect: %v (stderr: %s)", err, stderr.String())
	}
	return sess, exit, stderr
}

// TestMCPServeStdio runs `hermes mcp serve --stdio` against a Hermes process and drives it with
// the Go SDK's MCP client over the command's stdin and stdout.
func TestMCPServeStdio(t *testing.T) {
	a := startToolService(t, "127.0.0.1:0", t.TempDir())
	defer func() { _ = a.Stop() }()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, done, stderr := serveStdio(ctx, t, "--tools-addr", a.Addr())
	var names []string
	for tl, err := range sess.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tl.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "current_time") {
		t.Fatalf("tools over stdio: %v", names)
	}
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "current_time", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("current_time over stdio: %+v, %v", res, err)
	}
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "current_time", Arguments: map[string]any{"timezone": 7}})
	if err != nil || !res.IsError {
		t.Errorf("invalid arguments over stdio: %+v, %v; want an isError result", res, err)
	}
	_ = sess.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("hermes mcp serve --stdio exited %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("hermes mcp serve --stdio did not exit when the client closed stdin")
	}
}

func TestMCPServeUsage(t *testing.T) {
	for _, args := range [][]string{{"mcp"}, {"mcp", "serve"}, {"mcp", "serve", "--stdio", "extra"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &out, &errb, func(string) string { return "" }); code != 2 {
			t.Errorf("hermes %v exited %d, want 2 (usage): %s", args, code, errb.String())
		}
	}
}

// TestMCPServeStdioToolServiceDown: with no tool service at start, `hermes mcp serve --stdio`
// exits with status 1 and one line that says why, instead of serving an empty tool list.
func TestMCPServeStdioToolServiceDown(t *testing.T) {
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, []string{"mcp", "serve", "--stdio", "--tools-addr", testenv.ClosedAddr(t), "--tools-wait", "300ms"},
		strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "tool service at 127.0.0.1:") || !strings.Contains(lines[0], "is unreachable") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout (the protocol stream) got %q", stdout.String())
	}
}

// TestMCPServeStdioOutage: when the tool service goes away after the start, the session stays
// up, the tool list stays served, each call answers with an error that says what happened, and
// calls work again once the tool service is back.
func TestMCPServeStdioOutage(t *testing.T) {
	addr := testenv.ClosedAddr(t)
	dataDir := t.TempDir()
	a := startToolService(t, addr, dataDir)
	stopped := false
	defer func() {
		if !stopped {
			_ = a.Stop()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sess, _, _ := serveStdio(ctx, t, "--tools-addr", addr, "--mcpgateway.tools-refresh", "100ms")
	defer sess.Close()
	call := func() *mcp.CallToolResult {
		t.Helper()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "current_time", Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("current_time: %v", err)
		}
		return res
	}
	if res := call(); res.IsError {
		t.Fatalf("current_time with the tool service up: %+v", res.Content)
	}

	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	res := call()
	if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || !strings.Contains(text, "tool service is unavailable") {
		t.Errorf("current_time with the tool service down: isError %v %q", res.IsError, text)
	}
	if tools, err := sess.ListTools(ctx, nil); err != nil || len(tools.Tools) == 0 {
		t.Errorf("tools/list with the tool service down: %+v, %v; want the last list", tools, err)
	}

	a = startToolService(t, addr, dataDir)
	stopped = false
	testenv.WaitFor(t, 60*time.Second, "calls to work again after the tool service is back", func() bool {
		return !call().IsError
	})
}
