package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// Printer renders a turn's events for a person: the context's token composition, recalled
// memories, tool calls with the arguments filled from memory, results, the streamed answer and
// the usage. `hermes chat` and `hermes demo` share it.
type Printer struct {
	W io.Writer
	// Verbose prints the full token breakdown and the tool list of every model step.
	Verbose bool

	inText bool
	// LastContext is the context of the turn's last model call.
	LastContext *orchestratorv1.ContextAssembled
}

func (p *Printer) endText() {
	if p.inText {
		fmt.Fprintln(p.W)
		p.inText = false
	}
}

// Event prints one event.
func (p *Printer) Event(ev *orchestratorv1.TurnEvent) {
	if d := ev.GetDelta(); d != nil {
		if !p.inText {
			fmt.Fprint(p.W, "assistant › ")
			p.inText = true
		}
		fmt.Fprint(p.W, d.GetText())
		return
	}
	p.endText()
	switch e := ev.GetEvent().(type) {
	case *orchestratorv1.TurnEvent_Started:
		fmt.Fprintf(p.W, "  [turn %s · message #%d · model %s]\n", e.Started.GetTurnId(), e.Started.GetUserMessageSeq(), e.Started.GetModel())
	case *orchestratorv1.TurnEvent_Context:
		c := e.Context
		p.LastContext = c
		fmt.Fprintf(p.W, "  context for step %d: %s\n", c.GetStep(), Composition(c.GetTokens()))
		if p.Verbose || c.GetStep() == 1 {
			fmt.Fprintf(p.W, "    tools: %s (%s); window %d turns, %d pinned, %d task-state steps, %d repairs\n",
				strings.Join(c.GetTools(), ", "), c.GetToolSelection(), c.GetWindowTurns(), c.GetPinnedMessages(), c.GetTaskStateSteps(), c.GetRepairs())
		}
	case *orchestratorv1.TurnEvent_Memories:
		m := e.Memories
		switch {
		case m.GetError() != "":
			fmt.Fprintf(p.W, "  memories: %s\n", m.GetError())
		case len(m.GetMemories()) == 0:
			fmt.Fprintln(p.W, "  memories recalled: none")
		default:
			fmt.Fprintf(p.W, "  memories recalled: %d\n", len(m.GetMemories()))
			for _, r := range m.GetMemories() {
				fmt.Fprintf(p.W, "    • (%s) %s%s  score %.2f", r.GetType(), r.GetContent(), attrs(r.GetAttributes()), r.GetScore())
				if r.GetReason() != "" {
					fmt.Fprintf(p.W, " — %s", r.GetReason())
				}
				fmt.Fprintln(p.W)
			}
		}
	case *orchestratorv1.TurnEvent_ToolCall:
		c := e.ToolCall
		fmt.Fprintf(p.W, "  → %s %s\n", c.GetName(), c.GetArguments())
		for _, f := range c.GetFilled() {
			fmt.Fprintf(p.W, "      filled from memory %s: %s = %s\n", f.GetMemoryId(), f.GetName(), f.GetValue())
		}
		if c.GetIdempotencyKey() != "" {
			fmt.Fprintf(p.W, "      idempotency key %s\n", c.GetIdempotencyKey())
		}
	case *orchestratorv1.TurnEvent_ToolResult:
		r := e.ToolResult
		took := r.GetDuration().AsDuration().Round(100_000)
		if r.GetSuccess() {
			replay := ""
			if r.GetReplayed() {
				replay = " (replayed from its idempotency record, not run again)"
			}
			fmt.Fprintf(p.W, "  ← %s ok in %s%s: %s\n", r.GetName(), took, replay, oneLine(r.GetOutput(), 240))
		} else {
			fmt.Fprintf(p.W, "  ← %s failed (%s) in %s: %s\n", r.GetName(), r.GetErrorCode(), took, oneLine(r.GetError(), 240))
		}
	case *orchestratorv1.TurnEvent_Summary:
		s := e.Summary
		how := "by the model"
		if s.GetFallback() {
			how = "by the extractive fallback"
		}
		fmt.Fprintf(p.W, "  summary extended %s: %d messages folded in, now covers through #%d (%d tokens)\n", how, s.GetFoldedMessages(), s.GetThroughSeq(), s.GetTokens())
	case *orchestratorv1.TurnEvent_Completed:
		c := e.Completed
		fmt.Fprintf(p.W, "  done in %d steps · %s\n", c.GetSteps(), usage(c.GetUsage()))
	case *orchestratorv1.TurnEvent_Failed:
		f := e.Failed
		fmt.Fprintf(p.W, "  ✗ turn failed (%s): %s\n", f.GetCode(), f.GetMessage())
		if f.GetUsage().GetModelCalls() > 0 {
			fmt.Fprintf(p.W, "    %s\n", usage(f.GetUsage()))
		}
	}
}

// Flush ends a line of streamed text.
func (p *Printer) Flush() { p.endText() }

// Composition renders a token breakdown with each block's share.
func Composition(t *orchestratorv1.TokenBreakdown) string {
	total := t.GetTotal()
	pct := func(n int32) string {
		if total == 0 {
			return "0"
		}
		return fmt.Sprintf("%d (%d%%)", n, (100*n+total/2)/total)
	}
	return fmt.Sprintf("%d tokens = system prompt %s · tool schemas %s · memory %s · summary %s · pinned %s · task state %s · history %s · current %s",
		total, pct(t.GetSystemPrompt()), pct(t.GetToolSchemas()), pct(t.GetMemory()), pct(t.GetSummary()), pct(t.GetPinned()),
		pct(t.GetTaskState()), pct(t.GetHistory()), pct(t.GetCurrentMessage()))
}

// ArticleComposition groups a request and its reply the way the article reports a typical one:
// system + tool schemas, history + summary, memory, current message + reply.
func ArticleComposition(t *orchestratorv1.TokenBreakdown, replyTokens int32) string {
	sys := t.GetSystemPrompt() + t.GetToolSchemas()
	hist := t.GetHistory() + t.GetSummary() + t.GetPinned() + t.GetTaskState()
	mem := t.GetMemory()
	cur := t.GetCurrentMessage() + replyTokens
	total := sys + hist + mem + cur
	if total == 0 {
		return "empty"
	}
	p := func(n int32) int32 { return (100*n + total/2) / total }
	return fmt.Sprintf("system + tool schemas %d%% · history + summary %d%% · memory %d%% · current message + reply %d%% (of %d tokens; the article: 32/38/6/24)",
		p(sys), p(hist), p(mem), p(cur), total)
}

func usage(u *orchestratorv1.Usage) string {
	return fmt.Sprintf("usage: %d prompt (%d cached) + %d completion = %d tokens over %d model calls (counted by the %s)",
		u.GetPromptTokens(), u.GetCachedTokens(), u.GetCompletionTokens(), u.GetTotalTokens(), u.GetModelCalls(), u.GetSource())
}

func attrs(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return " [" + strings.Join(parts, ", ") + "]"
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
