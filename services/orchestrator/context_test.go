package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

func tok(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tk, err := tokenizer.New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestSessionToModel(t *testing.T) {
	msgs := []*sessionv1.Message{
		{Seq: 1, Role: sessionv1.Role_ROLE_USER, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: "book it"},
		{Seq: 2, Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: "searching"},
		{Seq: 3, Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "a", ToolName: "search", Content: `{"q":1}`},
		{Seq: 4, Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "b", ToolName: "search", Content: `{"q":2}`},
		{Seq: 5, Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "a", Content: "r1"},
		{Seq: 6, Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "b", Content: "r2", Synthesized: true},
		{Seq: 7, Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "c", ToolName: "book", Content: `{}`},
		{Seq: 8, Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "c", Content: "ok"},
		{Seq: 9, Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: "done"},
		{Seq: 10, Role: sessionv1.Role_ROLE_SYSTEM, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: "note"},
	}
	want := []model.Message{
		{Role: model.RoleUser, Content: "book it"},
		{Role: model.RoleAssistant, Content: "searching", ToolCalls: []model.ToolCall{{ID: "a", Name: "search", Arguments: `{"q":1}`}, {ID: "b", Name: "search", Arguments: `{"q":2}`}}},
		{Role: model.RoleTool, ToolCallID: "a", Content: "r1"},
		{Role: model.RoleTool, ToolCallID: "b", Content: "r2"},
		{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c", Name: "book", Arguments: `{}`}}},
		{Role: model.RoleTool, ToolCallID: "c", Content: "ok"},
		{Role: model.RoleAssistant, Content: "done"},
		{Role: model.RoleSystem, Content: "note"},
	}
	if diff := cmp.Diff(want, sessionToModel(msgs)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestContextOrderAndBreakdown(t *testing.T) {
	tk := tok(t)
	b := contextBlocks{
		systemPrompt:  "sys",
		memory:        renderMemories([]*memoryv1.RecalledMemory{{Memory: &memoryv1.Memory{Type: memoryv1.MemoryType_MEMORY_TYPE_PREFERENCE, Content: "likes 蜀香园", Attributes: map[string]string{"restaurant_name": "蜀香园", "a": "b"}}}}),
		pinned:        renderPinned([]*sessionv1.Message{{Role: sessionv1.Role_ROLE_USER, Content: "member M-1"}}),
		summary:       renderSummary(&sessionv1.Message{Content: "Goal: eat"}),
		history:       []model.Message{{Role: model.RoleUser, Content: "old"}, {Role: model.RoleAssistant, Content: "older answer"}},
		historyTokens: 17,
		current:       []model.Message{{Role: model.RoleUser, Content: "now"}},
		currentTokens: 5,
		toolTokens:    40,
	}
	b.taskState, _ = renderTaskState(TaskState{Done: []Step{{Tool: "add", Arguments: `{"sku":"A1"}`, Result: "ok"}}}, 5, nil)
	msgs := b.messages()
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Role)+":"+strings.SplitN(m.Content, "\n", 2)[0])
	}
	want := []string{
		"system:sys",
		"system:" + memoryHeading,
		"system:" + pinnedHeading,
		"system:" + summaryHeading,
		"system:" + taskStateHeading,
		"user:old", "assistant:older answer", "user:now",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if !strings.Contains(msgs[1].Content, "(preference) likes 蜀香园 [a=b, restaurant_name=蜀香园]") {
		t.Errorf("memory block: %q", msgs[1].Content)
	}
	bd := b.breakdown(tk)
	if bd.GetHistory() != 17 || bd.GetToolSchemas() != 40 || bd.GetCurrentMessage() != 5 {
		t.Errorf("breakdown %v", bd)
	}
	sum := bd.GetSystemPrompt() + bd.GetToolSchemas() + bd.GetMemory() + bd.GetSummary() + bd.GetPinned() + bd.GetTaskState() + bd.GetHistory() + bd.GetCurrentMessage()
	if bd.GetTotal() != sum || bd.GetMemory() == 0 || bd.GetTaskState() == 0 {
		t.Errorf("total %d, blocks sum %d: %v", bd.GetTotal(), sum, bd)
	}
	// Empty blocks are left out, not sent as empty system messages.
	empty := contextBlocks{systemPrompt: "sys", current: []model.Message{{Role: model.RoleUser, Content: "x"}}}
	if n := len(empty.messages()); n != 2 {
		t.Errorf("%d messages for system prompt and current message", n)
	}
}

// TestTaskStateLeavesOutStepsInWindow: a step whose call the window still shows with its result
// is not repeated in the task state, nor are older records of that call; a step trimmed out of
// the window is, and so is one whose result in the window pair repair made up.
func TestTaskStateLeavesOutStepsInWindow(t *testing.T) {
	step := func(id, tool, args string) Step {
		return Step{Tool: tool, Arguments: args, Result: "r-" + id, CallID: id}
	}
	done := []Step{
		step("c1", "add_to_cart", `{"sku":"A1"}`), // trimmed
		step("c2", "weather", `{"city":"上海"}`),    // older record of c5's call
		step("c3", "report", `{"day":1}`),         // in the window
		step("c4", "weather", `{"city":"北京"}`),    // its result synthesized: unanswered
		step("c5", "weather", `{"city":"上海"}`),    // in the window
	}
	window := []*sessionv1.Message{
		{Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: "hi"},
		{Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "c3"},
		{Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "c3", Content: "{}"},
		{Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "c5"},
		{Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "c5", Content: "{}"},
		// A result pair repair made up: the model saw no result of c4.
		{Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "c4"},
		{Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "c4", Synthesized: true},
	}
	seen := answeredCalls(window)
	if diff := cmp.Diff(map[string]bool{"c3": true, "c5": true}, seen); diff != "" {
		t.Fatalf("answered calls (-want +got):\n%s", diff)
	}
	tests := []struct {
		name      string
		st        TaskState
		max       int
		wantShown int
		want      []string // in the block
		wantNot   []string
	}{
		{"trimmed and unanswered steps only", TaskState{Done: done}, 12, 2,
			[]string{"Steps done (do not repeat", `add_to_cart {"sku":"A1"} → r-c1`, `weather {"city":"北京"} → r-c4`},
			[]string{"r-c2", "r-c3", "r-c5"}},
		{"the count leaves out what the window shows", TaskState{Done: done}, 1, 1,
			[]string{"1 of 2 shown", "r-c4"}, []string{"r-c1", "r-c3"}},
		{"every step in the window, something pending", TaskState{Done: done[2:3], Pending: []Pending{{What: "pay"}}}, 12, 0,
			[]string{"Pending:\n- pay"}, []string{"Steps done", "r-c3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text, shown := renderTaskState(tc.st, tc.max, seen)
			if shown != tc.wantShown {
				t.Errorf("shown %d, want %d:\n%s", shown, tc.wantShown, text)
			}
			checkText(t, "the block", text, tc.want, tc.wantNot)
		})
	}
	if text, n := renderTaskState(TaskState{Done: done[2:3]}, 12, seen); text != "" || n != 0 {
		t.Errorf("every step in the window and nothing pending: rendered %q", text)
	}
	if answeredCalls(window[:1]) != nil {
		t.Error("a window without results should give no set")
	}
}

// checkText fails t for each of want that text lacks and each of not that it has; what names
// the text in the messages.
func checkText(t *testing.T, what, text string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
	for _, n := range not {
		if strings.Contains(text, n) {
			t.Errorf("%s has %q:\n%s", what, n, text)
		}
	}
}

func TestPickSteps(t *testing.T) {
	mk := func(tool, args string, idem bool) Step {
		s := Step{Tool: tool, Arguments: args}
		if idem {
			s.IdempotencyKey = "k-" + args
		}
		return s
	}
	all := []Step{
		mk("add_to_cart", `{"sku":"A1"}`, true),
		mk("report", `1`, false),
		mk("report", `2`, false),
		mk("report", `2`, false),
		mk("pay", `{"order":1}`, true),
		mk("report", `3`, false),
	}
	var got []string
	for _, s := range pickSteps(all, 3, nil) {
		got = append(got, s.Tool+" "+s.Arguments)
	}
	want := []string{`add_to_cart {"sku":"A1"}`, `pay {"order":1}`, `report 3`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if n := len(pickSteps(all, 10, nil)); n != 5 {
		t.Errorf("%d steps with room for all, want 5 (one duplicate dropped)", n)
	}
	text, shown := renderTaskState(TaskState{Done: all, Pending: []Pending{{What: "book a table"}}}, 3, nil)
	if shown != 3 || !strings.Contains(text, "3 of 6 shown") || !strings.Contains(text, "Pending:\n- book a table") {
		t.Errorf("rendered %d:\n%s", shown, text)
	}
	if text, n := renderTaskState(TaskState{}, 3, nil); text != "" || n != 0 {
		t.Errorf("empty task state rendered %q", text)
	}
}

func TestToolResultContent(t *testing.T) {
	tests := []struct {
		name string
		r    *toolsv1.ToolResult
		want string
	}{
		{"json output", &toolsv1.ToolResult{Success: true, Output: `{"a":"<b>"}`}, `{"success":true,"output":{"a":"<b>"}}`},
		{"text output", &toolsv1.ToolResult{Success: true, Output: `not json`}, `{"success":true,"output":"not json"}`},
		{"replayed", &toolsv1.ToolResult{Success: true, Output: `1`, Replayed: true}, `{"success":true,"output":1,"replayed":true,"note":"this step was already done earlier in the session; this is its recorded result and it did not run again"}`},
		{"validation", &toolsv1.ToolResult{Error: &toolsv1.ToolError{Code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION, Message: "fix it", Violations: []*toolsv1.Violation{{Pointer: "/party_size", Message: "is required"}}}},
			`{"success":false,"error":{"code":"validation","message":"fix it","violations":[{"pointer":"/party_size","message":"is required"}]}}`},
		{"cancelled", &toolsv1.ToolResult{Error: &toolsv1.ToolError{Message: "cancelled: …"}}, `{"success":false,"error":{"code":"cancelled","message":"cancelled: …"}}`},
	}
	for _, tc := range tests {
		if got := toolResultContent(tc.r); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestSummaryParseRender(t *testing.T) {
	d := summaryDoc{Goal: "book dinner", Decisions: []string{"done: search"}, Facts: []string{"user said: 4 people"}, OpenItems: []string{"pay"}}
	if diff := cmp.Diff(d, parseSummary(d.render())); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	foreign := parseSummary("The user wants dinner.\nThey like 川菜.")
	if len(foreign.Facts) != 1 || !strings.Contains(foreign.Facts[0], "They like 川菜.") {
		t.Errorf("foreign summary: %+v", foreign)
	}
	if _, err := decodeSummary("sure! here it is"); err == nil {
		t.Error("a reply without JSON was accepted")
	}
	if _, err := decodeSummary(`{"goal":"","decisions":[],"facts":[],"open_items":[]}`); err == nil {
		t.Error("an empty summary was accepted")
	}
	got, err := decodeSummary("```json\n{\"goal\":\"x\",\"facts\":[\"a\\nb\"]}\n```")
	if err != nil || got.Goal != "x" || got.Facts[0] != "a b" {
		t.Errorf("fenced reply: %+v, %v", got, err)
	}
}

// TestSummaryFallback: the extractive fallback is deterministic, keeps the previous summary,
// records tool steps as done and leaves a failed step open until it succeeds.
func TestSummaryFallback(t *testing.T) {
	s := &summarizer{tok: tok(t), cfg: Config{}.withDefaults(), log: slog.Default(), now: time.Now}
	evicted := []*sessionv1.Message{
		{Seq: 5, Role: sessionv1.Role_ROLE_USER, Content: "我想订蜀香园，4个人"},
		{Seq: 6, Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "c1", ToolName: "book", Content: `{"party":"four"}`},
		{Seq: 7, Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "c1", ToolName: "book", Content: `{"success":false,"error":{"code":"validation","message":"party must be an integer"}}`},
		{Seq: 8, Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "c2", ToolName: "search", Content: `{"q":"蜀香园"}`},
		{Seq: 9, Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "c2", ToolName: "search", Content: `{"success":true,"output":{"id":"R-001"}}`},
		{Seq: 10, Role: sessionv1.Role_ROLE_ASSISTANT, Content: "找到了。要订吗？"},
	}
	prev := summaryDoc{Goal: "dinner", Facts: []string{"user said: hello"}}.render()
	r := s.extend(context.Background(), "m", prev, evicted)
	want := "Goal: dinner\n" +
		"Decisions and steps done:\n" +
		"- done: search {\"q\":\"蜀香园\"} → {\"id\":\"R-001\"}\n" +
		"- assistant answered: 找到了。\n" +
		"Facts:\n" +
		"- user said: hello\n" +
		"- user said: 我想订蜀香园，4个人\n" +
		"Open items:\n" +
		"- book {\"party\":\"four\"} failed: validation: party must be an integer"
	if !r.fallback || r.reason != "no model configured" {
		t.Errorf("fallback=%v reason=%q", r.fallback, r.reason)
	}
	if diff := cmp.Diff(want, r.text); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The cap drops the oldest items first.
	s.cfg.SummaryMaxTokens = 40
	small := s.extend(context.Background(), "m", prev, evicted)
	if n := s.tok.Count(small.text); n > 40 || !strings.Contains(small.text, "Goal: dinner") {
		t.Errorf("capped summary has %d tokens:\n%s", n, small.text)
	}
}

func TestSummaryBackoff(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := &summarizer{cfg: Config{SummaryFailures: 2, SummaryBackoff: time.Minute}.withDefaults(), now: func() time.Time { return now }}
	fail := status.Error(codes.Unavailable, "down")
	s.record(fail)
	if s.backingOff() {
		t.Fatal("backing off after one failure")
	}
	s.record(fail)
	if !s.backingOff() {
		t.Fatal("not backing off after two failures")
	}
	now = now.Add(73 * time.Second) // a minute, +20% jitter at most
	if s.backingOff() {
		t.Fatal("still backing off after the first back-off passed")
	}
	s.record(fail) // third failure in a row: two minutes, -20% jitter at least
	now = now.Add(90 * time.Second)
	if !s.backingOff() {
		t.Fatal("the back-off did not double")
	}
	s.record(nil)
	if s.backingOff() {
		t.Fatal("a success did not reset the back-off")
	}
}

// TestSummaryBackoffSpreadAndCap: the pauses of replicas that failed together are spread, and a
// long run of failures never pauses longer than maxSummaryBackoff.
func TestSummaryBackoffSpreadAndCap(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	seen := map[time.Duration]bool{}
	for range 50 {
		s := &summarizer{cfg: Config{SummaryFailures: 1, SummaryBackoff: time.Minute}.withDefaults(), now: func() time.Time { return now }}
		s.record(errors.New("down"))
		seen[s.until.Sub(now)] = true
	}
	if len(seen) < 10 {
		t.Errorf("50 replicas' first pauses take %d values; want them spread", len(seen))
	}
	s := &summarizer{cfg: Config{SummaryFailures: 1, SummaryBackoff: time.Minute}.withDefaults(), now: func() time.Time { return now }}
	for range 40 {
		s.record(errors.New("down"))
		if d := s.until.Sub(now); d > maxSummaryBackoff || d < time.Minute*8/10 {
			t.Fatalf("after %d failures the pause is %s, want within [48s, %s]", s.failures, d, maxSummaryBackoff)
		}
	}
}

func TestModelError(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		err  error
		code codes.Code
	}{
		{&model.APIError{StatusCode: 503}, codes.Unavailable},
		{&model.APIError{StatusCode: 429}, codes.Unavailable},
		{&model.APIError{StatusCode: 401}, codes.FailedPrecondition},
		{&model.APIError{StatusCode: 404}, codes.FailedPrecondition},
		{&model.APIError{StatusCode: 400}, codes.FailedPrecondition},
		{model.ErrUnreachable, codes.Unavailable},
	}
	for _, tc := range tests {
		var te *turnError
		if err := modelError(ctx, tc.err); !asTurnError(err, &te) || te.code != tc.code {
			t.Errorf("modelError(%v) = %v, want %s", tc.err, err, tc.code)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := modelError(cctx, model.ErrUnreachable); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
}

func asTurnError(err error, te **turnError) bool {
	e, ok := err.(*turnError)
	*te = e
	return ok
}

// TestTaskLinesCount: the task state counted line by line (memoized across turns) stays within
// a token per line of counting the block whole, as the block grows and its numbers shift.
func TestTaskLinesCount(t *testing.T) {
	tk, err := tokenizer.New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	var lines taskLines
	var st TaskState
	results := []string{"87", `{"total": 42.5, "currency": "EUR"}`, "已订好：蜀香园，周五 19:00，4 位。", "error: timeout  ", "ok."}
	for i := range 30 {
		st.Done = append(st.Done, Step{Tool: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d*7+3"}`, i), Result: results[i%len(results)], IdempotencyKey: fmt.Sprint(i % 2)})
		if i%7 == 3 {
			st.Pending = append(st.Pending, Pending{What: fmt.Sprintf("book table %d", i)})
		}
		block, _ := renderTaskState(st, 12, nil)
		got, whole := int(lines.count(tk, block)), tk.CountMessage(block)
		if slack := strings.Count(block, "\n") + 1; got < whole-slack || got > whole+slack {
			t.Errorf("after %d steps: %d tokens counted by line, %d whole; want within %d", i+1, got, whole, slack)
		}
	}
	if n := len(lines.n); n > 60 {
		t.Errorf("%d lines memoized for 30 steps; the step numbers should not be part of the key", n)
	}
}

// renderTaskStateFmt is renderTaskState as it was written with fmt, the reference its
// allocation-lean form must match byte for byte.
func renderTaskStateFmt(st TaskState, maxSteps int) (string, int) {
	done := pickSteps(st.Done, maxSteps, nil)
	if len(done) == 0 && len(st.Pending) == 0 {
		return "", 0
	}
	var b strings.Builder
	b.WriteString(taskStateHeading)
	if len(done) > 0 {
		if hidden := len(st.Done) - len(done); hidden > 0 {
			fmt.Fprintf(&b, "\nSteps done (%d of %d shown; do not repeat them, reuse their results):", len(done), len(st.Done))
		} else {
			b.WriteString("\nSteps done (do not repeat them, reuse their results):")
		}
		for i, s := range done {
			fmt.Fprintf(&b, "\n%d. %s %s → %s", i+1, s.Tool, clipRunes(s.Arguments, 200), s.Result)
		}
	}
	if len(st.Pending) > 0 {
		b.WriteString("\nPending:")
		for _, p := range st.Pending {
			fmt.Fprintf(&b, "\n- %s", p.What)
		}
	}
	return b.String(), len(done)
}

// clipRunes is clip without its shortcut for short text.
func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func TestRenderTaskStateMatchesFmt(t *testing.T) {
	steps := func(n int, args string) []Step {
		var out []Step
		for i := range n {
			out = append(out, Step{Tool: fmt.Sprintf("tool_%d", i%4), Arguments: fmt.Sprintf(`{"n":%d,"a":%q}`, i, args), Result: fmt.Sprintf("result %d ✓", i)})
		}
		return out
	}
	tests := []struct {
		name string
		st   TaskState
		max  int
	}{
		{"empty", TaskState{}, 12},
		{"all shown", TaskState{Done: steps(3, "x")}, 12},
		{"some hidden, pending", TaskState{Done: steps(30, "y"), Pending: []Pending{{What: "book a table"}, {What: "支付"}}}, 12},
		{"pending only", TaskState{Pending: []Pending{{What: "call back"}}}, 12},
		{"long arguments are clipped by characters", TaskState{Done: steps(2, strings.Repeat("北京", 150))}, 12},
		{"arguments of exactly 200 bytes", TaskState{Done: []Step{{Tool: "t", Arguments: strings.Repeat("a", 200), Result: "r"}}}, 12},
		{"arguments of 201 bytes, 200 characters", TaskState{Done: []Step{{Tool: "t", Arguments: "é" + strings.Repeat("a", 199), Result: "r"}}}, 12},
		{"more than a hundred steps shown", TaskState{Done: steps(150, "z")}, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, wantN := renderTaskStateFmt(tc.st, tc.max)
			got, n := renderTaskState(tc.st, tc.max, nil)
			if diff := cmp.Diff(want, got); diff != "" || n != wantN {
				t.Errorf("shown %d, want %d; text (-fmt +ours):\n%s", n, wantN, diff)
			}
		})
	}
}

// BenchmarkRenderTaskState renders a long session's task state (12 of 200 steps shown), as
// every turn does; fmt is the reference's cost.
func BenchmarkRenderTaskState(b *testing.B) {
	var st TaskState
	for i := range 200 {
		st.Done = append(st.Done, Step{Tool: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d+%d"}`, i, i), Result: fmt.Sprint(2 * i)})
	}
	for _, impl := range []struct {
		name   string
		render func(TaskState, int) (string, int)
	}{{"fmt", renderTaskStateFmt}, {"lean", func(st TaskState, n int) (string, int) { return renderTaskState(st, n, nil) }}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				impl.render(st, 12)
			}
		})
	}
}
