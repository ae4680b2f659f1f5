package demo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

func TestPrinter(t *testing.T) {
	ev := func(e any) *orchestratorv1.TurnEvent {
		out := &orchestratorv1.TurnEvent{}
		switch x := e.(type) {
		case *orchestratorv1.TurnStarted:
			out.Event = &orchestratorv1.TurnEvent_Started{Started: x}
		case *orchestratorv1.ContextAssembled:
			out.Event = &orchestratorv1.TurnEvent_Context{Context: x}
		case *orchestratorv1.MemoriesRecalled:
			out.Event = &orchestratorv1.TurnEvent_Memories{Memories: x}
		case *orchestratorv1.ToolCallStarted:
			out.Event = &orchestratorv1.TurnEvent_ToolCall{ToolCall: x}
		case *orchestratorv1.ToolProgress:
			out.Event = &orchestratorv1.TurnEvent_ToolProgress{ToolProgress: x}
		case *orchestratorv1.ToolCallFinished:
			out.Event = &orchestratorv1.TurnEvent_ToolResult{ToolResult: x}
		case *orchestratorv1.TextDelta:
			out.Event = &orchestratorv1.TurnEvent_Delta{Delta: x}
		case *orchestratorv1.TurnCompleted:
			out.Event = &orchestratorv1.TurnEvent_Completed{Completed: x}
		case *orchestratorv1.TurnFailed:
			out.Event = &orchestratorv1.TurnEvent_Failed{Failed: x}
		}
		return out
	}
	turn := []*orchestratorv1.TurnEvent{
		ev(&orchestratorv1.TurnStarted{TurnId: "t1", UserMessageSeq: 3, Model: "m"}),
		ev(&orchestratorv1.MemoriesRecalled{}),
		ev(&orchestratorv1.ContextAssembled{Step: 1, Tokens: &orchestratorv1.TokenBreakdown{SystemPrompt: 10, CurrentMessage: 10, Total: 20}, Tools: []string{"long"}, WindowTurns: 1}),
		ev(&orchestratorv1.ToolCallStarted{CallId: "c1", Name: "long", Arguments: `{"n":3}`,
			Filled: []*orchestratorv1.FilledArgument{{Name: "city", Value: `"北京"`, MemoryId: "m1"}}}),
		ev(&orchestratorv1.ToolProgress{CallId: "c1", Name: "long", Progress: 1, Total: 4, Message: "step one"}),
		ev(&orchestratorv1.ToolProgress{CallId: "c1", Name: "long", Progress: 1.1, Total: 4, Message: "step one"}),
		ev(&orchestratorv1.ToolProgress{CallId: "c1", Name: "long", Progress: 2, Total: 4, Message: "step two"}),
		ev(&orchestratorv1.ToolCallFinished{CallId: "c1", Name: "long", Success: true, Output: "done"}),
		ev(&orchestratorv1.TextDelta{Text: "All "}),
		ev(&orchestratorv1.TextDelta{Text: "done."}),
		ev(&orchestratorv1.TurnCompleted{Steps: 1, Usage: &orchestratorv1.Usage{TotalTokens: 1, PromptTokens: 1, ModelCalls: 1, Source: "provider"}}),
	}
	for _, tc := range []struct {
		name          string
		verbose, live bool
		want          string
	}{
		{"default", false, false, `  → long {"n":3}
      filled from memory m1: city = "北京"
  ⋯ long 25% (1/4) step one
  ⋯ long 50% (2/4) step two
  ← long ok in 0s: done
assistant › All done.
  done in 1 step · 1 token
`},
		{"terminal", false, true, "  → long {\"n\":3}\n      filled from memory m1: city = \"北京\"\n" +
			"\r\x1b[K  ⋯ long [█████░░░░░░░░░░░░░░░] 25% (1/4) step one" +
			"\r\x1b[K  ⋯ long [██████░░░░░░░░░░░░░░] 28% (1.1/4) step one" +
			"\r\x1b[K  ⋯ long [██████████░░░░░░░░░░] 50% (2/4) step two" +
			"\r\x1b[K  ← long ok in 0s: done\nassistant › All done.\n  done in 1 step · 1 token\n"},
		{"verbose", true, false, `  [turn t1 · message #3 · model m]
  memories recalled: none
  context for step 1: 20 tokens = system prompt 10 (50%) · tool schemas 0 (0%) · memory 0 (0%) · summary 0 (0%) · pinned 0 (0%) · task state 0 (0%) · history 0 (0%) · current 10 (50%)
    tools: long (); window 1 turn, 0 pinned messages, 0 task-state steps, 0 repairs
  → long {"n":3}
      filled from memory m1: city = "北京"
  ⋯ long 25% (1/4) step one
  ⋯ long 50% (2/4) step two
  ← long ok in 0s: done
assistant › All done.
  done in 1 step · usage: 1 prompt (0 cached) + 0 completion = 1 token over 1 model call (counted by the provider)
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			p := &Printer{W: &out, Verbose: tc.verbose, Live: tc.live}
			for _, e := range turn {
				p.Event(e)
			}
			p.Flush()
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// A cancelled turn says so rather than "failed".
	var out bytes.Buffer
	(&Printer{W: &out}).Event(ev(&orchestratorv1.TurnFailed{Code: "CANCELED", Message: "the client cancelled the turn"}))
	if !strings.Contains(out.String(), "turn cancelled: the client cancelled the turn") {
		t.Errorf("cancelled turn: %q", out.String())
	}
}

// TestPrinterLinks: a failed tool's links (an MCP server's "connect your account") are printed
// whole, however long the message.
func TestPrinterLinks(t *testing.T) {
	long := "https://auth.example/authorize?client_id=c&code_challenge=" + strings.Repeat("x", 300) + "&state=s"
	for _, tc := range []struct {
		msg  string
		want []string
	}{
		{"The MCP server \"docs\" needs the user's own account. Ask the user to connect by opening this link, then try again: " + long, []string{long}},
		{"请打开链接 " + long + ". 然后重试", []string{long}},
		{"no link here", nil},
	} {
		var buf bytes.Buffer
		p := &Printer{W: &buf}
		p.Event(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_ToolResult{ToolResult: &orchestratorv1.ToolCallFinished{Name: "docs_search", ErrorCode: "execution", Error: tc.msg}}})
		p.Flush()
		var got []string
		for _, l := range strings.Split(buf.String(), "\n") {
			if u, ok := strings.CutPrefix(l, "      open: "); ok {
				got = append(got, u)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%q: links (-want +got):\n%s", tc.msg[:20], diff)
		}
	}
}
