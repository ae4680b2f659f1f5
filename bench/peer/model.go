package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/services/memory"
	"github.com/hermes-agent/hermes/services/orchestrator"
)

// turnText is the user message of every benchmark turn: one calculation.
func turnText(a, b, c int) string { return fmt.Sprintf("请帮我算一下 %d*%d+%d。", a, b, c) }

var turnExpr = regexp.MustCompile(`请帮我算一下 (.+?)。`)

// modelCalls counts the instant model's requests by what they are for.
type modelCalls struct {
	assistant, extraction, summary, other atomic.Int64
	// assistantBytes adds up the bodies of the assistant requests (the turns' context).
	assistantBytes atomic.Int64
}

// instantModel is the script every system runs against: asked the turn's question with a
// calculator offered, it calls the calculator; given the tool's result, it answers with the
// number. Hermes' memory extraction gets "nothing to remember" and its rolling summary a fixed
// summary. Usage is fixed, so the server does no token counting: the model costs the same
// little CPU whichever system calls it.
func instantModel(calls *modelCalls) scripted.Handler {
	usage := &scripted.Usage{PromptTokens: 200, CompletionTokens: 12}
	return func(req scripted.Request) scripted.Reply {
		reply := answer(req, calls)
		reply.Usage = usage
		return reply
	}
}

func answer(req scripted.Request, calls *modelCalls) scripted.Reply {
	sys := ""
	if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
		sys = req.Messages[0].Content
	}
	switch {
	case sys == memory.ExtractionSystemPrompt:
		calls.extraction.Add(1)
		return scripted.Text(`{"memories":[]}`)
	case strings.HasPrefix(sys, orchestrator.SummarySystemPrompt[:40]):
		calls.summary.Add(1)
		return scripted.Text(`{"goal":"arithmetic","decisions":[],"facts":[],"open_items":[]}`)
	}
	e := turnExpr.FindStringSubmatch(req.LastUser())
	if e == nil || !req.HasTool("calculator") {
		calls.other.Add(1)
		return scripted.Text("我只会算术。")
	}
	calls.assistant.Add(1)
	calls.assistantBytes.Add(int64(len(req.Raw)))
	if res := req.ToolResults(); len(res) > 0 {
		return scripted.Text("结果是 " + calcResult(res[len(res)-1].Content) + "。")
	}
	return scripted.Calls(scripted.Call("calculator", map[string]string{"expression": e[1]}))
}

// calcResult finds the calculator's number in a tool message: Hermes wraps the output as
// {"success": true, "output": {"expression", "result"}}, adk-go sends the function's result
// {"expression", "result"} as it is.
func calcResult(content string) string {
	var msg struct {
		Output *struct {
			Result json.RawMessage `json:"result"`
		} `json:"output"`
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal([]byte(content), &msg) != nil {
		return content
	}
	if msg.Output != nil && len(msg.Output.Result) > 0 {
		return string(msg.Output.Result)
	}
	if len(msg.Result) > 0 {
		return string(msg.Result)
	}
	return content
}
