package memory

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// turnMsg builds one message of a turn.
func turnMsg(role sessionv1.Role, kind sessionv1.MessageKind, content string) *eventsv1.TurnMessage {
	return &eventsv1.TurnMessage{Message: &sessionv1.Message{Id: newID(), Role: role, Kind: kind, Content: content},
		IsToolResult: kind == sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT}
}

func userSays(s string) *eventsv1.TurnMessage {
	return turnMsg(sessionv1.Role_ROLE_USER, sessionv1.MessageKind_MESSAGE_KIND_TEXT, s)
}

func assistantSays(s string) *eventsv1.TurnMessage {
	return turnMsg(sessionv1.Role_ROLE_ASSISTANT, sessionv1.MessageKind_MESSAGE_KIND_TEXT, s)
}

func recalledBlock(s string) *eventsv1.TurnMessage {
	m := turnMsg(sessionv1.Role_ROLE_SYSTEM, sessionv1.MessageKind_MESSAGE_KIND_TEXT, s)
	m.IsRecalledMemory = true
	return m
}

func toolResult(s string) *eventsv1.TurnMessage {
	return turnMsg(sessionv1.Role_ROLE_TOOL, sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, s)
}

func turn(user, session string, msgs ...*eventsv1.TurnMessage) *eventsv1.TurnFinished {
	return &eventsv1.TurnFinished{TurnId: "turn-" + newID()[:8], SessionId: session, UserId: user, Messages: msgs}
}

// memoriesJSON renders the extraction contract.
func memoriesJSON(items ...map[string]any) string {
	b, _ := json.Marshal(map[string]any{"memories": items})
	return string(b)
}

// byPrompt answers with the reply whose key occurs in the request's user message (the rendered
// turn); unknown turns get no memories.
func byPrompt(replies map[string]string) scripted.Handler {
	return func(req scripted.Request) scripted.Reply {
		p := req.LastUser()
		for k, r := range replies {
			if strings.Contains(p, k) {
				return scripted.Text(r)
			}
		}
		return scripted.Text(`{"memories":[]}`)
	}
}

func extract(t *testing.T, h *harness, tf *eventsv1.TurnFinished) *memoryv1.ExtractTurnResponse {
	t.Helper()
	resp, err := h.client.ExtractTurn(ctxT(t), &memoryv1.ExtractTurnRequest{Turn: tf})
	if err != nil {
		t.Fatalf("ExtractTurn: %v", err)
	}
	return resp
}

func outcomes(resp *memoryv1.ExtractTurnResponse) []string {
	var out []string
	for _, c := range resp.GetCandidates() {
		out = append(out, c.GetOutcome())
	}
	return out
}

// The article's restaurant example: 蜀香园 is mentioned in session 1; in session 2 a booking
// request recalls it with the attribute the orchestrator fills the missing argument from.
func TestExtractRestaurantExample(t *testing.T) {
	reply := "好的，以下是提取结果：\n```json\n" + memoriesJSON(map[string]any{
		"type": "preference", "content": "用户最常去的川菜馆是蜀香园", "confidence": "0.95", "subject": "Restaurant",
		"attributes": map[string]any{"restaurant_name": "蜀香园", "cuisine": "川菜"}, "keywords": []string{"订位", "订餐厅"},
	}) + "\n```\n希望有帮助！"
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			mc, srv := scriptedModel(t, byPrompt(map[string]string{"蜀香园": reply}))
			h := newHarness(t, b, harnessOpts{model: mc})
			t1 := turn("li", "session-1",
				userSays("我最常去的川菜馆是蜀香园，下次订位就订那家"),
				assistantSays("好的，我记住了，下次帮你订蜀香园。"))
			resp := extract(t, h, t1)
			if d := cmp.Diff([]string{"written"}, outcomes(resp)); d != "" {
				t.Fatalf("outcomes (-want +got):\n%s\n%v", d, resp)
			}
			m := resp.GetMemories()[0]
			want := map[string]string{"restaurant_name": "蜀香园", "cuisine": "川菜"}
			if d := cmp.Diff(want, m.GetAttributes()); d != "" {
				t.Errorf("attributes (-want +got):\n%s", d)
			}
			if m.GetTier() != memoryv1.Tier_TIER_SEMANTIC || m.GetSource() != memoryv1.Source_SOURCE_EXPLICIT || m.GetSubject() != "restaurant" ||
				m.GetSessionId() != "session-1" || m.GetTurnId() != t1.GetTurnId() || len(m.GetSourceMessageIds()) != 1 {
				t.Errorf("memory: %v", m)
			}
			// The same turn again is a no-op, without a model call.
			calls := len(srv.Requests())
			again := extract(t, h, t1)
			if !again.GetAlreadyProcessed() || len(again.GetMemories()) != 1 || len(srv.Requests()) != calls {
				t.Errorf("second extraction: %v (%d model calls, was %d)", again, len(srv.Requests()), calls)
			}
			// Session 2.
			rr, err := h.client.Recall(ctxT(t), &memoryv1.RecallRequest{UserId: "li", Query: "帮我订周六晚上7点4个人", AttributeKeys: []string{"restaurant_name"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rr.GetMemories()) != 1 || rr.GetMemories()[0].GetMemory().GetAttributes()["restaurant_name"] != "蜀香园" {
				t.Fatalf("session 2 recall: %v", rr)
			}
			if !strings.Contains(rr.GetMemories()[0].GetReason(), "restaurant_name") {
				t.Errorf("reason %q does not say why", rr.GetMemories()[0].GetReason())
			}
			got := recallContents(t, h, &memoryv1.RecallRequest{UserId: "li", Query: "我上次提到的那家川菜馆，帮我订个明天晚上7点两个人的位置"})
			if d := cmp.Diff([]string{"用户最常去的川菜馆是蜀香园"}, got); d != "" {
				t.Errorf("the article's request (-want +got):\n%s", d)
			}
		})
	}
}

// What the assistant said and the recalled-memory message never become memories; tool
// results only when the user asked to remember.
func TestExtractIsRoleAware(t *testing.T) {
	sloppy := memoriesJSON(
		map[string]any{"type": "preference", "content": "用户喜欢蜀香园", "confidence": 0.95, "subject": "restaurant", "attributes": map[string]any{"restaurant_name": "蜀香园"}},
		map[string]any{"type": "preference", "content": "用户喜欢喝燕麦拿铁", "confidence": 0.95, "subject": "coffee"},
		map[string]any{"type": "fact", "content": "用户有一张优惠券", "confidence": 0.9, "attributes": map[string]any{"coupon_code": "SAVE20"}},
	)
	var prompts atomic.Value
	handler := func(req scripted.Request) scripted.Reply {
		prompts.Store(req.LastUser())
		if strings.Contains(req.LastUser(), "记住这个优惠券码") {
			return scripted.Text(memoriesJSON(map[string]any{"type": "fact", "content": "用户的优惠券码是SAVE20", "confidence": 0.95, "attributes": map[string]any{"coupon_code": "SAVE20"}}))
		}
		return scripted.Text(sloppy)
	}
	mc, _ := scriptedModel(t, handler)
	// The user's words only ask for something, which the pre-filter would spare the model:
	// what is tested here is what the model is shown and what of its answer is kept.
	h := newHarness(t, "embedded", harnessOpts{model: mc, cfg: func(c *Config) { c.ExtractPrefilter = false }})

	tf := turn("zhao", "s1",
		recalledBlock("以下是与当前对话可能相关的历史记忆，供参考，但不一定都适用：\n- 用户喜欢喝燕麦拿铁"),
		userSays("帮我查一下附近有什么好吃的"),
		turnMsg(sessionv1.Role_ROLE_ASSISTANT, sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, `{"query":"附近美食"}`),
		toolResult(`{"results":[{"name":"蜀香园","coupon":"SAVE20"}]}`),
		assistantSays("附近有蜀香园，你之前好像很喜欢，还有一张优惠券 SAVE20。"))
	resp := extract(t, h, tf)
	if d := cmp.Diff([]string{"ungrounded", "ungrounded", "ungrounded"}, outcomes(resp)); d != "" {
		t.Errorf("outcomes (-want +got):\n%s\n%v", d, resp.GetCandidates())
	}
	p := prompts.Load().(string)
	for _, absent := range []string{"燕麦拿铁", "历史记忆", `"coupon"`} {
		if strings.Contains(p, absent) {
			t.Errorf("the prompt carries %q (recalled memory or tool result):\n%s", absent, p)
		}
	}
	if !strings.Contains(p, "ASSISTANT REPLIES (context only") || !strings.Contains(p, "帮我查一下附近") {
		t.Errorf("prompt:\n%s", p)
	}
	if lr, _ := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "zhao"}); len(lr.GetMemories()) != 0 {
		t.Errorf("memories written: %v", lr.GetMemories())
	}

	// The user asks to remember something from a tool result: now it is material.
	tf2 := turn("zhao", "s1", userSays("记住这个优惠券码"), toolResult(`{"coupon":"SAVE20"}`), assistantSays("好的"))
	tf2.RememberRequested = true
	resp = extract(t, h, tf2)
	if d := cmp.Diff([]string{"written"}, outcomes(resp)); d != "" {
		t.Errorf("remember-requested outcomes (-want +got):\n%s\n%v", d, resp.GetCandidates())
	}
	if p := prompts.Load().(string); !strings.Contains(p, "TOOL RESULTS") || !strings.Contains(p, "SAVE20") {
		t.Errorf("remember-requested prompt lacks the tool result:\n%s", p)
	}
}

// The article's Shanghai mistake: a city mentioned once is not stored as a preference.
func TestExtractShanghaiMistake(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			mc, _ := scriptedModel(t, byPrompt(map[string]string{
				// A model that over-reads a passing mention, confidently and then hesitantly.
				"上海出差": memoriesJSON(map[string]any{"type": "preference", "content": "用户喜欢上海", "confidence": 0.9, "subject": "city", "attributes": map[string]any{"city": "上海"}}),
				"上海转机": memoriesJSON(map[string]any{"type": "preference", "content": "用户偏好上海", "confidence": 0.6, "attributes": map[string]any{"city": "上海"}}),
			}))
			h := newHarness(t, b, harnessOpts{model: mc})
			r1 := extract(t, h, turn("wu", "s1", userSays("我上个月去过上海出差，今天北京天气怎么样？"), assistantSays("北京今天晴，25度。")))
			r2 := extract(t, h, turn("wu", "s2", userSays("下周要在上海转机，帮我看看航班"), assistantSays("好的")))
			if d := cmp.Diff([]string{"no_preference_cue", "below_threshold"}, append(outcomes(r1), outcomes(r2)...)); d != "" {
				t.Errorf("outcomes (-want +got):\n%s", d)
			}
			for _, q := range []string{"推荐一个周末去玩的城市", "上海", "帮我推荐点好玩的"} {
				if got := recallContents(t, h, &memoryv1.RecallRequest{UserId: "wu", Query: q, MinSimilarity: ptr(0.0)}); len(got) != 0 {
					t.Errorf("recall %q: %v", q, got)
				}
			}
		})
	}
}

// A preference changed from A to B leaves one live memory; A is expired, pointing at B.
func TestExtractPreferenceChange(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			mc, _ := scriptedModel(t, byPrompt(map[string]string{
				"我喜欢喝拿铁": memoriesJSON(map[string]any{"type": "preference", "content": "用户喜欢喝拿铁", "confidence": 0.95, "subject": "coffee", "attributes": map[string]any{"drink": "拿铁"}}),
				"改喝美式":   memoriesJSON(map[string]any{"type": "preference", "content": "用户现在喜欢喝美式", "confidence": 0.95, "subject": "coffee", "attributes": map[string]any{"drink": "美式"}}),
			}))
			h := newHarness(t, b, harnessOpts{model: mc})
			a := extract(t, h, turn("zhou", "s1", userSays("我喜欢喝拿铁，每天一杯")))
			bResp := extract(t, h, turn("zhou", "s2", userSays("我现在不喝拿铁了，以后都改喝美式")))
			if d := cmp.Diff([]string{"superseding"}, outcomes(bResp)); d != "" {
				t.Fatalf("outcomes (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]string{a.GetMemories()[0].GetId()}, bResp.GetSupersededIds()); d != "" {
				t.Errorf("superseded (-want +got):\n%s", d)
			}
			lr, err := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "zhou"})
			if err != nil {
				t.Fatal(err)
			}
			if len(lr.GetMemories()) != 1 || lr.GetMemories()[0].GetAttributes()["drink"] != "美式" {
				t.Errorf("live memories: %v", lr.GetMemories())
			}
			all, _ := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "zhou", IncludeExpired: true})
			if len(all.GetMemories()) != 2 {
				t.Errorf("with expired: %d memories", len(all.GetMemories()))
			}
		})
	}
}

func TestExtractBadReplies(t *testing.T) {
	t.Run("not JSON is retried, then FailedPrecondition", func(t *testing.T) {
		mc, srv := scriptedModel(t, func(scripted.Request) scripted.Reply { return scripted.Text("I'm sorry, I cannot help with that.") })
		h := newHarness(t, "embedded", harnessOpts{model: mc})
		_, err := h.client.ExtractTurn(ctxT(t), &memoryv1.ExtractTurnRequest{Turn: turn("u", "s", userSays("我喜欢爬山"))})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "after 2 attempts") {
			t.Errorf("error = %v", err)
		}
		if n := len(srv.Requests()); n != 2 {
			t.Errorf("%d model calls, want 2", n)
		}
	})
	t.Run("no model configured", func(t *testing.T) {
		h := newHarness(t, "embedded", harnessOpts{})
		_, err := h.client.ExtractTurn(ctxT(t), &memoryv1.ExtractTurnRequest{Turn: turn("u", "s", userSays("我喜欢爬山"))})
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("error = %v, want FailedPrecondition", err)
		}
	})
	t.Run("explicit extraction switched off", func(t *testing.T) {
		mc, srv := scriptedModel(t, func(scripted.Request) scripted.Reply { return scripted.Text(`{"memories":[]}`) })
		h := newHarness(t, "embedded", harnessOpts{model: mc, cfg: func(c *Config) { c.ExplicitEnabled = false }})
		resp := extract(t, h, turn("u", "s", userSays("我喜欢爬山")))
		if len(resp.GetCandidates()) != 0 || len(srv.Requests()) != 0 {
			t.Errorf("with extraction off: %v, %d model calls", resp, len(srv.Requests()))
		}
	})
	t.Run("invalid items are reported, valid ones kept", func(t *testing.T) {
		mc, _ := scriptedModel(t, func(scripted.Request) scripted.Reply {
			return scripted.Text(`{"memories":[{"type":"opinion","content":"用户喜欢爬山","confidence":0.9},{"type":"preference","content":"","confidence":0.9},{"type":"preference","content":"用户喜欢爬山","confidence":"95%"}]}`)
		})
		h := newHarness(t, "embedded", harnessOpts{model: mc})
		resp := extract(t, h, turn("u", "s", userSays("我喜欢爬山")))
		if d := cmp.Diff([]string{"invalid", "invalid", "written"}, outcomes(resp)); d != "" {
			t.Errorf("outcomes (-want +got):\n%s", d)
		}
	})
}
