package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hermes-agent/hermes/internal/backoff"
	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// SummarySystemPrompt instructs the model that extends the rolling summary. Scripted models in
// tests and the demo recognise summary requests by its first words.
const SummarySystemPrompt = "You maintain the rolling summary of a conversation between a user and an assistant that uses tools. " +
	"You get the current summary and the messages that are leaving the context window. " +
	"Return only a JSON object {\"goal\": string, \"decisions\": [string], \"facts\": [string], \"open_items\": [string]} that merges both: " +
	"the user's overall goal; decisions taken and steps already done (with their key results, so they are not repeated); " +
	"facts the user stated (names, numbers, dates, preferences) and facts tool results established; and what is still open. " +
	"Keep every item short (under 200 characters), drop chit-chat, never invent anything."

// Limits of the summary input and items.
const (
	summaryItemRunes     = 200
	summaryMsgInputRunes = 600
	summaryInputRunes    = 24_000
	maxSummaryBackoff    = 30 * time.Minute
	summaryCallTimeout   = 45 * time.Second
)

// summaryDoc is the structured rolling summary.
type summaryDoc struct {
	Goal      string   `json:"goal"`
	Decisions []string `json:"decisions"`
	Facts     []string `json:"facts"`
	OpenItems []string `json:"open_items"`
}

func (d summaryDoc) empty() bool {
	return d.Goal == "" && len(d.Decisions) == 0 && len(d.Facts) == 0 && len(d.OpenItems) == 0
}

// render writes the summary as the text stored in the session.
func (d summaryDoc) render() string {
	var b strings.Builder
	if d.Goal != "" {
		fmt.Fprintf(&b, "Goal: %s\n", d.Goal)
	}
	section := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s:\n", title)
		for _, it := range items {
			fmt.Fprintf(&b, "- %s\n", it)
		}
	}
	section("Decisions and steps done", d.Decisions)
	section("Facts", d.Facts)
	section("Open items", d.OpenItems)
	return strings.TrimRight(b.String(), "\n")
}

// parseSummary reads back a rendered summary; text in another shape becomes one fact, so a
// summary written by something else is carried, not lost.
func parseSummary(text string) summaryDoc {
	var d summaryDoc
	text = strings.TrimSpace(text)
	if text == "" {
		return d
	}
	var cur *[]string
	recognised := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, " ")
		switch {
		case strings.HasPrefix(line, "Goal: "):
			d.Goal = strings.TrimPrefix(line, "Goal: ")
			recognised = true
		case line == "Decisions and steps done:":
			cur, recognised = &d.Decisions, true
		case line == "Facts:":
			cur, recognised = &d.Facts, true
		case line == "Open items:":
			cur, recognised = &d.OpenItems, true
		case strings.HasPrefix(line, "- ") && cur != nil:
			*cur = append(*cur, strings.TrimPrefix(line, "- "))
		case strings.TrimSpace(line) == "":
		default:
			recognised = false
		}
		if !recognised {
			break
		}
	}
	if !recognised {
		return summaryDoc{Facts: []string{clip(strings.Join(strings.Fields(text), " "), 4*summaryItemRunes)}}
	}
	return d
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s // no more bytes, so no more characters, than n
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// summarizer extends rolling summaries with the model and falls back to a deterministic
// extractive summary when the model fails; after repeated failures it stops asking the model for
// a while (doubling back-off), so a broken endpoint does not add a failing call to every turn.
type summarizer struct {
	model Model
	tok   *tokenizer.Tokenizer
	cfg   Config
	log   *slog.Logger
	now   func() time.Time

	mu       sync.Mutex // guards failures and until
	failures int
	until    time.Time
}

// summaryResult is one extension.
type summaryResult struct {
	text     string
	fallback bool
	// why the fallback was used, empty for a model summary.
	reason string
	usage  model.Usage
	called bool
}

func (s *summarizer) backingOff() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now().Before(s.until)
}

// backoff spaces the summary model's retries after repeated failures: SummaryBackoff doubling
// up to maxSummaryBackoff, spread so replicas that failed together do not all retry together.
func (s *summarizer) backoff() backoff.Policy {
	return backoff.Policy{Initial: s.cfg.SummaryBackoff, Max: maxSummaryBackoff, Jitter: 0.2}
}

func (s *summarizer) record(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.failures, s.until = 0, time.Time{}
		return
	}
	s.failures++
	if s.failures >= s.cfg.SummaryFailures {
		s.until = s.now().Add(s.backoff().Delay(s.failures - s.cfg.SummaryFailures))
	}
}

// extend folds the evicted messages into the previous summary.
func (s *summarizer) extend(ctx context.Context, modelName, prev string, evicted []*sessionv1.Message) summaryResult {
	prevDoc := parseSummary(prev)
	switch {
	case s.model == nil:
		return s.fallback(prevDoc, evicted, "no model configured")
	case s.backingOff():
		return s.fallback(prevDoc, evicted, "summary model backing off after repeated failures")
	}
	if s.cfg.SummaryModel != "" {
		modelName = s.cfg.SummaryModel
	}
	cctx, cancel := context.WithTimeout(ctx, summaryCallTimeout)
	defer cancel()
	resp, err := s.model.Complete(cctx, model.Request{
		Model: modelName,
		JSON:  true,
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: SummarySystemPrompt},
			{Role: model.RoleUser, Content: summaryInput(prev, evicted)},
		},
		MaxTokens: 2 * s.cfg.SummaryMaxTokens,
	})
	var doc summaryDoc
	if err == nil {
		doc, err = decodeSummary(resp.Content)
	}
	if ctx.Err() != nil {
		// The turn itself ended; that says nothing about the model.
		return s.fallback(prevDoc, evicted, "turn ended during the summary call")
	}
	s.record(err)
	if err != nil {
		s.log.Warn("summary model failed; using the extractive fallback", "error", err)
		r := s.fallback(prevDoc, evicted, err.Error())
		if resp != nil {
			r.usage, r.called = resp.Usage, true
		}
		return r
	}
	return summaryResult{text: s.fit(doc).render(), usage: resp.Usage, called: true}
}

// decodeSummary reads the model's JSON; a reply that is not the object, or is empty, is a
// failure.
func decodeSummary(content string) (summaryDoc, error) {
	var d summaryDoc
	content = strings.TrimSpace(content)
	if i, j := strings.Index(content, "{"), strings.LastIndex(content, "}"); i >= 0 && j > i {
		content = content[i : j+1]
	}
	if err := json.Unmarshal([]byte(content), &d); err != nil {
		return d, fmt.Errorf("summary reply is not the JSON object asked for: %w", err)
	}
	clean := func(items []string) []string {
		var out []string
		for _, it := range items {
			if it = strings.TrimSpace(strings.ReplaceAll(it, "\n", " ")); it != "" {
				out = append(out, clip(it, summaryItemRunes))
			}
		}
		return out
	}
	d.Goal = clip(strings.TrimSpace(strings.ReplaceAll(d.Goal, "\n", " ")), summaryItemRunes)
	d.Decisions, d.Facts, d.OpenItems = clean(d.Decisions), clean(d.Facts), clean(d.OpenItems)
	if d.empty() {
		return d, fmt.Errorf("summary reply is empty")
	}
	return d, nil
}

// summaryInput is the user message of a summary call: the current summary and the messages to
// fold in, each clipped, the whole bounded.
func summaryInput(prev string, evicted []*sessionv1.Message) string {
	var b strings.Builder
	b.WriteString("Current summary:\n")
	if strings.TrimSpace(prev) == "" {
		b.WriteString("(none)\n")
	} else {
		b.WriteString(prev + "\n")
	}
	b.WriteString("\nMessages leaving the context window:\n")
	budget := summaryInputRunes
	for _, m := range evicted {
		line := describeMessage(m, summaryMsgInputRunes)
		if budget -= len([]rune(line)); budget < 0 {
			b.WriteString("[… older messages omitted]\n")
			break
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// describeMessage renders a session message on one line for a summary.
func describeMessage(m *sessionv1.Message, n int) string {
	content := clip(strings.Join(strings.Fields(m.GetContent()), " "), n)
	switch m.GetKind() {
	case sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL:
		return fmt.Sprintf("[#%d assistant called %s] %s", m.GetSeq(), m.GetToolName(), content)
	case sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT:
		return fmt.Sprintf("[#%d result of %s] %s", m.GetSeq(), m.GetToolName(), content)
	default:
		return fmt.Sprintf("[#%d %s] %s", m.GetSeq(), roleName(m.GetRole()), content)
	}
}

func roleName(r sessionv1.Role) string {
	switch r {
	case sessionv1.Role_ROLE_USER:
		return "user"
	case sessionv1.Role_ROLE_ASSISTANT:
		return "assistant"
	case sessionv1.Role_ROLE_TOOL:
		return "tool"
	case sessionv1.Role_ROLE_SYSTEM:
		return "system"
	}
	return "unknown"
}

// fallback is the deterministic extractive summary: the previous summary's items, then from the
// evicted messages the user's words as facts, each tool step with its result as a step done (a
// failed one that was not done later as an open item), and the assistant's answers as
// decisions; trimmed oldest first to the token cap.
func (s *summarizer) fallback(prev summaryDoc, evicted []*sessionv1.Message, reason string) summaryResult {
	d := prev
	calls := map[string]*sessionv1.Message{}
	failedOpen := map[string]int{} // tool name -> index in d.OpenItems
	for _, m := range evicted {
		text := clip(strings.Join(strings.Fields(m.GetContent()), " "), summaryItemRunes)
		switch {
		case m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL:
			calls[m.GetToolCallId()] = m
		case m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT:
			call := calls[m.GetToolCallId()]
			name := m.GetToolName()
			args := ""
			if call != nil {
				name = call.GetToolName()
				args = " " + clip(call.GetContent(), 120)
			}
			ok, out := resultGist(m.GetContent())
			if ok {
				d.Decisions = append(d.Decisions, fmt.Sprintf("done: %s%s → %s", name, args, out))
				if i, open := failedOpen[name]; open {
					d.OpenItems[i] = ""
					delete(failedOpen, name)
				}
			} else if !m.GetSynthesized() {
				failedOpen[name] = len(d.OpenItems)
				d.OpenItems = append(d.OpenItems, fmt.Sprintf("%s%s failed: %s", name, args, out))
			}
		case m.GetRole() == sessionv1.Role_ROLE_USER && text != "":
			if d.Goal == "" {
				d.Goal = text
			}
			d.Facts = append(d.Facts, "user said: "+text)
		case m.GetRole() == sessionv1.Role_ROLE_ASSISTANT && text != "":
			d.Decisions = append(d.Decisions, "assistant answered: "+clip(firstSentence(text), 160))
		}
	}
	var open []string
	for _, it := range d.OpenItems {
		if it != "" {
			open = append(open, it)
		}
	}
	d.OpenItems = open
	return summaryResult{text: s.fit(d).render(), fallback: true, reason: reason}
}

// resultGist reads a tool_result's content (the orchestrator's {"success", "output"|"error"}
// envelope, or anything else) into success and a short text.
func resultGist(content string) (bool, string) {
	var env struct {
		Success *bool           `json:"success"`
		Output  json.RawMessage `json:"output"`
		Error   struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(content), &env) != nil || env.Success == nil {
		return true, clip(strings.Join(strings.Fields(content), " "), 160)
	}
	if !*env.Success {
		return false, clip(strings.TrimSpace(env.Error.Code+": "+env.Error.Message), 160)
	}
	out := string(env.Output)
	var str string
	if json.Unmarshal(env.Output, &str) == nil {
		out = str
	}
	return true, clip(strings.Join(strings.Fields(out), " "), 160)
}

func firstSentence(s string) string {
	for i, r := range s {
		if strings.ContainsRune(".!?。！？\n", r) {
			return s[:i+len(string(r))]
		}
	}
	return s
}

// fit drops the oldest items until the rendered summary is within the token cap.
func (s *summarizer) fit(d summaryDoc) summaryDoc {
	for s.tok.Count(d.render()) > s.cfg.SummaryMaxTokens {
		switch {
		case len(d.Facts) > 0 && len(d.Facts) >= len(d.Decisions):
			d.Facts = d.Facts[1:]
		case len(d.Decisions) > 0:
			d.Decisions = d.Decisions[1:]
		case len(d.OpenItems) > 0:
			d.OpenItems = d.OpenItems[1:]
		case d.Goal != "":
			d.Goal = clip(d.Goal, len([]rune(d.Goal))/2)
			if len([]rune(d.Goal)) < 8 {
				d.Goal = ""
			}
		default:
			return d
		}
	}
	return d
}
