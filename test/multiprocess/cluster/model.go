package cluster

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/services/memory"
)

// LoadTurn is the user message of a load turn: a calculation (one calculator tool call, then an
// answer) and a membership number, which the memory extractor turns into one fact memory, so
// each turn.finished has a visible effect that can be counted.
func LoadTurn(expr, member string) string {
	return fmt.Sprintf("请帮我算一下 %s。我的会员编号是 %s。", expr, member)
}

var (
	loadExpr   = regexp.MustCompile(`请帮我算一下 (.+?)。`)
	loadMember = regexp.MustCompile(`我的会员编号是 ([A-Za-z0-9_-]+)。`)
)

// MemberContent is the content of the memory extracted from a load turn.
func MemberContent(member string) string { return "用户的会员编号是 " + member }

// ModelOptions tune Model.
type ModelOptions struct {
	// Delay is added before every answer to a load turn's assistant step, so turns are in
	// flight long enough for a fault to hit them.
	Delay time.Duration
	// ExtractDelay is added before every answer to the memory extractor, so extractions are in
	// flight (and a backlog builds) when the memory process is killed.
	ExtractDelay time.Duration
}

// Model is the scripted model of the multi-process tests and the load generator (it is not a
// model: an OpenAI-compatible server answering from this script). Load turns (LoadTurn) call
// the calculator and answer with its result; their extraction returns the membership number
// as a fact. Everything else is the restaurant example's script (app/demo).
func Model(opts ModelOptions) scripted.Handler {
	restaurant := demo.Model()
	return func(req scripted.Request) scripted.Reply {
		sys := ""
		if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
			sys = req.Messages[0].Content
		}
		user := req.LastUser()
		if sys == memory.ExtractionSystemPrompt {
			if m := loadMember.FindStringSubmatch(user); m != nil {
				b, _ := json.Marshal(map[string]any{"memories": []any{map[string]any{
					"type": "fact", "content": MemberContent(m[1]), "confidence": 0.95,
					"subject": "membership number", "attributes": map[string]string{"member_id": m[1]},
					"keywords": []string{"会员", "会员编号"},
				}}})
				reply := scripted.Text(string(b))
				reply.Delay = opts.ExtractDelay
				return reply
			}
			return restaurant(req)
		}
		e := loadExpr.FindStringSubmatch(user)
		if e == nil || !req.HasTool("calculator") {
			return restaurant(req)
		}
		var reply scripted.Reply
		if res := req.ToolResults(); len(res) > 0 {
			reply = scripted.Text("结果是 " + toolText(res[len(res)-1].Content) + "。")
		} else {
			reply = scripted.Calls(scripted.Call("calculator", map[string]string{"expression": e[1]}))
		}
		reply.Delay = opts.Delay
		return reply
	}
}

// toolText takes the output out of the orchestrator's {"success", "output"} tool message.
func toolText(content string) string {
	var env struct {
		Success bool            `json:"success"`
		Output  json.RawMessage `json:"output"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal([]byte(content), &env) != nil {
		return content
	}
	if !env.Success {
		return "（计算失败：" + string(env.Error) + "）"
	}
	// The calculator answers {"expression": …, "result": 42}.
	var calc struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(env.Output, &calc) == nil && len(calc.Result) > 0 {
		return string(calc.Result)
	}
	return strings.Trim(string(env.Output), `"`)
}
