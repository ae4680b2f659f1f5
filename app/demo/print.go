package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// Printer renders a turn's events for a person: the streamed answer, recalled memories, tool
// calls with their arguments (and the ones filled from memory), a progress line while a tool
// reports progress, results, and the outcome. Verbose adds what a developer wants: the turn's
// id and model, the token composition and tools of every model step, and the full usage.
// `hermes chat` and `hermes demo` share it.
type Printer struct {
	W io.Writer
	// Verbose prints the turn's header, every model step's token breakdown and tools, and the
	// full token usage.
	Verbose bool
	// Live redraws the progress line in place (W is a terminal); otherwise progress is printed
	// as lines, one per tenth of the work or new message.
	Live bool

	inText bool
	// progress is the call whose progress line is showing, with what was last printed of it.
	progress     string
	progressShow string
	// LastContext is the context of the turn's last model call.
	LastContext *orchestratorv1.ContextAssembled
}

func (p *Printer) endText() {
	if p.inText {
		fmt.Fprintln(p.W)
		p.inText = false
	}
	p.endProgress()
}

// endProgress ends a live progress line, so the next output starts on a clean line.
func (p *Printer) endProgress() {
	if p.progress != "" && p.Live {
		fmt.Fprint(p.W, "\r\x1b[K")
	}
	p.progress, p.progressShow = "", ""
}

// Event prints one event.
func (p *Printer) Event(ev *orchestratorv1.TurnEvent) {
	if d := ev.GetDelta(); d != nil {
		p.endProgress()
		if !p.inText {
			fmt.Fprint(p.W, "assistant › ")
			p.inText = true
		}
		fmt.Fprint(p.W, d.GetText())
		return
	}
	if tp := ev.GetToolProgress(); tp != nil {
		p.toolProgress(tp)
		return
	}
	p.endText()
	switch e := ev.GetEvent().(type) {
	case *orchestratorv1.TurnEvent_Started:
		if p.Verbose {
			fmt.Fprintf(p.W, "  [turn %s · message #%d · model %s]\n", e.Started.GetTurnId(), e.Started.GetUserMessageSeq(), e.Started.GetModel())
		}
	case *orchestratorv1.TurnEvent_Context:
		c := e.Context
		p.LastContext = c
		if p.Verbose {
			fmt.Fprintf(p.W, "  context for step %d: %s\n", c.GetStep(), Composition(c.GetTokens()))
			fmt.Fprintf(p.W, "    tools: %s (%s); window %s, %s, %s, %s\n",
				strings.Join(c.GetTools(), ", "), c.GetToolSelection(), Plural(int(c.GetWindowTurns()), "turn", "turns"),
				Plural(int(c.GetPinnedMessages()), "pinned message", "pinned messages"),
				Plural(int(c.GetTaskStateSteps()), "task-state step", "task-state steps"), Plural(int(c.GetRepairs()), "repair", "repairs"))
		}
	case *orchestratorv1.TurnEvent_Memories:
		p.memories(e.Memories)
	case *orchestratorv1.TurnEvent_ToolCall:
		p.toolCall(e.ToolCall)
	case *orchestratorv1.TurnEvent_ToolResult:
		p.toolResult(e.ToolResult)
	case *orchestratorv1.TurnEvent_Summary:
		s := e.Summary
		how := "by the model"
		if s.GetFallback() {
			how = "by the extractive fallback"
		}
		fmt.Fprintf(p.W, "  summary extended %s: %s folded in, now covers through #%d (%d tokens)\n", how,
			Plural(int(s.GetFoldedMessages()), "message", "messages"), s.GetThroughSeq(), s.GetTokens())
	case *orchestratorv1.TurnEvent_Completed:
		c := e.Completed
		if p.Verbose {
			fmt.Fprintf(p.W, "  done in %s · %s\n", Plural(int(c.GetSteps()), "step", "steps"), usage(c.GetUsage()))
		} else {
			fmt.Fprintf(p.W, "  done in %s · %s\n", Plural(int(c.GetSteps()), "step", "steps"), Plural(int(c.GetUsage().GetTotalTokens()), "token", "tokens"))
		}
	case *orchestratorv1.TurnEvent_Failed:
		f := e.Failed
		if f.GetCode() == "CANCELED" || f.GetCode() == "CANCELLED" {
			fmt.Fprintf(p.W, "  ⏹ turn cancelled: %s\n", f.GetMessage())
		} else {
			fmt.Fprintf(p.W, "  ✗ turn failed (%s): %s\n", f.GetCode(), f.GetMessage())
		}
		if f.GetUsage().GetModelCalls() > 0 && p.Verbose {
			fmt.Fprintf(p.W, "    %s\n", usage(f.GetUsage()))
		}
	}
}

// memories prints the memories recalled for a turn (or why none were).
func (p *Printer) memories(m *orchestratorv1.MemoriesRecalled) {
	switch {
	case m.GetError() != "":
		fmt.Fprintf(p.W, "  memories: %s\n", m.GetError())
	case len(m.GetMemories()) == 0:
		if p.Verbose {
			fmt.Fprintln(p.W, "  memories recalled: none")
		}
	default:
		fmt.Fprintf(p.W, "  %s recalled\n", Plural(len(m.GetMemories()), "memory", "memories"))
		for _, r := range m.GetMemories() {
			fmt.Fprintf(p.W, "    • (%s) %s%s  score %.2f", r.GetType(), r.GetContent(), attrs(r.GetAttributes()), r.GetScore())
			if r.GetReason() != "" {
				fmt.Fprintf(p.W, " — %s", r.GetReason())
			}
			fmt.Fprintln(p.W)
		}
	}
}

// toolCall prints a tool call with the arguments filled from memory.
func (p *Printer) toolCall(c *orchestratorv1.ToolCallStarted) {
	fmt.Fprintf(p.W, "  → %s %s\n", c.GetName(), c.GetArguments())
	for _, f := range c.GetFilled() {
		fmt.Fprintf(p.W, "      filled from memory %s: %s = %s\n", f.GetMemoryId(), f.GetName(), f.GetValue())
	}
	if c.GetIdempotencyKey() != "" && p.Verbose {
		fmt.Fprintf(p.W, "      idempotency key %s\n", c.GetIdempotencyKey())
	}
}

// toolResult prints a tool result on one line.
func (p *Printer) toolResult(r *orchestratorv1.ToolCallFinished) {
	took := r.GetDuration().AsDuration().Round(100_000)
	if !r.GetSuccess() {
		fmt.Fprintf(p.W, "  ← %s failed (%s) in %s: %s\n", r.GetName(), r.GetErrorCode(), took, oneLine(r.GetError(), 240))
		// A link the user must open (an MCP server's "connect your account") is longer than
		// the line keeps: print links whole.
		for _, u := range links(r.GetError()) {
			fmt.Fprintf(p.W, "      open: %s\n", u)
		}
		return
	}
	replay := ""
	if r.GetReplayed() {
		replay = " (replayed from its idempotency record, not run again)"
	}
	fmt.Fprintf(p.W, "  ← %s ok in %s%s: %s\n", r.GetName(), took, replay, oneLine(r.GetOutput(), 240))
}

// toolProgress draws a running tool's progress: a bar when the tool knows its total, the
// amount done otherwise, and its message.
func (p *Printer) toolProgress(tp *orchestratorv1.ToolProgress) {
	p.endTextOnly()
	show := fmt.Sprintf("  ⋯ %s %s", tp.GetName(), progressText(tp.GetProgress(), tp.GetTotal(), p.Live))
	if msg := oneLine(tp.GetMessage(), 80); msg != "" {
		show += " " + msg
	}
	if p.Live {
		fmt.Fprint(p.W, "\r\x1b[K"+show)
		p.progress, p.progressShow = tp.GetCallId(), show
		return
	}
	// Not a terminal: a line when the call, its tenth of the work or its message changes.
	key := fmt.Sprintf("%s %s %d", tp.GetCallId(), tp.GetMessage(), tenth(tp.GetProgress(), tp.GetTotal()))
	if key != p.progressShow {
		fmt.Fprintln(p.W, show)
		p.progressShow = key
	}
}

// endTextOnly ends streamed text without touching the progress line.
func (p *Printer) endTextOnly() {
	if p.inText {
		fmt.Fprintln(p.W)
		p.inText = false
	}
}

func tenth(done, total float64) int {
	if total <= 0 {
		return int(done)
	}
	return int(10 * done / total)
}

// progressText is "[██████░░░░] 60%" with a total, "3 done" without.
func progressText(done, total float64, bar bool) string {
	if total <= 0 {
		return fmt.Sprintf("%g done", done)
	}
	frac := min(max(done/total, 0), 1)
	pct := fmt.Sprintf("%d%% (%g/%g)", int(100*frac+0.5), done, total)
	if !bar {
		return pct
	}
	const width = 20
	full := int(frac*width + 0.5)
	return "[" + strings.Repeat("█", full) + strings.Repeat("░", width-full) + "] " + pct
}

// Flush ends a line of streamed text or progress.
func (p *Printer) Flush() { p.endText() }

// Plural is "1 step", "2 steps".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

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

// articleComposition groups a request and its reply the way the article reports a typical one:
// system + tool schemas, history + summary, memory, current message + reply.
func articleComposition(t *orchestratorv1.TokenBreakdown, replyTokens int32) string {
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
	return fmt.Sprintf("usage: %d prompt (%d cached) + %d completion = %s over %s (counted by the %s)",
		u.GetPromptTokens(), u.GetCachedTokens(), u.GetCompletionTokens(), Plural(int(u.GetTotalTokens()), "token", "tokens"),
		Plural(int(u.GetModelCalls()), "model call", "model calls"), u.GetSource())
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

// links returns the http(s) URLs in s, at most 3, without a trailing full stop or bracket.
func links(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		if len(out) == 3 {
			break
		}
		if strings.HasPrefix(f, "https://") || strings.HasPrefix(f, "http://") {
			out = append(out, strings.TrimRight(f, ".,;)]>\"'"))
		}
	}
	return out
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
