package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/app"
	"github.com/hermes-agent/hermes/internal/config"
)

// TestMCPServeStdio runs `hermes mcp serve --stdio` against a Hermes process and drives it with
// the Go SDK's MCP client over the command's stdin and stdout.
func TestMCPServeStdio(t *testing.T) {
	var cfg app.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := config.Load(fs, []string{"--listen=127.0.0.1:0", "--data-dir=" + t.TempDir(), "--target=tools", "--mcpgateway-addr=127.0.0.1:1"}, func(string) string { return "" }, "config"); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	defer func() { _ = a.Stop() }()

	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"mcp", "serve", "--stdio", "--tools-addr", a.Addr()}, serverIn, serverOut, &stderr,
			func(k string) string { return map[string]string{"HERMES_LISTEN": "0.0.0.0:7070"}[k] })
		_ = serverOut.Close()
		done <- code
	}()

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatalf("connect: %v (stderr: %s)", err, stderr.String())
	}
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
