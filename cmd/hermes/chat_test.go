package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/app/demo/restaurant"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// TestChat drives `hermes chat` against a running embedded stack with the demo's scripted
// model and restaurant MCP server.
func TestChat(t *testing.T) {
	ctx := context.Background()
	st := startDemoStack(t)
	// The first turn, then — once the extractor has written its memory — the rest, so /memory
	// and /forget see a memory to list and to forget.
	first := demo.FirstMessage + "\n/sessions\n/context\n"
	rest := strings.Join([]string{
		"/memory",
		"/new",
		"/sticky 我的会员号是 M-23891",
		"/bogus",
		"/use",
		"/forget all",
		"/memory",
		"/quit",
	}, "\n") + "\n"
	var out, errb bytes.Buffer
	env := func(k string) string {
		if k == "HERMES_CHAT_USER" {
			return "chat-user"
		}
		return ""
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	stdin, feed := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(cctx, []string{"chat", "--addr", st.App.Addr()}, stdin, &out, &errb, env)
	}()
	_, _ = io.WriteString(feed, first)
	if _, err := demo.WaitForMemory(cctx, st.Memory, "chat-user", 30*time.Second); err != nil {
		t.Error(err)
	}
	_, _ = io.WriteString(feed, rest)
	_ = feed.Close()
	code := <-exit
	got := out.String()
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), got)
	}
	// The per-step token breakdown is for -v only.
	if strings.Contains(got, "context for step") || strings.Contains(got, "· usage: ") {
		t.Errorf("the default output shows the per-step breakdown:\n%s", got)
	}
	for _, want := range []string{
		"New session ",
		"for chat-user",
		"→ locallife_search_restaurant {\"restaurant_name\":\"蜀香园\"}",
		"← locallife_search_restaurant ok",
		"assistant › 蜀香园在朝阳区建国路 88 号",
		"done in 2 steps · ",
		"Context of the last model call (turn ",
		"  [SSS",
		"  T tool schemas ",
		"Memories recalled: none passed the similarity threshold",
		"Evicted: none (every turn of the session is in the window)",
		"you › /sessions\n",
		"unknown command /bogus",
		"usage: /use <session id>",
		"(preference, semantic) ",
		"restaurant_name=蜀香园]",
		"forgot 1 memory ",
		"no memories yet",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// The first /memory lists the memory; only the one after /forget finds none.
	if f, n := strings.Index(got, "forgot "), strings.Index(got, "no memories yet"); f < 0 || n < f {
		t.Errorf("\"no memories yet\" before /forget:\n%s", got)
	}
	if strings.Count(got, "New session ") != 2 || !strings.Contains(got, "  * ") {
		t.Errorf("want two sessions and the current one marked:\n%s", got)
	}
}

// startDemoStack starts the demo's stack: a monolithic Hermes with the demo's scripted model and
// its restaurant MCP server added to the gateway.
func startDemoStack(t *testing.T) *hermestest.Stack {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	rest, err := restaurant.Listen("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rest.Close)
	st := hermestest.Start(t, hermestest.Options{
		Model: demo.Model(), ScriptExtractor: true, Log: log,
		// The restaurant server listens on loopback: exactly that address is allowed.
		Args: []string{"--model=restaurant-demo", "--egress-allow=" + strings.TrimSuffix(strings.TrimPrefix(rest.URL(), "http://"), "/mcp")},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := st.Gateway.AddServer(ctx, &mcpgatewayv1.AddServerRequest{
		Spec: &mcpgatewayv1.ServerSpec{
			Name: demo.MCPServerName, Prefix: demo.MCPServerName,
			Transport: &mcpgatewayv1.ServerSpec_Http{Http: &mcpgatewayv1.HTTPTransport{Url: rest.URL()}},
		},
		Wait: true,
	})
	if err != nil || resp.GetServer().GetState() != mcpgatewayv1.ServerState_SERVER_STATE_READY {
		t.Fatalf("add the restaurant MCP server: %v %v", resp, err)
	}
	return st
}
