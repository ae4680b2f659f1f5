package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/model"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Explicit information in the user's current message always beats memory: before a remembered
// value fills an argument the model left out, the turn's message is checked for whether it
// gives, replaces or turns down a value for it. A model decides when one is configured for it
// (orchestrator.fill-decision-model); the rules below decide otherwise, and when the model's
// answer is unusable. Only "filled" fills; any other outcome holds the call and tells the
// model the argument is missing and which remembered value might fit, so it asks or confirms.

// FillDecisionSystemPrompt is the fixed contract of the decision request. Scripted models in
// tests recognise decision requests by it.
const FillDecisionSystemPrompt = `You decide whether a value remembered from earlier conversations may fill a tool argument that the assistant left out. Explicit information in the user's current message always wins; memory only fills blanks.

Answer with one JSON object and nothing else:
{"decision":"fill|rejected|replaced|unsure","value":"...","reason":"..."}

- fill: the message refers to the remembered value ("the usual place", "上次那家", "same as last time"), names it, or says nothing about this argument while asking for something the remembered value fits.
- rejected: the message turns the remembered value down ("不去X了", "别订X", "not X this time").
- replaced: the message gives another value for this argument, or asks for a different one without naming it ("换一家", "somewhere else"); put the value the user gave in "value" ("" when none).
- unsure: anything else. When in doubt, answer unsure: the assistant will ask the user.`

// fillDecisionMaxBytes caps the message sent to the decision model.
const fillDecisionMaxBytes = 4000

// fill fills the call's missing required arguments from memory where the turn's message allows
// it, reporting a decision per argument. held is set when an argument was not filled although
// a remembered value exists: the call must not run, and held is the result the model gets.
func (t *turn) fill(ctx context.Context, tool *toolsv1.Tool, args string) (string, []*orchestratorv1.FilledArgument, []*orchestratorv1.FillDecision, *toolsv1.ToolResult) {
	if t.opts.GetSkipMemory() {
		return args, nil, nil, nil
	}
	options := func(name string, prop propertySchema) []fillOption {
		if opts := memoryOptions(t.memories, name, prop, true); len(opts) > 0 {
			return opts
		}
		return memoryOptions(t.lookup(ctx, name), name, prop, false)
	}
	decide := func(name string, prop json.RawMessage, opts []fillOption) fillDecision {
		return t.decide(ctx, name, prop, opts)
	}
	out, filled, decisions, names := fillFromMemory(tool.GetSpec().GetInputSchema(), args, options, decide)
	var events []*orchestratorv1.FillDecision
	var hold []string
	var violations []*toolsv1.Violation
	for i, d := range decisions {
		ev := &orchestratorv1.FillDecision{Name: names[i], Outcome: d.outcome, Reason: d.reason, DecidedBy: d.by}
		if d.option != nil {
			ev.Value, ev.MemoryId, ev.RecallReason = string(d.option.value), d.option.memoryID, d.option.recallReason
		}
		events = append(events, ev)
		if d.outcome == fillFilled || d.outcome == fillNoMemory || d.option == nil {
			continue
		}
		msg := fmt.Sprintf("%s is required and was left out. A value remembered from earlier conversations is %s, but it was not used: %s.", names[i], d.option.value, d.reason)
		if d.userValue != "" {
			msg += fmt.Sprintf(" The user's message gives %q.", d.userValue)
		}
		msg += " Use what the user said in this message, or ask the user (or confirm the remembered value with them) before calling again."
		hold = append(hold, msg)
		violations = append(violations, &toolsv1.Violation{Pointer: "/" + names[i], Message: msg})
	}
	if len(hold) == 0 {
		return out, filled, events, nil
	}
	return args, nil, events, &toolsv1.ToolResult{Error: &toolsv1.ToolError{
		Code:       toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
		Message:    "not run: " + strings.Join(hold, " "),
		Violations: violations,
	}}
}

// decide decides about one argument: by the model when one is configured for it, by the rules
// otherwise and when the model's answer is unusable.
func (t *turn) decide(ctx context.Context, name string, prop json.RawMessage, opts []fillOption) fillDecision {
	rules := ruleDecision(t.text, opts)
	if t.s.cfg.FillDecisionModel == "" || t.s.deps.Model == nil {
		return rules
	}
	d, err := t.modelDecision(ctx, name, prop, opts)
	if err != nil {
		rules.reason += fmt.Sprintf(" (the decision model failed: %v)", err)
		return rules
	}
	// The rules' reading of an explicit rejection or another value is not overruled: when the
	// two disagree on it, the decision is unsure.
	if d.outcome == fillFilled && (rules.outcome == fillRejected || rules.outcome == fillReplaced) {
		d.outcome, d.reason = fillUnsure, "the model would fill, but "+rules.reason
	}
	return d
}

// lookup finds memories carrying an attribute for an argument the call left out: an attribute
// lookup, targeted at the argument and ranked by the turn's text. What it finds fills or is
// offered only for this call; it never enters the context.
func (t *turn) lookup(ctx context.Context, name string) []*memoryv1.RecalledMemory {
	if t.s.deps.Memory == nil {
		return nil
	}
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.attribute_lookup")
	defer span.End()
	resp, err := t.s.deps.Memory.Recall(ctx, &memoryv1.RecallRequest{UserId: t.user, Query: t.text, Limit: 3, AttributeKeys: []string{name}})
	if err != nil {
		t.s.log.Warn("attribute lookup failed", "argument", name, "error", status.Convert(err).Message())
		return nil
	}
	return resp.GetMemories()
}

// modelDecision asks the decision model (JSON mode, a short prompt) about one argument.
func (t *turn) modelDecision(ctx context.Context, name string, prop json.RawMessage, opts []fillOption) (fillDecision, error) {
	values := make([]string, len(opts))
	for i, o := range opts {
		values[i] = o.raw
	}
	msg := t.text
	if len(msg) > fillDecisionMaxBytes {
		msg = strings.ToValidUTF8(msg[:fillDecisionMaxBytes], "")
	}
	in, _ := json.Marshal(map[string]any{"message": msg, "argument": name, "schema": prop, "remembered_values": values})
	zero := 0.0
	mdl := t.s.cfg.FillDecisionModel
	if mdl == "turn" {
		mdl = t.model
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := t.s.deps.Model.Complete(cctx, model.Request{
		Model: mdl, JSON: true, Temperature: &zero, MaxTokens: 200,
		Messages: []model.Message{{Role: model.RoleSystem, Content: FillDecisionSystemPrompt}, {Role: model.RoleUser, Content: string(in)}},
	})
	if err != nil {
		return fillDecision{}, err
	}
	t.mu.Lock()
	t.usage.add(resp.Usage, 0, 0)
	t.mu.Unlock()
	var ans struct {
		Decision string `json:"decision"`
		Value    string `json:"value"`
		Reason   string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(resp.Content)), &ans); err != nil {
		return fillDecision{}, fmt.Errorf("reply is not the JSON asked for: %w", err)
	}
	d := fillDecision{option: &opts[0], userValue: clip(ans.Value, 200), reason: "model: " + clip(ans.Reason, 300), by: "model"}
	switch strings.ToLower(strings.TrimSpace(ans.Decision)) {
	case "fill":
		d.outcome = fillFilled
	case fillRejected:
		d.outcome = fillRejected
	case fillReplaced:
		d.outcome = fillReplaced
	case fillUnsure:
		d.outcome = fillUnsure
	default:
		return fillDecision{}, fmt.Errorf("unknown decision %q", ans.Decision)
	}
	return d, nil
}

// Phrases of the rules. Negations are looked for right before or after a remembered value;
// replacements and references anywhere in the message.
var (
	negBefore = []string{"不去", "不要", "不想去", "不想", "不用", "不订", "不吃", "不选", "别订", "别去", "别选", "别再", "别", "除了", "换掉", "而不是", "不是", "不考虑",
		"not ", "no ", "don't ", "do not ", "instead of ", "rather than ", "other than ", "anywhere but ", "anything but ", "except ", "skip ", "avoid ", "without ", "never ", "no more ", "not at ", "not to ", "not the "}
	negAfter = []string{"不去了", "就不去了", "不去", "不要了", "就算了", "算了", "不行", "不好", "太远", "太吵", "太贵", "关门", "吃腻了", "腻了", "pass", " is closed", " was closed", " is out", " this time? no", " no more", " not this time"}
	// A negation word with something between it and the value ("don't book Luigi's").
	reNegNear      = regexp.MustCompile(`(?:\b(?:don't|do not|not|never|no longer|won't|can't)\b[^,.;!?]{0,20}|(?:别|不要|不想|不用|不再)[^，。；！？,.;!?]{0,4})$`)
	replacePhrases = []string{"换一家", "换家", "换个", "换一个", "换成", "改成", "改去", "改到", "别的", "其他", "其它", "另一家", "另外一家", "新的一家", "新开的",
		"somewhere else", "somewhere different", "another place", "another one", "a different", "someplace else", "something else", "something different", "something new", "a new place", "try a new", "instead"}
	referencePhrases = []string{"上次", "上回", "那家", "老地方", "常去", "经常去", "还是那", "还是老", "照旧", "老样子", "一样的", "跟以前一样", "我喜欢的那", "我最喜欢的", "常点", "平时那",
		"my usual", "the usual", "our usual", "same place", "same as last time", "same one", "last time", "my favorite", "my favourite", "as always", "like always", "as usual", "you know the one", "the one i like"}
	// placeSuffixes end the names of places in Chinese: another name with one of them is another
	// value for a place argument.
	placeSuffixes = "园轩阁居坊苑斋府庄"
)

// ruleDecision is the deterministic decision: the best remembered value (opts[0]) is turned
// down when the message negates it; replaced when the message names another known value of
// the attribute (opts[1:]), another name of the same kind, or asks for a different one; filled
// when the message names it, refers to it, or says nothing about it while the memory was
// recalled as relevant to the turn; unsure when the message says nothing and the memory was
// only found by looking the attribute up.
func ruleDecision(msg string, opts []fillOption) fillDecision {
	m := foldText(msg)
	cand := &opts[0]
	d := fillDecision{option: cand, by: "rules"}
	cv := foldText(cand.raw)
	if q, neg := mentions(m, cv); neg {
		d.outcome, d.userValue, d.reason = fillRejected, otherName(m, cv), fmt.Sprintf("the user's message turns %q down (%q)", cand.raw, q)
		return d
	}
	for _, o := range opts[1:] {
		ov := foldText(o.raw)
		if ov == cv {
			continue
		}
		if q, neg := mentions(m, ov); q != "" && !neg {
			d.outcome, d.userValue, d.reason = fillReplaced, o.raw, fmt.Sprintf("the user's message names another remembered value, %q", o.raw)
			return d
		}
	}
	if q, _ := mentions(m, cv); q != "" {
		// Named, unless the message then asks for another ("上次去的是X，这次换一家").
		at := strings.Index(m, cv)
		for _, p := range replacePhrases {
			if i := strings.LastIndex(m, p); i > at {
				d.outcome, d.reason = fillReplaced, fmt.Sprintf("the user names %q and then asks for a different one (%q)", cand.raw, p)
				return d
			}
		}
		d.outcome, d.reason = fillFilled, fmt.Sprintf("the user's message names %q", cand.raw)
		return d
	}
	if other := otherName(m, cv); other != "" {
		d.outcome, d.userValue, d.reason = fillReplaced, other, fmt.Sprintf("the user's message names another %q", other)
		return d
	}
	for _, p := range replacePhrases {
		if strings.Contains(m, p) {
			d.outcome, d.reason = fillReplaced, fmt.Sprintf("the user asks for a different one (%q)", p)
			return d
		}
	}
	for _, p := range referencePhrases {
		if strings.Contains(m, p) {
			d.outcome, d.reason = fillFilled, fmt.Sprintf("the user refers to what they said before (%q)", p)
			return d
		}
	}
	if cand.inContext {
		d.outcome, d.reason = fillFilled, "the message says nothing about it and the memory was recalled as relevant to this turn"
		return d
	}
	d.outcome, d.reason = fillUnsure, "the message says nothing about it and the memory was only found by looking the attribute up"
	return d
}

// mentions finds a value in the message: the words around its first mention (empty when the
// message does not name it), and whether they negate it.
func mentions(m, v string) (string, bool) {
	if v == "" {
		return "", false
	}
	found := ""
	for off := 0; ; {
		i := strings.Index(m[off:], v)
		if i < 0 {
			return found, false
		}
		i += off
		before, after := m[:i], m[i+len(v):]
		around := lastRunes(before, 8) + v + firstRunes(after, 8)
		if found == "" {
			found = around
		}
		for _, n := range negBefore {
			if strings.HasSuffix(before, n) {
				return around, true
			}
		}
		for _, n := range negAfter {
			if strings.HasPrefix(after, n) || strings.HasPrefix(strings.TrimLeft(after, " ,，"), strings.TrimSpace(n)) {
				return around, true
			}
		}
		if reNegNear.MatchString(lastRunes(before, 24)) {
			return around, true
		}
		off = i + len(v)
	}
}

// otherName finds, for a remembered Chinese place name (one ending in a place suffix such as
// 园 or 轩), another name of that kind in the message: two to four characters before a place
// suffix, not the remembered one.
func otherName(m, v string) string {
	last, _ := utf8.DecodeLastRuneInString(v)
	if !strings.ContainsRune(placeSuffixes, last) || utf8.RuneCountInString(v) < 2 {
		return ""
	}
	rs := []rune(m)
	for i, r := range rs {
		if !strings.ContainsRune(placeSuffixes, r) || i < 2 {
			continue
		}
		for n := 3; n >= 2; n-- {
			if i-n < 0 {
				continue
			}
			cand := string(rs[i-n : i+1])
			if !allHan(cand) || strings.Contains(v, cand) || strings.Contains(cand, v) || strings.ContainsAny(cand, "那这哪一上次常老个的了吧") {
				continue
			}
			return strings.TrimLeft(cand, "去在到订")
		}
	}
	return ""
}

func allHan(s string) bool {
	for _, r := range s {
		if !unicode.Is(unicode.Han, r) {
			return false
		}
	}
	return true
}

// foldText folds width and case so that values typed in different forms compare equal.
func foldText(s string) string { return strings.ToLower(norm.NFKC.String(s)) }

func lastRunes(s string, n int) string {
	rs := []rune(s)
	return string(rs[max(0, len(rs)-n):])
}

func firstRunes(s string, n int) string {
	rs := []rune(s)
	return string(rs[:min(n, len(rs))])
}
