package tools

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/testenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

func TestRegisterVersions(t *testing.T) {
	c, _ := newClient(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	spec := httpSpec("weather", "http://127.0.0.1:1/w", `{"type":"object","properties":{"city":{"type":"string"}}}`)
	spec.Groups = []string{"weather", "travel", "weather"}

	r1, err := c.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if !r1.GetChanged() || r1.GetTool().GetVersion() != 1 || r1.GetTool().GetSource() != "api" {
		t.Errorf("first registration: %v", r1)
	}
	if diff := cmp.Diff([]string{"travel", "weather"}, r1.GetTool().GetSpec().GetGroups()); diff != "" {
		t.Errorf("groups are not normalized (-want +got):\n%s", diff)
	}
	// The same spec, formatted differently and with groups in another order, changes nothing.
	same := httpSpec("weather", "http://127.0.0.1:1/w", `{ "type": "object", "properties": { "city": { "type": "string" } } }`)
	same.Groups = []string{"travel", "weather"}
	r2, err := c.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: same})
	if err != nil || r2.GetChanged() || r2.GetTool().GetVersion() != 1 {
		t.Errorf("same spec again: %v %v", r2, err)
	}
	spec.Description = "Current weather for a city."
	r3, err := c.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: spec})
	if err != nil || !r3.GetChanged() || r3.GetTool().GetVersion() != 2 {
		t.Errorf("changed spec: %v %v", r3, err)
	}
	if !r3.GetTool().GetCreatedAt().AsTime().Equal(r1.GetTool().GetCreatedAt().AsTime()) {
		t.Error("created_at moved")
	}
	got, err := c.GetTool(ctx, &toolsv1.GetToolRequest{Name: "weather"})
	if err != nil || got.GetTool().GetVersion() != 2 || got.GetTool().GetSpec().GetDescription() != "Current weather for a city." {
		t.Errorf("GetTool: %v %v", got, err)
	}
	// Results name the version that ran or rejected the call.
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "weather", Arguments: `{"city":1.5e400}`})
	if res.GetToolVersion() != 2 {
		t.Errorf("tool_version %d", res.GetToolVersion())
	}
	if _, err := c.UnregisterTool(ctx, &toolsv1.UnregisterToolRequest{Name: "weather"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTool(ctx, &toolsv1.GetToolRequest{Name: "weather"}); status.Code(err) != codes.NotFound {
		t.Errorf("after unregister: %v", err)
	}
	if _, err := c.UnregisterTool(ctx, &toolsv1.UnregisterToolRequest{Name: "weather"}); status.Code(err) != codes.NotFound {
		t.Errorf("unregister twice: %v", err)
	}
}

func TestListTools(t *testing.T) {
	c, _ := newClient(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	for i := range 25 {
		spec := httpSpec(fmt.Sprintf("tool_%02d", i), "http://127.0.0.1:1/", emptyObjectSchema)
		spec.Groups = []string{[]string{"red", "green", "blue"}[i%3]}
		if i%5 == 0 {
			spec.Groups = append(spec.Groups, "five")
		}
		mustRegister(t, c, spec)
	}
	names := func(ts []*toolsv1.Tool) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.GetSpec().GetName())
		}
		return out
	}
	// Pages of 10 cover every tool once, in name order.
	var all []string
	token := ""
	pages := 0
	for {
		resp, err := c.ListTools(ctx, &toolsv1.ListToolsRequest{PageSize: 10, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, names(resp.GetTools())...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(all) != 25 || pages != 3 || all[0] != "tool_00" || all[24] != "tool_24" {
		t.Errorf("%d tools in %d pages: %v", len(all), pages, all)
	}
	resp, err := c.ListTools(ctx, &toolsv1.ListToolsRequest{Groups: []string{"five", "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tool_00", "tool_02", "tool_05", "tool_08", "tool_10", "tool_11", "tool_14", "tool_15", "tool_17", "tool_20", "tool_23"}
	if diff := cmp.Diff(want, names(resp.GetTools())); diff != "" {
		t.Errorf("by groups (-want +got):\n%s", diff)
	}
	resp, _ = c.ListTools(ctx, &toolsv1.ListToolsRequest{Names: []string{"tool_03", "nope", "tool_01"}})
	if diff := cmp.Diff([]string{"tool_01", "tool_03"}, names(resp.GetTools())); diff != "" {
		t.Errorf("by names (-want +got):\n%s", diff)
	}
	for _, bad := range []*toolsv1.ListToolsRequest{{PageSize: -1}, {PageSize: 5000}, {PageToken: "!!"}} {
		if _, err := c.ListTools(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

func TestRequestValidation(t *testing.T) {
	c, _ := newClient(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	long := strings.Repeat("x", 300)
	checks := []struct {
		name string
		call func() error
	}{
		{"register without spec", func() error { _, err := c.RegisterTool(ctx, &toolsv1.RegisterToolRequest{}); return err }},
		{"execute without name", func() error { _, err := c.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{}); return err }},
		{"execute with a long key", func() error {
			_, err := c.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: "x", IdempotencyKey: long})
			return err
		}},
		{"get without name", func() error { _, err := c.GetTool(ctx, &toolsv1.GetToolRequest{}); return err }},
		{"unregister without name", func() error { _, err := c.UnregisterTool(ctx, &toolsv1.UnregisterToolRequest{}); return err }},
		{"select with negative max", func() error { _, err := c.SelectTools(ctx, &toolsv1.SelectToolsRequest{MaxTools: -1}); return err }},
	}
	for _, ch := range checks {
		if err := ch.call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", ch.name, err)
		}
	}
	// Oversized arguments are a result the model can act on, not an RPC error.
	mustRegister(t, c, httpSpec("t", "http://127.0.0.1:1/", emptyObjectSchema))
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "t", Arguments: `{"a":"` + strings.Repeat("x", 300<<10) + `"}`})
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_VALIDATION || !strings.Contains(res.GetError().GetMessage(), "at most 262144 are accepted") {
		t.Errorf("oversized arguments: %v", res.GetError())
	}
}

// TestReplicasShareRegistry: a tool registered on one replica is listed and executed on another,
// which compiles the stored schema on first use.
func TestReplicasShareRegistry(t *testing.T) {
	srv, _ := echoServer(t)
	rdb, prefix := testenv.Redis(t)
	a := serve(t, newTestService(t, NewRedisStore(rdb, prefix), Options{}))
	svcB := newTestService(t, NewRedisStore(rdb, prefix), Options{})
	b := serve(t, svcB)

	mustRegister(t, a, httpSpec("echo", srv.URL, `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`))
	res := execute(t, b, &toolsv1.ExecuteToolRequest{Name: "echo", Arguments: `{"n":"5"}`})
	if !res.GetSuccess() || res.GetOutput() != `{"n":5}` {
		t.Fatalf("on the other replica: %v", res)
	}
	svcB.reg.mu.Lock()
	cached := len(svcB.reg.schemas)
	svcB.reg.mu.Unlock()
	if cached != 1 {
		t.Errorf("replica b compiled %d schemas, want 1", cached)
	}
	// A new version registered on a is validated with the new schema on b.
	mustRegister(t, a, httpSpec("echo", srv.URL, `{"type":"object","properties":{"n":{"type":"string"}},"required":["n"]}`))
	res = execute(t, b, &toolsv1.ExecuteToolRequest{Name: "echo", Arguments: `{"n":5}`})
	if !res.GetSuccess() || res.GetOutput() != `{"n":"5"}` || res.GetToolVersion() != 2 {
		t.Errorf("after the new version: %v", res)
	}
	list, err := b.ListTools(ctxTimeout(t, 5*time.Second), &toolsv1.ListToolsRequest{})
	if err != nil || len(list.GetTools()) != 1 || list.GetTools()[0].GetVersion() != 2 {
		t.Errorf("list on b: %v %v", list, err)
	}
	if _, err := a.UnregisterTool(ctxTimeout(t, 5*time.Second), &toolsv1.UnregisterToolRequest{Name: "echo"}); err != nil {
		t.Fatal(err)
	}
	if res := execute(t, b, &toolsv1.ExecuteToolRequest{Name: "echo", Arguments: `{}`}); res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNKNOWN_TOOL {
		t.Errorf("after unregister on a: %v", res)
	}
}

func TestRedisDownIsUnavailable(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	store := NewRedisStore(rdb, prefix)
	c := serve(t, newTestService(t, store, Options{}))
	mustRegister(t, c, httpSpec("t", "http://127.0.0.1:1/", emptyObjectSchema))
	broken := NewRedisStore(testenv.DownRedis(t), prefix)
	cb := serve(t, newTestService(t, broken, Options{}))
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := cb.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: "t"}); status.Code(err) != codes.Unavailable {
		t.Errorf("execute: %v", err)
	}
	if _, err := cb.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: httpSpec("u", "http://127.0.0.1:1/", emptyObjectSchema)}); status.Code(err) != codes.Unavailable {
		t.Errorf("register: %v", err)
	}
	if _, err := cb.ListTools(ctx, &toolsv1.ListToolsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("list: %v", err)
	}
}
