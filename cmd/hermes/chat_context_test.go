package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

func TestShareWidths(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tokens []int32
		want   []int
	}{
		{"proportional", []int32{30, 60, 10, 0, 0, 0, 0, 0}, []int{18, 36, 6, 0, 0, 0, 0, 0}},
		{"largest remainder fills the width", []int32{1, 1, 1, 0, 0, 0, 0, 0}, []int{20, 20, 20, 0, 0, 0, 0, 0}},
		{"a tiny block still shows", []int32{1, 10000, 0, 0, 0, 0, 0, 0}, []int{1, 59, 0, 0, 0, 0, 0, 0}},
		{"empty", []int32{0, 0, 0, 0, 0, 0, 0, 0}, []int{0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := contextBlocks(&orchestratorv1.TokenBreakdown{})
			var total int32
			for i := range b {
				b[i].tokens = tc.tokens[i]
				total += tc.tokens[i]
			}
			if diff := cmp.Diff(tc.want, shareWidths(b, total, 60)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderEvicted(t *testing.T) {
	user, assistant, tool := sessionv1.Role_ROLE_USER, sessionv1.Role_ROLE_ASSISTANT, sessionv1.Role_ROLE_TOOL
	msgs := []*sessionv1.Message{
		{Seq: 1, Role: user, Content: "我对花生过敏", Sticky: true},
		{Seq: 2, Role: assistant, Content: "记住了"},
		{Seq: 3, Role: user, Content: "find a Sichuan restaurant"},
		{Seq: 4, Role: assistant, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolName: "search", Content: `{"cuisine":"sichuan"}`},
		{Seq: 5, Role: tool, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolName: "search", Content: `{"results":["蜀香园"]}`},
		{Seq: 6, Role: assistant, Content: "蜀香园 has a table."},
		{Seq: 7, Role: user, Content: "book it"},
	}
	var out bytes.Buffer
	renderEvicted(&out, msgs, false, &orchestratorv1.ContextAssembled{WindowTurns: 1, SummaryThroughSeq: 3})
	want := []string{
		"Evicted: 6 messages before the window of 1 turn, #1–#6: 2 in the summary, 1 pinned, 3 not summarised yet",
		"#1    user                   我对花生过敏",
		"[pinned]",
		"#5    tool search            {\"results\":[\"蜀香园\"]}",
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("lacks %q:\n%s", w, out.String())
		}
	}
	if strings.Contains(out.String(), "book it") {
		t.Errorf("the current turn is listed as evicted:\n%s", out.String())
	}
	out.Reset()
	renderEvicted(&out, msgs, false, &orchestratorv1.ContextAssembled{WindowTurns: 12})
	if got := out.String(); got != "Evicted: none (every turn of the session is in the window)\n" {
		t.Errorf("window of 12: %q", got)
	}
}
