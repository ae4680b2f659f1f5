package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

const (
	cartSchema   = `{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1}},"required":["sku","qty"]}`
	reportSchema = `{"type":"object","properties":{"day":{"type":"integer"}},"required":["day"]}`
)

// bigReport is a JSON tool output of about 2,000 tokens, like the article's API responses.
func bigReport(day int) map[string]any {
	rows := make([]map[string]any, 0, 60)
	for i := range 60 {
		rows = append(rows, map[string]any{"order_id": fmt.Sprintf("O-%d-%04d", day, i), "sku": fmt.Sprintf("SKU-%03d", (day*7+i)%500), "qty": i%5 + 1, "status": "shipped", "warehouse": "北京-顺义"})
	}
	return map[string]any{"day": day, "orders": rows}
}

// forgetfulModel plays a shopper's assistant. It adds A1 to the cart when asked; on "checkout"
// it looks for the add in what it can see (the window or the orchestrator's task state) and,
// when it finds it only in the task state, deliberately adds it again — the article's duplicate
// add-to-cart — so the test sees the idempotency key catch what the model got wrong.
func forgetfulModel(req scripted.Request) scripted.Reply {
	user := req.LastUser()
	results := req.ToolResults()
	switch {
	case len(results) > 0:
		return scripted.Text("ok")
	case strings.Contains(user, "add A1"):
		return scripted.Calls(scripted.Call("add_to_cart", `{"sku":"A1","qty":1}`))
	case strings.HasPrefix(user, "report"):
		var day int
		fmt.Sscanf(user, "report %d", &day)
		calls := []scripted.ToolCall{scripted.Call("get_report", map[string]int{"day": day})}
		if day%4 == 0 {
			// Some steps make two calls at once.
			calls = append(calls, scripted.Call("get_report", map[string]int{"day": day + 1000}))
		}
		return scripted.Calls(calls...)
	case strings.Contains(user, "checkout"):
		// The window no longer shows the add; the same step again, with the keys reordered.
		return scripted.Calls(scripted.Call("add_to_cart", `{ "qty": 1, "sku": "A1" }`))
	}
	return scripted.Text("noted")
}

// TestLongSession: 30 turns of ~2,000-token tool outputs under the default window (12 turns,
// 8,000 tokens). Trimming drops the early turns and the summary takes them in; every request the
// model gets is well-formed (each call followed by its result, even after a step that was
// stored without its result); the sticky fact and the task state survive; and the duplicate
// add-to-cart after trimming runs the tool once thanks to the derived idempotency key.
func TestLongSession(t *testing.T) {
	s := startStack(t, forgetfulModel, stackOptions{configure: func(c *app.Config) { c.Orchestrator.SummaryFailures = 1 }})
	cart := &counter{}
	s.registerHTTPTool("add_to_cart", cartSchema, true, cart.handler(func(map[string]any) any { return map[string]any{"cart_size": cart.calls.Load()} }))
	reports := &counter{}
	s.registerHTTPTool("get_report", reportSchema, false, reports.handler(func(in map[string]any) any {
		day, _ := in["day"].(float64)
		return bigReport(int(day))
	}))
	ctx := context.Background()
	sid := s.newSession("u1")

	first := s.run(ctx, sid, "u1", "please add A1 to my cart", nil)
	if first.Completed == nil || cart.calls.Load() != 1 {
		t.Fatalf("first turn %v/%v, cart endpoint %d", first.Completed, first.Failed, cart.calls.Load())
	}
	sticky := s.run(ctx, sid, "u1", "记住：我的会员号是 M-23891", &orchestratorv1.TurnOptions{Sticky: true})
	if sticky.Completed == nil {
		t.Fatal(sticky.Failed)
	}
	// A step an older process stored without its result (a crash between the two writes).
	_, err := s.sessions.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "u1", Messages: []*sessionv1.NewMessage{
		{Role: sessionv1.Role_ROLE_USER, Content: "report 0"},
		{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "orphan-call", ToolName: "get_report", Content: `{"day":0}`},
	}})
	if err != nil {
		t.Fatal(err)
	}
	summaries, repairs := 0, int32(0)
	for day := 1; day <= 28; day++ {
		res := s.run(ctx, sid, "u1", fmt.Sprintf("report %d", day), nil)
		if res.Completed == nil {
			t.Fatalf("day %d: %v", day, res.Failed)
		}
		for _, ev := range res.Events {
			if ev.GetSummary() != nil {
				summaries++
			}
			if c := ev.GetContext(); c != nil && c.GetRepairs() > repairs {
				repairs = c.GetRepairs()
			}
		}
	}
	final := s.run(ctx, sid, "u1", "checkout now", nil)
	if final.Completed == nil {
		t.Fatal(final.Failed)
	}

	reqs := s.model.Requests()
	for _, r := range reqs {
		if err := checkWellFormed(r); err != nil {
			t.Fatalf("request %d (%q) is not well-formed: %v", r.N, r.LastUser(), err)
		}
	}
	if repairs == 0 {
		t.Error("the session never reported repairing the stored call without a result")
	}
	if summaries == 0 {
		t.Error("no summary was extended although turns were trimmed")
	}
	var last scripted.Request
	for _, r := range reqs {
		if r.LastUser() == "checkout now" {
			last = r
			break
		}
	}
	sys := systemText(last)
	for _, m := range last.Messages {
		if m.Role == "user" && strings.Contains(m.Content, "add A1") {
			t.Fatal("the first turn is still in the window; the test needs it trimmed")
		}
	}
	if !strings.Contains(sys, "M-23891") {
		t.Errorf("the sticky fact is gone from the context:\n%s", sys)
	}
	if !strings.Contains(sys, `add_to_cart {"qty":1,"sku":"A1"}`) {
		t.Errorf("the task state does not show the finished add_to_cart:\n%s", sys)
	}
	if !strings.Contains(sys, "Summary of the earlier conversation") {
		t.Errorf("no rolling summary in the context:\n%s", sys)
	}
	// The duplicate step was replayed from the idempotency record, not run again.
	if cart.calls.Load() != 1 {
		t.Errorf("add_to_cart ran %d times, want 1", cart.calls.Load())
	}
	if len(final.Results) != 1 || !final.Results[0].GetReplayed() || first.Calls[0].GetIdempotencyKey() != final.Calls[0].GetIdempotencyKey() {
		t.Errorf("duplicate call: results %v, keys %q vs %q", final.Results, first.Calls[0].GetIdempotencyKey(), final.Calls[0].GetIdempotencyKey())
	}
	// Requests stayed bounded: the last one is far below the whole session.
	var total int
	for _, m := range s.messages(sid, "u1") {
		total += int(m.GetTokenCount())
	}
	ctxTokens := final.Contexts[0].GetTokens().GetTotal()
	if int(ctxTokens)*3 > total {
		t.Errorf("the last request has %d tokens of a %d-token session; want trimming to keep it well below", ctxTokens, total)
	}
	var resultEnv struct {
		Replayed bool `json:"replayed"`
	}
	msgs := s.messages(sid, "u1")
	_ = json.Unmarshal([]byte(msgs[len(msgs)-2].GetContent()), &resultEnv)
	if !resultEnv.Replayed {
		t.Errorf("the stored result does not say it was replayed: %s", msgs[len(msgs)-2].GetContent())
	}
}
