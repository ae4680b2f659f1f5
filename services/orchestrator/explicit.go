package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/textseg"
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
	decide := func(name string, prop json.RawMessage, opts []fillOption, present map[string]json.RawMessage) fillDecision {
		return t.decide(ctx, name, prop, opts, present)
	}
	out, filled, decisions, names := fillFromMemory(tool.GetSpec().GetInputSchema(), args, options, decide)
	var events []*orchestratorv1.FillDecision
	var hold []string
	var violations []*toolsv1.Violation
	for i, d := range decisions {
		ev := &orchestratorv1.FillDecision{Name: names[i], Outcome: d.outcome, Reason: d.reason, DecidedBy: d.by, UserValue: string(d.userJSON)}
		if d.option != nil {
			ev.Value, ev.MemoryId, ev.RecallReason = string(d.option.value), d.option.memoryID, d.option.recallReason
		}
		events = append(events, ev)
		if d.outcome == fillFilled || d.outcome == fillNoMemory || d.option == nil {
			continue
		}
		msg := heldMessage(names[i], d)
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
func (t *turn) decide(ctx context.Context, name string, prop json.RawMessage, opts []fillOption, present map[string]json.RawMessage) fillDecision {
	var ps propertySchema
	_ = json.Unmarshal(prop, &ps)
	rules := ruleDecision(t.text, newArgSlot(name, ps, opts[0].key, present), opts)
	if mdl := t.s.cfg.FillDecisionModel; mdl == "" || mdl == "rules" || t.s.deps.Model == nil {
		return rules
	}
	// One request per argument and remembered values in a turn: a model that calls the same
	// tool again is not asked again.
	key := name
	for _, o := range opts {
		key += "\x00" + o.raw
	}
	t.mu.Lock()
	cached, ok := t.fillDecisions[key]
	t.mu.Unlock()
	if ok {
		return cached
	}
	d, err := t.modelDecision(ctx, name, prop, opts)
	defer func() {
		t.mu.Lock()
		if t.fillDecisions == nil {
			t.fillDecisions = map[string]fillDecision{}
		}
		t.fillDecisions[key] = d
		t.mu.Unlock()
	}()
	if err != nil {
		rules.reason += fmt.Sprintf(" (the decision model failed: %v)", clip(err.Error(), 200))
		d = rules
		return d
	}
	// The rules' reading of an explicit rejection or another value is not overruled: when the
	// two disagree on it, the decision is unsure.
	if d.outcome == fillFilled && (rules.outcome == fillRejected || rules.outcome == fillReplaced) {
		d.outcome, d.reason = fillUnsure, "the model would fill, but "+rules.reason
	}
	// The user's value, typed to the schema: the model's, else the one the rules found.
	if d.outcome != fillFilled && len(d.userJSON) == 0 {
		if j, ok := ps.convert(d.userValue); ok && d.userValue != "" {
			d.userJSON = j
		} else if len(rules.userJSON) > 0 {
			d.userValue, d.userJSON, d.userWeak = rules.userValue, rules.userJSON, rules.userWeak
		}
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
	timeout := t.s.cfg.FillDecisionTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
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

// heldMessage is the result the model gets for a call held for one argument: the value the user
// gave, typed to the schema, when the message carries one, so the model can call again with it;
// otherwise that it must ask.
func heldMessage(name string, d fillDecision) string {
	msg := fmt.Sprintf("%s is required and was left out. A value remembered from earlier conversations is %s, but it was not used: %s.", name, d.option.value, d.reason)
	if len(d.userJSON) > 0 {
		key, _ := json.Marshal(name)
		if d.userWeak {
			// Only a name found in the message: no ready-made arguments, so a model that follows
			// instructions literally asks rather than runs with a guess.
			return msg + fmt.Sprintf(" The user's message names %q: if that is the value the user means for %s, use it; otherwise ask the user. Do not use the remembered value.", d.userValue, name)
		}
		return msg + fmt.Sprintf(" The user's message gives %s = %s: call again with {%s:%s} added to the arguments, and do not use the remembered value.", name, d.userJSON, key, d.userJSON)
	}
	if d.userValue != "" {
		msg += fmt.Sprintf(" The user's message gives %q;", d.userValue)
	}
	return msg + " Ask the user which value to use (or confirm the remembered one with them) before calling again; do not guess."
}

// ruleDecision is the deterministic decision about one argument, safe by itself: it fills only
// when the message names the remembered value, refers back to it, or says nothing about the
// argument at all. In order:
//  1. a negation that covers the remembered value, the memory's subject or the argument
//     ("not home", "别送家里", "not my usual airline") rejects it;
//  2. another remembered value of the attribute named in the message replaces it;
//  3. the remembered value named (and not then swapped for another) fills;
//  4. any value of the argument's kind in the message (a count in digits or words, a time, a
//     place, a name, a value of a closed list) replaces it, and becomes the user's value;
//  5. a change of the usual ("this time", "instead", "换") without a value replaces it, and
//     the model must ask;
//  6. a reference to what the user said before ("the usual", "my address", "老样子") fills;
//  7. the argument spoken of without a value or a reference is unsure;
//  8. silence fills: memory fills blanks.
func ruleDecision(msg string, a argSlot, opts []fillOption) fillDecision {
	r := newReading(msg)
	cand := &opts[0]
	d := fillDecision{option: cand, by: "rules"}
	cv := textseg.FoldText(cand.raw)
	self := selfWords(cand)
	values := func() []userValue { return r.values(a, self) }
	setUser := func(vs []userValue) {
		if len(vs) > 0 {
			d.userValue, d.userJSON, d.userWeak = vs[0].text, vs[0].json, !vs[0].strong
		}
	}

	// 1. Negated.
	if q, ok := r.negated(a.rejectWords(cand, self)); ok {
		d.outcome, d.reason = fillRejected, fmt.Sprintf("the user's message turns it down (%q)", clip(q, 80))
		setUser(values())
		return d
	}
	// 2. Another remembered value named.
	for _, o := range opts[1:] {
		if ov := textseg.FoldText(o.raw); ov != cv && ov != "" {
			if _, ok := r.positive(ov); ok {
				d.outcome, d.userValue, d.reason = fillReplaced, o.raw, fmt.Sprintf("the user's message names another remembered value, %q", o.raw)
				d.userJSON = o.value
				return d
			}
		}
	}
	vs := values()
	// 3. The remembered value named: in the text, or as the same number in other words.
	named := false
	if sp, ok := r.positive(cv); ok {
		named = true
		if c, ok := r.firstPositive(r.lex.Changes); ok {
			if cs, _ := r.positive(c); cs.Start > sp.Start {
				d.outcome, d.reason = fillReplaced, fmt.Sprintf("the user names %q and then asks for a different one (%q)", cand.raw, c)
				setUser(vs)
				return d
			}
		}
	}
	for _, v := range vs {
		if len(v.json) > 0 && string(v.json) == string(cand.value) {
			named = true
		}
	}
	others := vs[:0:0]
	for _, v := range vs {
		if len(v.json) == 0 || string(v.json) != string(cand.value) {
			others = append(others, v)
		}
	}
	if named && len(others) == 0 {
		d.outcome, d.reason = fillFilled, fmt.Sprintf("the user's message names %q", cand.raw)
		return d
	}
	// 4. Another value of the argument's kind; a name found elsewhere in the message makes the
	// decision unsure (it may be the value, or something else the user named).
	if len(others) > 0 {
		d.outcome, d.reason = fillReplaced, fmt.Sprintf("the user's message gives another value for %s (%q)", a.name, clip(others[0].text, 80))
		if !others[0].strong {
			d.outcome, d.reason = fillUnsure, fmt.Sprintf("the user's message names %q, which may be the value for %s", clip(others[0].text, 80), a.name)
		}
		setUser(others)
		return d
	}
	// 5. A change of the usual, no value.
	if c, ok := r.firstPositive(r.lex.Changes); ok {
		d.outcome, d.reason = fillReplaced, fmt.Sprintf("the user asks for something other than usual (%q) without saying what", c)
		return d
	}
	// 6. A reference to the remembered value.
	if ref, ok := r.reference(a, self); ok {
		d.outcome, d.reason = fillFilled, fmt.Sprintf("the user refers to what they said before (%q)", ref)
		return d
	}
	// 7. The argument spoken of, without a value or a reference.
	for _, w := range a.words {
		if first, _ := utf8.DecodeRuneInString(w); w != "" && (utf8.RuneCountInString(w) >= 4 || textseg.IsCJK(first)) {
			if _, ok := r.positive(w); ok {
				d.outcome, d.reason = fillUnsure, fmt.Sprintf("the user's message speaks of %s (%q) without a value or a reference to the remembered one", a.name, w)
				return d
			}
		}
	}
	// 8. Silence.
	if cand.inContext {
		d.outcome, d.reason = fillFilled, "the message says nothing about it and the memory was recalled as relevant to this turn"
	} else {
		d.outcome, d.reason = fillFilled, "the message says nothing about it; the memory holds this argument"
	}
	return d
}

// selfWords are the words that speak of the remembered value itself: the value, and the places
// of the lexicon that the memory names ("home" for a home address, "公司" for the office's).
func selfWords(o *fillOption) []string {
	out := []string{textseg.FoldText(o.raw)}
	mem := textseg.FoldText(strings.Join([]string{o.subject, o.key, o.content, strings.Join(o.keywords, " ")}, " "))
	for _, kw := range textseg.Cues().Kinds {
		for _, p := range kw.Places {
			if textseg.Contains(mem, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// rejectWords are the words whose negation turns the remembered value down: the value and its
// places, the argument's name, the vocabulary of the argument's kind, the words of the memory,
// and references to it ("not my usual").
func (a argSlot) rejectWords(o *fillOption, self []string) []string {
	lex := textseg.Cues()
	out := append([]string{}, self...)
	out = append(out, a.words...)
	for _, k := range a.kinds {
		out = append(out, lex.Kinds[k].Concepts...)
	}
	out = append(out, lex.References...)
	textseg.Segment(o.raw, textseg.Options{Fold: true, MinWordRunes: 3}, func(t textseg.Term) {
		out = append(out, t.Text)
	})
	textseg.Segment(strings.Join([]string{o.subject, o.content, strings.Join(o.keywords, " ")}, " "),
		textseg.Options{Fold: true, MinWordRunes: 4}, func(t textseg.Term) {
			if !slices.Contains(lex.MemoryWords, t.Text) {
				out = append(out, t.Text)
			}
		})
	return out
}

// reference finds a reference to the remembered value: a reference phrase, the user's own slot
// ("my address", "我的地址"), or the memory's place ("home" for a home address).
func (r *reading) reference(a argSlot, self []string) (string, bool) {
	if p, ok := r.firstPositive(r.lex.References); ok {
		return p, true
	}
	nouns := append([]string{}, a.words...)
	for _, k := range a.kinds {
		nouns = append(nouns, r.lex.Kinds[k].Concepts...)
	}
	for _, p := range r.lex.Possessives {
		for _, sp := range textseg.FindAll(r.m, p) {
			if r.inNegation(sp) {
				continue
			}
			rest := strings.TrimLeft(r.m[sp.End:], " ")
			for _, n := range nouns {
				if n != "" && strings.HasPrefix(rest, n) && textseg.Contains(rest[:min(len(rest), len(n)+1)], n) {
					return p + " " + n, true
				}
			}
		}
	}
	for _, s := range self[1:] {
		if _, ok := r.positive(s); ok {
			return s, true
		}
	}
	return "", false
}
