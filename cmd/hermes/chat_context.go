package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app/demo"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// Limits of the /context view.
const (
	// contextBarWidth is the width of the token-share bar.
	contextBarWidth = 60
	// contextMaxMessages caps the messages read to find the evicted ones.
	contextMaxMessages = 10000
	// contextEvictedShown is how many evicted messages are listed (the newest).
	contextEvictedShown = 12
)

// contextBlock is one block of a model request's context.
type contextBlock struct {
	mark, name string
	// color is the ANSI background color of the block's part of the bar.
	color  int
	tokens int32
}

func contextBlocks(t *orchestratorv1.TokenBreakdown) []contextBlock {
	return []contextBlock{
		{"S", "system prompt", 44, t.GetSystemPrompt()},
		{"T", "tool schemas", 45, t.GetToolSchemas()},
		{"M", "memories", 42, t.GetMemory()},
		{"Σ", "summary", 43, t.GetSummary()},
		{"P", "pinned", 41, t.GetPinned()},
		{"K", "task state", 46, t.GetTaskState()},
		{"H", "history", 47, t.GetHistory()},
		{"C", "current message", 100, t.GetCurrentMessage()},
	}
}

// showContext is /context: the last turn's context as a bar of token shares per block, the
// memories recalled and why, and the messages evicted from the window.
func (c *chatClient) showContext(ctx context.Context) error {
	t := c.last
	if t == nil || t.started() == nil {
		var err error
		if t, err = c.lastTurnFromServer(ctx); err != nil {
			return err
		}
	}
	var last *orchestratorv1.ContextAssembled
	var memories *orchestratorv1.MemoriesRecalled
	for _, ev := range t.events {
		if a := ev.GetContext(); a != nil {
			last = a
		}
		if m := ev.GetMemories(); m != nil {
			memories = m
		}
	}
	s := t.started()
	if last == nil {
		return errors.New("the last turn ended before its context was assembled")
	}
	renderContext(c.env.stdout, s, last, c.live)
	renderMemories(c.env.stdout, memories)
	msgs, truncated, err := c.messagesThrough(ctx, t.session, s.GetUserMessageSeq())
	if err != nil {
		return fmt.Errorf("reading the session's messages: %w", err)
	}
	renderEvicted(c.env.stdout, msgs, truncated, last)
	return nil
}

// lastTurnFromServer is the session's newest turn, for a session this chat has not run a turn
// in (continued with --session or /use).
func (c *chatClient) lastTurnFromServer(ctx context.Context) (*chatTurn, error) {
	resp, err := c.orch.ListTurns(c.auth(ctx), &orchestratorv1.ListTurnsRequest{SessionId: c.session, UserId: c.user, PageSize: 1})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return nil, errors.New("no turn in this chat yet (and this server cannot list the session's earlier turns)")
	case err != nil:
		return nil, err
	case len(resp.GetTurns()) == 0:
		return nil, errors.New("no turn in this session yet")
	}
	got, err := c.orch.GetTurn(c.auth(ctx), &orchestratorv1.GetTurnRequest{TurnId: resp.GetTurns()[0].GetId(), UserId: c.user})
	if err != nil {
		return nil, err
	}
	return &chatTurn{session: c.session, events: got.GetTurn().GetEvents()}, nil
}

// messagesThrough reads a session's messages up to seq (at most contextMaxMessages, the oldest
// dropped first: truncated says so).
func (c *chatClient) messagesThrough(ctx context.Context, session string, seq int64) (msgs []*sessionv1.Message, truncated bool, err error) {
	token := ""
	for {
		resp, err := c.sessions.ListMessages(c.auth(ctx), &sessionv1.ListMessagesRequest{SessionId: session, UserId: c.user, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, false, err
		}
		for _, m := range resp.GetMessages() {
			if m.GetSeq() > seq {
				return msgs, truncated, nil
			}
			msgs = append(msgs, m)
		}
		if len(msgs) > contextMaxMessages {
			msgs, truncated = msgs[len(msgs)-contextMaxMessages:], true
		}
		if token = resp.GetNextPageToken(); token == "" {
			return msgs, truncated, nil
		}
	}
}

// renderContext draws the token shares of the context's blocks as a bar and a legend.
func renderContext(w io.Writer, s *orchestratorv1.TurnStarted, a *orchestratorv1.ContextAssembled, color bool) {
	tokens := a.GetTokens()
	blocks := contextBlocks(tokens)
	total := tokens.GetTotal()
	fmt.Fprintf(w, "Context of the last model call (turn %s, step %d): %s\n", s.GetTurnId(), a.GetStep(), demo.Plural(int(total), "token", "tokens"))
	widths := shareWidths(blocks, total, contextBarWidth)
	var bar strings.Builder
	for i, b := range blocks {
		cell := strings.Repeat(b.mark, widths[i])
		if color && widths[i] > 0 {
			cell = fmt.Sprintf("\x1b[30;%dm%s\x1b[0m", b.color, cell)
		}
		bar.WriteString(cell)
	}
	fmt.Fprintf(w, "  [%s]\n", bar.String())
	for _, b := range blocks {
		mark := b.mark
		if color {
			mark = fmt.Sprintf("\x1b[30;%dm%s\x1b[0m", b.color, b.mark)
		}
		share := ""
		if total > 0 && b.tokens > 0 {
			share = fmt.Sprintf("%3d%%", (100*b.tokens+total/2)/total)
		}
		fmt.Fprintf(w, "  %s %-16s %6d %s\n", mark, b.name, b.tokens, share)
	}
	summary := "no summary"
	if n := a.GetSummaryThroughSeq(); n > 0 {
		summary = fmt.Sprintf("summary through #%d", n)
	}
	fmt.Fprintf(w, "  window of %s · %s · %s · %s offered (%s)\n",
		demo.Plural(int(a.GetWindowTurns()), "turn", "turns"), demo.Plural(int(a.GetPinnedMessages()), "pinned message", "pinned messages"),
		summary, demo.Plural(len(a.GetTools()), "tool", "tools"), a.GetToolSelection())
}

// shareWidths splits width among the blocks in proportion to their tokens (largest remainder),
// giving every block with tokens at least one cell when there is room.
func shareWidths(blocks []contextBlock, total int32, width int) []int {
	out := make([]int, len(blocks))
	if total <= 0 {
		return out
	}
	used := 0
	rem := make([]float64, len(blocks))
	for i, b := range blocks {
		exact := float64(width) * float64(b.tokens) / float64(total)
		out[i] = int(exact)
		rem[i] = exact - float64(out[i])
		used += out[i]
	}
	for ; used < width; used++ {
		best := -1
		for i, b := range blocks {
			if b.tokens > 0 && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out[best]++
		rem[best] = -1
	}
	// A block with tokens but no cell takes one from the widest.
	for i, b := range blocks {
		if b.tokens > 0 && out[i] == 0 {
			widest := 0
			for j := range out {
				if out[j] > out[widest] {
					widest = j
				}
			}
			if out[widest] > 1 {
				out[widest]--
				out[i] = 1
			}
		}
	}
	return out
}

// renderMemories lists the memories recalled for the turn and why each passed.
func renderMemories(w io.Writer, m *orchestratorv1.MemoriesRecalled) {
	switch {
	case m == nil:
		fmt.Fprintln(w, "Memories: not recalled for this turn")
		return
	case m.GetError() != "":
		fmt.Fprintf(w, "Memories: recall failed (%s); the turn went on without them\n", m.GetError())
		return
	case len(m.GetMemories()) == 0:
		fmt.Fprintln(w, "Memories recalled: none passed the similarity threshold")
		return
	}
	fmt.Fprintf(w, "Memories recalled: %d\n", len(m.GetMemories()))
	for _, r := range m.GetMemories() {
		fmt.Fprintf(w, "  • %s (%s) %s — score %.2f", r.GetId(), r.GetType(), r.GetContent(), r.GetScore())
		if r.GetReason() != "" {
			fmt.Fprintf(w, ", %s", r.GetReason())
		}
		fmt.Fprintln(w)
	}
}

// renderEvicted lists the messages older than the turn's window: those folded into the
// summary, those pinned because they are sticky, and those evicted but not summarised yet.
// The window is the last window_turns turns (a turn starts at a user message), as the
// orchestrator reported for the model call.
func renderEvicted(w io.Writer, msgs []*sessionv1.Message, truncated bool, a *orchestratorv1.ContextAssembled) {
	var starts []int
	for i, m := range msgs {
		if m.GetRole() == sessionv1.Role_ROLE_USER && m.GetKind() != sessionv1.MessageKind_MESSAGE_KIND_SUMMARY {
			starts = append(starts, i)
		}
	}
	window := int(a.GetWindowTurns())
	if window <= 0 || len(starts) <= window {
		fmt.Fprintln(w, "Evicted: none (every turn of the session is in the window)")
		return
	}
	evicted := msgs[:starts[len(starts)-window]]
	through := a.GetSummaryThroughSeq()
	var summarised, pinned int
	for _, m := range evicted {
		switch {
		case m.GetSticky():
			pinned++
		case m.GetSeq() <= through:
			summarised++
		}
	}
	more := ""
	if truncated {
		more = " (and older ones not read)"
	}
	fmt.Fprintf(w, "Evicted: %s before the window of %s%s, #%d–#%d: %d in the summary, %d pinned, %d not summarised yet\n",
		demo.Plural(len(evicted), "message", "messages"), demo.Plural(window, "turn", "turns"), more,
		evicted[0].GetSeq(), evicted[len(evicted)-1].GetSeq(), summarised, pinned, len(evicted)-summarised-pinned)
	shown := evicted[max(0, len(evicted)-contextEvictedShown):]
	if len(shown) < len(evicted) {
		fmt.Fprintf(w, "  … %s before these\n", demo.Plural(len(evicted)-len(shown), "message", "messages"))
	}
	for _, m := range shown {
		fate := "not summarised yet"
		switch {
		case m.GetSticky():
			fate = "pinned"
		case m.GetSeq() <= through:
			fate = "in the summary"
		}
		who := strings.ToLower(strings.TrimPrefix(m.GetRole().String(), "ROLE_"))
		if m.GetToolName() != "" {
			who += " " + m.GetToolName()
		}
		fmt.Fprintf(w, "  #%-4d %-22s %-60s [%s]\n", m.GetSeq(), who, clip(m.GetContent(), 60), fate)
	}
}

// clip is text on one line, at most n runes.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
