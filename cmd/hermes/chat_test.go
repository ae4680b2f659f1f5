package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/demo"
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
	script := strings.Join([]string{
		demo.FirstMessage,
		"/sessions",
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
	code := run(cctx, []string{"chat", "--addr", st.App.Addr()}, strings.NewReader(script), &out, &errb, env)
	got := out.String()
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), got)
	}
	for _, want := range []string{
		"New session ",
		"for chat-user",
		"memories recalled: none",
		"→ locallife_search_restaurant {\"restaurant_name\":\"蜀香园\"}",
		"← locallife_search_restaurant ok",
		"assistant › 蜀香园在朝阳区建国路 88 号",
		"context for step 1: ",
		"done in 2 steps · usage: ",
		"unknown command /bogus",
		"usage: /use <session id>",
		"forgot ",
		"no memories yet",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "New session ") != 2 || !strings.Contains(got, "  * ") {
		t.Errorf("want two sessions and the current one marked:\n%s", got)
	}
}
