package demo

import (
	"encoding/json"
	"strings"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/services/memory"
	"github.com/hermes-agent/hermes/services/orchestrator"
)

// The user's messages of the article's restaurant example, over two sessions.
const (
	// Session 1: the user mentions the restaurant, says they like it and how many usually go.
	FirstMessage = "我上周去了蜀香园，很喜欢那家川菜馆，我们一般4个人去。帮我查一下它的地址。"
	// Session 2: "the Sichuan restaurant I mentioned last time" — the name is not in the
	// message; the time and party size are, explicitly.
	SecondMessage = "我上次提到的那家川菜馆，帮我订个明天晚上7点两个人的位置"
)

// What the scripted model asks for in session 2, as the user said it.
const (
	reservationTime = "明天 19:00"
	partySize       = 2
)

// Model is the scripted model of the demo: it plays the assistant of the restaurant example,
// answers the memory extractor's JSON requests and the orchestrator's summary requests. It
// decides from what each request contains, as a model would, not from a fixed sequence.
func Model() scripted.Handler {
	return func(req scripted.Request) scripted.Reply {
		sys := ""
		if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
			sys = req.Messages[0].Content
		}
		switch {
		case sys == memory.ExtractionSystemPrompt:
			return extraction(req)
		case strings.HasPrefix(sys, orchestrator.SummarySystemPrompt[:40]):
			return scripted.Text(`{"goal":"find and book a restaurant","decisions":[],"facts":[],"open_items":[]}`)
		case sys == orchestrator.FillDecisionSystemPrompt:
			return fillDecision(req)
		}
		return assistant(req)
	}
}

// fillDecision plays the fill-decision model: the user's message refers to "the Sichuan
// restaurant I mentioned last time", so the remembered name may fill; anything else is unsure.
func fillDecision(req scripted.Request) scripted.Reply {
	var in struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal([]byte(req.LastUser()), &in)
	if strings.Contains(in.Message, "上次提到") {
		return scripted.Text(`{"decision":"fill","value":"","reason":"the user refers to the restaurant they mentioned last time"}`)
	}
	return scripted.Text(`{"decision":"unsure","value":"","reason":"the message does not say"}`)
}

// toolNamed finds the offered tool whose name ends with the MCP tool's name (the gateway adds a
// namespace prefix the integrator chose).
func toolNamed(req scripted.Request, suffix string) string {
	for _, t := range req.Tools {
		if t.Name == suffix || strings.HasSuffix(t.Name, "_"+suffix) {
			return t.Name
		}
	}
	return ""
}

// turnResults returns the tool results after the last user message, by tool call name.
func turnResults(req scripted.Request) (results []scripted.Message, names map[string]string) {
	names = map[string]string{}
	start := 0
	for i, m := range req.Messages {
		if m.Role == "user" {
			start = i + 1
		}
	}
	for _, m := range req.Messages[start:] {
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Name
		}
		if m.Role == "tool" {
			results = append(results, m)
		}
	}
	return results, names
}

// toolOutput decodes a tool message: the orchestrator's {"success", "output"} envelope, with
// the MCP server's JSON text as output.
func toolOutput(content string, into any) bool {
	var env struct {
		Success bool            `json:"success"`
		Output  json.RawMessage `json:"output"`
	}
	if json.Unmarshal([]byte(content), &env) != nil || !env.Success {
		return false
	}
	var text string
	if json.Unmarshal(env.Output, &text) == nil {
		return json.Unmarshal([]byte(text), into) == nil
	}
	return json.Unmarshal(env.Output, into) == nil
}

type searchOutput struct {
	Restaurants []struct {
		ID      string `json:"restaurant_id"`
		Name    string `json:"restaurant_name"`
		Address string `json:"address"`
		Hours   string `json:"hours"`
	} `json:"restaurants"`
}

type reserveOutput struct {
	Status      string `json:"status"`
	Address     string `json:"address"`
	Reservation struct {
		ConfirmationID string `json:"confirmation_id"`
		RestaurantName string `json:"restaurant_name"`
		Time           string `json:"time"`
		PartySize      int    `json:"party_size"`
	} `json:"reservation"`
}

func assistant(req scripted.Request) scripted.Reply {
	search, reserve := toolNamed(req, "search_restaurant"), toolNamed(req, "make_reservation")
	user := req.LastUser()
	results, names := turnResults(req)
	var last scripted.Message
	if len(results) > 0 {
		last = results[len(results)-1]
	}
	lastTool := names[last.ToolCallID]
	switch {
	case search == "" || reserve == "":
		return scripted.Text("（脚本模型）没有找到餐厅工具，无法继续。")

	case strings.Contains(user, "订") && len(results) == 0:
		// The name is not in the message: the scripted model leaves restaurant_name out, and
		// the orchestrator fills it from the recalled memory.
		return scripted.Calls(scripted.Call(search, map[string]any{"cuisine": "川菜"}))

	case strings.Contains(user, "订") && lastTool == search:
		var out searchOutput
		if !toolOutput(last.Content, &out) || len(out.Restaurants) == 0 {
			return scripted.Text("抱歉，没有找到您说的那家餐厅。")
		}
		return scripted.Calls(scripted.Call(reserve, map[string]any{
			"restaurant_id": out.Restaurants[0].ID, "time": reservationTime, "party_size": partySize,
		}))

	case strings.Contains(user, "订") && lastTool == reserve:
		var out reserveOutput
		if !toolOutput(last.Content, &out) {
			return scripted.Text("抱歉，订位没有成功：" + last.Content)
		}
		r := out.Reservation
		return scripted.Text("已为您在" + r.RestaurantName + "订好" + r.Time + "、" + itoa(r.PartySize) + "位的座位，确认号 " + r.ConfirmationID + "，地址：" + out.Address + "。")

	case strings.Contains(user, "蜀香园") && len(results) == 0:
		return scripted.Calls(scripted.Call(search, map[string]any{"restaurant_name": "蜀香园"}))

	case lastTool == search:
		var out searchOutput
		if !toolOutput(last.Content, &out) || len(out.Restaurants) == 0 {
			return scripted.Text("抱歉，没有查到这家餐厅。")
		}
		r := out.Restaurants[0]
		return scripted.Text(r.Name + "在" + r.Address + "，营业时间 " + r.Hours + "。")
	}
	return scripted.Text("好的。")
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// extraction answers the memory extractor: a preference with the restaurant's name and the
// usual party size as attributes, when the user's words say so.
func extraction(req scripted.Request) scripted.Reply {
	text := req.LastUser()
	if !strings.Contains(text, "蜀香园") || !strings.Contains(text, "喜欢") {
		return scripted.Text(`{"memories":[]}`)
	}
	return scripted.Text(`{"memories":[{"type":"preference","content":"用户喜欢川菜馆蜀香园，一般4个人去","confidence":0.93,` +
		`"subject":"restaurant","attributes":{"restaurant_name":"蜀香园","cuisine":"川菜","party_size":"4"},` +
		`"keywords":["订餐厅","订位","川菜馆","聚餐"]}]}`)
}
