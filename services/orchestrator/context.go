package orchestrator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Headings of the system blocks. The memory heading tells the model the memories may not apply,
// as the article asks.
const (
	memoryHeading    = "Memories recalled from earlier conversations with this user. They may not apply to this request: use one only when it is relevant, and what the user says now always takes precedence."
	pinnedHeading    = "Messages the user asked to keep, from earlier in this conversation:"
	summaryHeading   = "Summary of the earlier conversation (older messages are no longer shown):"
	taskStateHeading = "Task state of this session, kept by the orchestrator so that trimming the conversation never loses it."
)

// contextBlocks is what one model request is assembled from, in order: system prompt, recalled
// memories, pinned sticky messages, rolling summary, task state, the window before the current
// message, and the current turn (the user's message and this turn's steps so far).
type contextBlocks struct {
	systemPrompt string
	memory       string
	pinned       string
	summary      string
	taskState    string
	history      []model.Message
	// historyTokens is the session's count of the window before the current message.
	historyTokens int
	current       []model.Message
	// currentTokens is the session's count of the current turn's stored messages: they were
	// counted when they were appended, and are not counted again.
	currentTokens int32
	tools         []model.Tool
	toolTokens    int

	// counted memoizes the system blocks' token counts: they stay the same for all steps of a
	// turn. The task state's count is set when it is rendered (taskLines).
	counted map[string]int32
}

// stepRoom is how many messages more than the first step's the request's list is made for.
const stepRoom = 8

// messages is the request's message list.
func (b *contextBlocks) messages() []model.Message { return b.appendMessages(nil) }

// appendMessages appends the request's message list to out.
func (b *contextBlocks) appendMessages(out []model.Message) []model.Message {
	// Room for a few steps more: the list is rebuilt in place for each step of the turn, and
	// each step adds its messages to current.
	if need := 5 + len(b.history) + len(b.current); cap(out) < need {
		out = make([]model.Message, 0, need+stepRoom)
	}
	for _, s := range [...]string{b.systemPrompt, b.memory, b.pinned, b.summary, b.taskState} {
		if s != "" {
			out = append(out, model.Message{Role: model.RoleSystem, Content: s})
		}
	}
	out = append(out, b.history...)
	return append(out, b.current...)
}

// breakdown counts each block's tokens the way a chat request carries them.
func (b *contextBlocks) breakdown(tok *tokenizer.Tokenizer) *orchestratorv1.TokenBreakdown {
	if b.counted == nil {
		b.counted = map[string]int32{}
	}
	sys := func(s string) int32 {
		if s == "" {
			return 0
		}
		n, ok := b.counted[s]
		if !ok {
			n = int32(tok.CountMessage(s))
			b.counted[s] = n
		}
		return n
	}
	t := &orchestratorv1.TokenBreakdown{
		SystemPrompt:   sys(b.systemPrompt),
		ToolSchemas:    int32(b.toolTokens),
		Memory:         sys(b.memory),
		Summary:        sys(b.summary),
		Pinned:         sys(b.pinned),
		TaskState:      sys(b.taskState),
		History:        int32(b.historyTokens),
		CurrentMessage: b.currentTokens,
	}
	t.Total = t.SystemPrompt + t.ToolSchemas + t.Memory + t.Summary + t.Pinned + t.TaskState + t.History + t.CurrentMessage
	return t
}

// taskLines counts the task-state block line by line, memoizing each line's count across turns:
// the block changes every turn (a step is added, the numbers shift) but its lines mostly do not,
// and counting it whole was 3% of a turn's CPU. The count is the sum of the lines' counts plus
// one token per line break, which may differ from counting the block whole by a token where a
// line ends in punctuation — it feeds the token breakdown and the prompt estimate only.
type taskLines struct {
	mu sync.Mutex // guards n and key
	// n holds the counts by line (its step number cut off and, with the encodings where a
	// number's count depends only on its length, every digit written as 0); cleared when it
	// reaches maxTaskLines.
	n map[string]int32
	// key is the buffer a line's key is built in.
	key []byte
}

// The memo holds at most maxTaskLines lines of at most maxTaskLineBytes (a longer line, with a
// tool's long arguments, is counted each time): about 4 MiB.
const (
	maxTaskLines     = 8192
	maxTaskLineBytes = 512
)

// count returns the block's token count as a message.
func (l *taskLines) count(tok *tokenizer.Tokenizer, block string) int32 {
	if block == "" {
		return 0
	}
	total := int32(tokenizer.MessageOverhead)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil || len(l.n) >= maxTaskLines {
		l.n = map[string]int32{}
	}
	shape := numbersAreTokens(tok)
	for i, line := range strings.Split(block, "\n") {
		if i > 0 {
			total++ // the line break
		}
		// "12. tool …": the number and its dot are two tokens below 1000; the rest is memoized.
		if dot := strings.Index(line, ". "); dot > 0 && dot <= 3 && strings.Trim(line[:dot], "0123456789") == "" {
			total += 2
			line = line[dot+1:]
		}
		// The heading's "(12 of 57 shown" and a calculation's numbers change every turn: keyed
		// by their shape, a line like an earlier one is not counted again.
		var n int32
		var ok bool
		if shape {
			l.key = numberShape(l.key[:0], line)
			n, ok = l.n[string(l.key)] // no copy for a lookup
		} else {
			n, ok = l.n[line]
		}
		if !ok {
			key := line
			if shape {
				key = string(l.key)
			}
			// Counted outside the lock: other turns' lines need not wait for this one.
			l.mu.Unlock()
			n = int32(tok.Count(key))
			l.mu.Lock()
			if len(key) <= maxTaskLineBytes {
				if len(l.n) >= maxTaskLines {
					l.n = map[string]int32{}
				}
				l.n[key] = n
			}
		}
		total += n
	}
	return total
}

// numbersAreTokens reports whether the tokenizer's encoding splits runs of digits into pieces
// of three from the left, and has every string of one to three digits as one token (o200k_base,
// cl100k_base; not the GPT-2 ones): there a number's count depends only on its length.
func numbersAreTokens(tok *tokenizer.Tokenizer) bool {
	switch tok.Name() {
	case "o200k_base", "cl100k_base":
		return true
	}
	return false
}

// numberShape appends line to dst with every ASCII digit written as 0.
func numberShape(dst []byte, line string) []byte {
	for i := 0; i < len(line); i++ {
		c := line[i]
		if isDigit(c) {
			c = '0'
		}
		dst = append(dst, c)
	}
	return dst
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// toolSchemaTokens is what a tool's schema costs in a request, as the tool service counted it
// or, failing that, counted here.
func toolSchemaTokens(tok *tokenizer.Tokenizer, t *toolsv1.Tool) int {
	if n := t.GetSchemaTokens(); n > 0 {
		return int(n)
	}
	s := t.GetSpec()
	return tok.Count(s.GetName()) + tok.Count(s.GetDescription()) + tok.Count(s.GetInputSchema()) + tokenizer.MessageOverhead
}

// modelTools turns tool specs into model tool definitions.
func modelTools(tools []*toolsv1.Tool) []model.Tool {
	out := make([]model.Tool, 0, len(tools))
	for _, t := range tools {
		s := t.GetSpec()
		params := json.RawMessage(s.GetInputSchema())
		if !json.Valid(params) {
			params = json.RawMessage(`{"type":"object"}`)
		}
		out = append(out, model.Tool{Name: s.GetName(), Description: s.GetDescription(), Parameters: params})
	}
	return out
}

// sessionToModel converts session messages to chat messages: consecutive tool_call messages
// become one assistant message with several calls (with the assistant text right before them,
// if any), tool results become tool messages.
func sessionToModel(msgs []*sessionv1.Message) []model.Message {
	out := make([]model.Message, 0, len(msgs))
	for _, m := range msgs {
		switch m.GetKind() {
		case sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL:
			call := model.ToolCall{ID: m.GetToolCallId(), Name: m.GetToolName(), Arguments: m.GetContent()}
			if n := len(out); n > 0 && out[n-1].Role == model.RoleAssistant {
				out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
				continue
			}
			out = append(out, model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{call}})
		case sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT:
			out = append(out, model.Message{Role: model.RoleTool, ToolCallID: m.GetToolCallId(), Content: m.GetContent()})
		default:
			role := model.RoleUser
			switch m.GetRole() {
			case sessionv1.Role_ROLE_ASSISTANT:
				role = model.RoleAssistant
			case sessionv1.Role_ROLE_SYSTEM:
				role = model.RoleSystem
			case sessionv1.Role_ROLE_TOOL:
				role = model.RoleTool
			}
			out = append(out, model.Message{Role: role, Content: m.GetContent()})
		}
	}
	return out
}

// renderMemories is the one system message that carries recalled memories.
func renderMemories(mems []*memoryv1.RecalledMemory) string {
	if len(mems) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(memoryHeading)
	for _, r := range mems {
		m := r.GetMemory()
		// The date the fact or event happened, so "when did I…" can be answered from memory.
		when := m.GetOccurredAt()
		if when == nil {
			when = m.GetCreatedAt()
		}
		date := ""
		if when != nil {
			date = ", " + when.AsTime().UTC().Format("2006-01-02")
		}
		fmt.Fprintf(&b, "\n- (%s%s) %s", memoryTypeName(m.GetType()), date, strings.TrimSpace(m.GetContent()))
		if attrs := m.GetAttributes(); len(attrs) > 0 {
			keys := make([]string, 0, len(attrs))
			for k := range attrs {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = k + "=" + attrs[k]
			}
			fmt.Fprintf(&b, " [%s]", strings.Join(parts, ", "))
		}
	}
	return b.String()
}

func memoryTypeName(t memoryv1.MemoryType) string {
	s := strings.TrimPrefix(t.String(), "MEMORY_TYPE_")
	return strings.ToLower(s)
}

// renderPinned carries sticky messages older than the window in one system message.
func renderPinned(msgs []*sessionv1.Message) string {
	if len(msgs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(pinnedHeading)
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n- %s: %s", roleName(m.GetRole()), strings.TrimSpace(m.GetContent()))
	}
	return b.String()
}

func renderSummary(s *sessionv1.Message) string {
	if s == nil || strings.TrimSpace(s.GetContent()) == "" {
		return ""
	}
	return summaryHeading + "\n" + s.GetContent()
}

// renderTaskState shows done steps with their key results and what is pending. When there are
// more steps than fit, steps of idempotent tools (the ones that must not run twice: payments,
// orders, add-to-cart) are kept first, then the newest others; the shown steps stay in order.
// Steps whose call the conversation still shows with its result (seen, by call id) are left
// out, and so are older records of the same call: the block is there for what trimming took out
// of the window, and a step the model can read in the window would be in its context twice.
func renderTaskState(st TaskState, maxSteps int, seen map[string]bool) (string, int) {
	done := pickSteps(st.Done, maxSteps, seen)
	if len(done) == 0 && len(st.Pending) == 0 {
		return "", 0
	}
	// The steps the block could show: not a call the window answers, nor an older record of one.
	candidates := len(st.Done)
	if len(seen) > 0 {
		type call struct{ tool, args string }
		inWindow := make(map[call]bool, len(seen))
		for _, s := range st.Done {
			if seen[s.CallID] {
				inWindow[call{s.Tool, s.Arguments}] = true
			}
		}
		for _, s := range st.Done {
			if inWindow[call{s.Tool, s.Arguments}] {
				candidates--
			}
		}
	}
	// Written piece by piece into a buffer of about the block's size: it is rendered every turn.
	size := len(taskStateHeading) + 96
	for _, s := range done {
		size += 16 + len(s.Tool) + min(len(s.Arguments), 204) + len(s.Result)
	}
	for _, p := range st.Pending {
		size += 3 + len(p.What)
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(taskStateHeading)
	if len(done) > 0 {
		if hidden := candidates - len(done); hidden > 0 {
			b.WriteString("\nSteps done (")
			b.WriteString(strconv.Itoa(len(done)))
			b.WriteString(" of ")
			b.WriteString(strconv.Itoa(candidates))
			b.WriteString(" shown; do not repeat them, reuse their results):")
		} else {
			b.WriteString("\nSteps done (do not repeat them, reuse their results):")
		}
		for i, s := range done {
			b.WriteString("\n")
			b.WriteString(strconv.Itoa(i + 1))
			b.WriteString(". ")
			b.WriteString(s.Tool)
			b.WriteString(" ")
			b.WriteString(clip(s.Arguments, 200))
			b.WriteString(" → ")
			b.WriteString(s.Result)
		}
	}
	if len(st.Pending) > 0 {
		b.WriteString("\nPending:")
		for _, p := range st.Pending {
			b.WriteString("\n- ")
			b.WriteString(p.What)
		}
	}
	return b.String(), len(done)
}

// pickSteps chooses at most n steps: a step repeated with the same tool and arguments counts
// once (its newest record), idempotent-tool steps first, then the newest others, in their order.
// A call whose newest record is seen (its call id in seen) is not chosen.
// It allocates only what it returns and compares a step with the newer ones only when it could
// be chosen: a session keeps up to TaskStateSteps (200) steps while n is about a dozen, and a map
// of all of them, built every turn, made the turn's cost grow with the session.
func pickSteps(all []Step, n int, seen map[string]bool) []Step {
	if n <= 0 || len(all) == 0 {
		return nil
	}
	// newest reports whether all[i] is the newest record of its call.
	newest := func(i int) bool {
		for j := i + 1; j < len(all); j++ {
			if all[j].Tool == all[i].Tool && all[j].Arguments == all[i].Arguments {
				return false
			}
		}
		return true
	}
	picked := make([]int, 0, min(n, len(all)))
	for _, idempotent := range []bool{true, false} {
		for i := len(all) - 1; i >= 0 && len(picked) < n; i-- {
			if (all[i].IdempotencyKey != "") == idempotent && !seen[all[i].CallID] && newest(i) {
				picked = append(picked, i)
			}
		}
	}
	slices.Sort(picked)
	out := make([]Step, len(picked))
	for k, i := range picked {
		out[k] = all[i]
	}
	return out
}

// toolResultContent is what a tool message carries: the article's {"success", "output"} or
// {"success": false, "error"} envelope, so the model can correct invalid arguments.
func toolResultContent(r *toolsv1.ToolResult) string {
	type violation struct {
		Pointer string `json:"pointer"`
		Message string `json:"message"`
	}
	type toolErr struct {
		Code       string      `json:"code"`
		Message    string      `json:"message"`
		Violations []violation `json:"violations,omitempty"`
	}
	env := struct {
		Success   bool            `json:"success"`
		Output    json.RawMessage `json:"output,omitempty"`
		Error     *toolErr        `json:"error,omitempty"`
		Truncated bool            `json:"truncated,omitempty"`
		Replayed  bool            `json:"replayed,omitempty"`
		Note      string          `json:"note,omitempty"`
	}{Success: r.GetSuccess(), Truncated: r.GetTruncated(), Replayed: r.GetReplayed()}
	if r.GetSuccess() {
		out := r.GetOutput()
		if !json.Valid([]byte(out)) {
			b, _ := json.Marshal(out)
			out = string(b)
		}
		env.Output = json.RawMessage(out)
		if r.GetReplayed() {
			env.Note = "this step was already done earlier in the session; this is its recorded result and it did not run again"
		}
	} else {
		e := r.GetError()
		te := &toolErr{Code: failureCode(r), Message: e.GetMessage()}
		for _, v := range e.GetViolations() {
			te.Violations = append(te.Violations, violation{Pointer: v.GetPointer(), Message: v.GetMessage()})
		}
		env.Error = te
	}
	return marshalNoEscape(env)
}

// marshalNoEscape is json.Marshal without HTML escaping, so <, > and & stay readable for the
// model.
func marshalNoEscape(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "{}"
	}
	return strings.TrimRight(buf.String(), "\n")
}

// failureCode names why a call failed: the tool service's code, or "cancelled" for a call the
// turn's end cut off.
func failureCode(r *toolsv1.ToolResult) string {
	if r.GetSuccess() {
		return ""
	}
	if c := errorCodeName(r.GetError().GetCode()); c != "" {
		return c
	}
	return "cancelled"
}

// errorCodeName is "validation" for ERROR_CODE_VALIDATION.
func errorCodeName(c toolsv1.ErrorCode) string {
	if c == toolsv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(c.String(), "ERROR_CODE_"))
}
