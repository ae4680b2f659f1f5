package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

const reservationToolSchema = `{"type":"object","properties":{
  "restaurant_name":{"type":"string","description":"the restaurant"},
  "time":{"type":"string"},
  "party_size":{"type":"integer","minimum":1}},
 "required":["restaurant_name","time","party_size"]}`

// TestExplicitBeatsMemory replays issue 12's scenario through RunTurn with a scripted model that,
// asked to book, always leaves restaurant_name out: the restaurant the user turns down is never
// booked (the call is held and the model told why), an unrelated greeting or weather question
// gets no memory in its context, and a plain reference to "that place" still fills the
// remembered name.
func TestExplicitBeatsMemory(t *testing.T) {
	model := func(req scripted.Request) scripted.Reply {
		user := req.LastUser()
		last := req.LastMessage()
		if strings.Contains(user, "订") && last.Role == "user" {
			return scripted.Calls(scripted.Call("make_reservation", map[string]any{"time": "明天 19:00", "party_size": 2}))
		}
		if last.Role == "tool" {
			return scripted.Text("（脚本模型）工具结果：" + last.Content)
		}
		return scripted.Text("（脚本模型）你好。")
	}
	s := startStack(t, model, stackOptions{embedded: true})
	ctx := context.Background()
	const user = "explicit-user"
	if _, err := s.mem.Remember(ctx, &memoryv1.RememberRequest{UserId: user, Type: memoryv1.MemoryType_MEMORY_TYPE_PREFERENCE,
		Content: "用户喜欢吃川菜，最常去的川菜馆是蜀香园", Subject: "restaurant", Attributes: map[string]string{"restaurant_name": "蜀香园"},
		Keywords: []string{"订餐厅", "订位"}}); err != nil {
		t.Fatal(err)
	}
	var webhook counter
	s.registerHTTPTool("make_reservation", reservationToolSchema, false, webhook.handler(func(map[string]any) any {
		return map[string]any{"confirmation": "R-1"}
	}))

	// 1. The user turns the remembered restaurant down: nothing is booked there.
	r := s.run(ctx, s.newSession(user), user, "这次不去蜀香园了，去川味轩吧，帮我订个明天晚上7点两个人的位置", nil)
	if r.Completed == nil {
		t.Fatalf("turn failed: %v", r.Failed)
	}
	if len(r.Calls) != 1 || !r.Calls[0].GetHeld() || len(r.Calls[0].GetFilled()) != 0 {
		t.Fatalf("calls %v, want one held call with nothing filled", r.Calls)
	}
	if d := r.Calls[0].GetFillDecisions(); len(d) != 1 || d[0].GetName() != "restaurant_name" || d[0].GetOutcome() != "rejected" || d[0].GetValue() != `"蜀香园"` {
		t.Errorf("fill decisions %v, want restaurant_name rejected", d)
	}
	if res := r.Results[0]; res.GetSuccess() || !strings.Contains(res.GetError(), "restaurant_name") || !strings.Contains(res.GetError(), "蜀香园") {
		t.Errorf("held result %v, want a failure naming the argument and the remembered value", res)
	}
	if n := webhook.calls.Load(); n != 0 {
		t.Fatalf("the reservation webhook ran %d times: %v", n, webhook.bodies)
	}

	// 2. Unrelated turns get no memory in their context.
	for _, text := range []string{"hello, what can you do?", "今天天气怎么样？"} {
		r := s.run(ctx, s.newSession(user), user, text, nil)
		if r.Completed == nil {
			t.Fatalf("turn %q failed: %v", text, r.Failed)
		}
		if len(r.Memories) != 0 {
			t.Errorf("%q recalled %v", text, r.Memories)
		}
		for _, c := range r.Contexts {
			if c.GetTokens().GetMemory() != 0 {
				t.Errorf("%q: %d memory tokens in the context", text, c.GetTokens().GetMemory())
			}
		}
	}

	// 3. A plain reference still fills the remembered name.
	r = s.run(ctx, s.newSession(user), user, "我上次提到的那家川菜馆，帮我订个明天晚上7点两个人的位置", nil)
	if r.Completed == nil {
		t.Fatalf("turn failed: %v", r.Failed)
	}
	if len(r.Calls) != 1 || r.Calls[0].GetHeld() || len(r.Calls[0].GetFilled()) != 1 || r.Calls[0].GetFilled()[0].GetValue() != `"蜀香园"` {
		t.Fatalf("calls %v, want restaurant_name filled with 蜀香园", r.Calls)
	}
	if d := r.Calls[0].GetFillDecisions(); len(d) != 1 || d[0].GetOutcome() != "filled" || d[0].GetReason() == "" {
		t.Errorf("fill decisions %v", d)
	}
	webhook.mu.Lock()
	defer webhook.mu.Unlock()
	if len(webhook.bodies) != 1 || !strings.Contains(webhook.bodies[0], "蜀香园") || !strings.Contains(webhook.bodies[0], "明天 19:00") {
		t.Errorf("webhook bodies %v, want one booking at 蜀香园 with the explicit time", webhook.bodies)
	}
}
