package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/demo"
	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// TestChat drives `hermes chat` against a running embedded stack with the demo's scripted
// model and restaurant MCP server.
func TestChat(t *testing.T) {
	ctx := context.Background()
	st, err := demo.StartStack(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
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
	conn, err := rpc.Dial(st.App.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stdin, feed := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(cctx, []string{"chat", "--addr", st.App.Addr()}, stdin, &out, &errb, env)
	}()
	_, _ = io.WriteString(feed, first)
	if _, err := demo.WaitForMemory(cctx, memoryv1.NewMemoryServiceClient(conn), "chat-user", 30*time.Second); err != nil {
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
