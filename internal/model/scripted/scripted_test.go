package scripted_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
)

// The scripted model is exercised through the production client only.
func newClient(t *testing.T, h scripted.Handler) (*model.Client, *scripted.Server) {
	t.Helper()
	srv, err := scripted.New(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := model.New(model.Config{BaseURL: srv.URL(), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

// TestConversation plays a tool loop: the handler decides from what the request contains, the
// way the demo's script does, and the server records every request.
func TestConversation(t *testing.T) {
	h := func(req scripted.Request) scripted.Reply {
		if res := req.ToolResults(); len(res) > 0 {
			return scripted.Text("found: " + res[0].Content)
		}
		if req.HasTool("search") {
			return scripted.Calls(scripted.Call("search", map[string]any{"q": req.LastUser()}))
		}
		return scripted.Text("no tools")
	}
	c, srv := newClient(t, h)
	ctx := context.Background()
	msgs := []model.Message{{Role: model.RoleUser, Content: "川菜馆"}}
	tools := []model.Tool{{Name: "search", Parameters: []byte(`{"type":"object"}`)}}
	first, err := c.Stream(ctx, model.Request{Messages: msgs, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []model.ToolCall{{ID: "call_1_0", Name: "search", Arguments: `{"q":"川菜馆"}`}}
	if diff := cmp.Diff(want, first.ToolCalls); diff != "" {
		t.Fatalf("tool calls (-want +got):\n%s", diff)
	}
	msgs = append(msgs,
		model.Message{Role: model.RoleAssistant, ToolCalls: first.ToolCalls},
		model.Message{Role: model.RoleTool, ToolCallID: "call_1_0", Content: "蜀香园"})
	second, err := c.Stream(ctx, model.Request{Messages: msgs, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Content != "found: 蜀香园" {
		t.Errorf("content = %q", second.Content)
	}
	// The second request repeats the first one's messages, so a prefix cache would hold them.
	if second.Usage.CachedTokens == 0 || second.Usage.CachedTokens >= second.Usage.PromptTokens {
		t.Errorf("usage = %+v, want a cached prefix smaller than the prompt", second.Usage)
	}
	if first.Usage.CachedTokens != 0 {
		t.Errorf("first request cached %d tokens, want 0", first.Usage.CachedTokens)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].N != 1 || reqs[1].N != 2 || len(reqs[1].Messages) != 3 {
		t.Fatalf("recorded %+v, want two numbered requests", reqs)
	}
	if got := reqs[1].ToolResults(); len(got) != 1 || got[0].ToolCallID != "call_1_0" {
		t.Errorf("ToolResults = %+v", got)
	}
}

func TestCallArguments(t *testing.T) {
	tests := []struct {
		args any
		want string
	}{
		{`{"a":1}`, `{"a":1}`},
		{[]byte(`{"b":2}`), `{"b":2}`},
		{map[string]int{"c": 3}, `{"c":3}`},
		{`{"broken":`, `{"broken":`},
	}
	for _, tc := range tests {
		if got := scripted.Call("f", tc.args).Arguments; got != tc.want {
			t.Errorf("Call(%v) arguments = %q, want %q", tc.args, got, tc.want)
		}
	}
}
