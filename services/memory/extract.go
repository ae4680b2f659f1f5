package memory

import (
	"context"
	"fmt"
	"github.com/hermes-agent/hermes/internal/textseg"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/model"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// Extraction errors the consumer and the RPC tell apart.
var (
	// errTurnBusy: another worker is extracting the same turn right now.
	errTurnBusy = errclass.New(errclass.Conflict, "this turn is being extracted by another worker right now; retry later", nil)
	// errNoModel: no model is configured for extraction.
	errNoModel = errclass.New(errclass.Precondition, "no extraction model is configured (set --model-base-url / HERMES_MODEL_BASE_URL)", nil)
)

// badReplyError is a model reply that stayed unusable after every attempt.
type badReplyError struct {
	attempts int
	err      error
	reply    string
}

func (e *badReplyError) Error() string {
	r := e.reply
	if len(r) > 200 {
		r = r[:200] + "…"
	}
	return fmt.Sprintf("extraction model reply unusable after %d attempts: %v (last reply: %q)", e.attempts, e.err, r)
}

func (e *badReplyError) Unwrap() error { return e.err }

// Is makes a bad reply errclass.Precondition: the configured model cannot do the job, and
// retrying the same turn at once would not change that (a retried bug is what UNAVAILABLE
// would invite).
func (e *badReplyError) Is(target error) bool { return target == errclass.Precondition }

// Public leaves the reply out: it is the model's text about the user's turn.
func (e *badReplyError) Public() string {
	return fmt.Sprintf("the extraction model's reply was unusable after %d attempts: %v", e.attempts, e.err)
}

// ExtractionSystemPrompt is the fixed contract given to the extraction model. Scripted models
// in tests and the demo recognise extraction requests by it.
const ExtractionSystemPrompt = `You extract long-term memories about the USER from one finished conversation turn.

Answer with one JSON object and nothing else:
{"memories":[{"type":"preference|fact|event|habit|config","content":"...","confidence":0.0,"subject":"...","attributes":{"key":"value"},"keywords":["..."]}]}

Rules:
- Extract only what the USER said about themselves: stated preferences, facts, settings, and key events. Write content as one short sentence in the user's language (for example "用户喜欢蜀香园的川菜").
- Never extract anything from ASSISTANT text: it is context only. What the assistant said, suggested or assumed is not a memory about the user.
- A place, product or topic mentioned once is not a preference. "我上个月去过上海" is at most an event, never "the user likes Shanghai". Only extract a preference when the user says they like, want, prefer, usually do or dislike something.
- confidence is how sure you are that this is a durable, correct fact about the user: 0.9+ for an explicit statement, below 0.8 for guesses. Prefer fewer, accurate memories.
- subject names what the memory is about in one or two lowercase English words (for example "restaurant", "coffee", "reply style", "home city"); memories that can contradict each other share a subject.
- attributes hold concrete values the user stated, under snake_case keys a tool could use as arguments (for example {"restaurant_name":"蜀香园","cuisine":"川菜"}, {"city":"杭州"}, {"merchant_id":"M-23891"}). Copy values exactly as the user wrote them.
- keywords are 2–6 short phrases of requests this memory would help with (for example ["订餐厅","订位","聚餐"]).
- TOOL RESULTS appear only when the user asked to remember something from them; otherwise never extract from tool output.
- When there is nothing worth remembering, answer {"memories":[]}.`

// material is the turn split by who said it: only the user's words (and tool results the user
// asked to remember) can become memories; assistant text is context for the model only, and
// the recalled-memory message and system messages are left out entirely, so recalled memories
// are never extracted again.
type material struct {
	user      []string
	tools     []string
	assistant []string
	msgIDs    []string // ids of the user (and allowed tool) messages
}

func turnMaterial(turn *eventsv1.TurnFinished) material {
	var m material
	for _, tm := range turn.GetMessages() {
		msg := tm.GetMessage()
		if tm.GetIsRecalledMemory() || msg.GetRole() == sessionv1.Role_ROLE_SYSTEM || msg.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_SUMMARY {
			continue
		}
		text := strings.TrimSpace(msg.GetContent())
		if text == "" {
			continue
		}
		isTool := tm.GetIsToolResult() || msg.GetRole() == sessionv1.Role_ROLE_TOOL || msg.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT
		switch {
		case isTool:
			if turn.GetRememberRequested() {
				m.tools = append(m.tools, text)
				if msg.GetId() != "" {
					m.msgIDs = append(m.msgIDs, msg.GetId())
				}
			}
		case msg.GetRole() == sessionv1.Role_ROLE_USER:
			m.user = append(m.user, text)
			if msg.GetId() != "" {
				m.msgIDs = append(m.msgIDs, msg.GetId())
			}
		case msg.GetRole() == sessionv1.Role_ROLE_ASSISTANT && msg.GetKind() != sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL:
			m.assistant = append(m.assistant, text)
		}
	}
	return m
}

// prompt renders the material for the model, capped at maxBytes (the user's words first).
func (m material) prompt(maxBytes int) string {
	var b strings.Builder
	write := func(s string) {
		if b.Len()+len(s) <= maxBytes {
			b.WriteString(s)
		}
	}
	write("USER MESSAGES (extract only from these):\n")
	for i, u := range m.user {
		write(fmt.Sprintf("[U%d] %s\n", i+1, u))
	}
	if len(m.tools) > 0 {
		write("\nTOOL RESULTS (the user asked to remember something from them):\n")
		for i, t := range m.tools {
			write(fmt.Sprintf("[T%d] %s\n", i+1, t))
		}
	}
	if len(m.assistant) > 0 {
		write("\nASSISTANT REPLIES (context only; never extract from them):\n")
		for i, a := range m.assistant {
			write(fmt.Sprintf("[A%d] %s\n", i+1, a))
		}
	}
	return b.String()
}

// userText is everything memories may be drawn from, normalised for grounding checks.
func (m material) userText() string {
	return normalizeText(strings.Join(append(slices.Clone(m.user), m.tools...), "\n"))
}

// grounded reports whether a candidate is drawn from the user's words: every attribute value
// must appear in them verbatim (after width and case folding), and the content must share at
// least one meaningful word or character pair with them. A candidate that fails came from the
// assistant's text, the model's imagination, or a tool result the user did not ask to keep.
func grounded(c rawCandidate, userText string) (bool, string) {
	for k, v := range c.Attributes {
		if !valueInText(userText, normalizeText(v)) {
			return false, fmt.Sprintf("attribute %s=%q does not appear in the user's words", k, v)
		}
	}
	have := map[string]bool{}
	lexTerms(userText, func(t string, w float64) {
		if w >= wWord { // words and CJK pairs; a single character proves nothing
			have[t] = true
		}
	})
	shared := false
	lexTerms(c.Content, func(t string, _ float64) {
		if have[t] {
			shared = true
		}
	})
	if !shared {
		return false, "the content shares no word with the user's messages"
	}
	return true, ""
}

// valueInText reports whether an attribute value appears in the user's (normalised) words: as
// written, as the same number in words ("4" for "four", "四"), or as the same word in another
// inflection ("peanut" for "peanuts").
func valueInText(text, v string) bool {
	if v == "" || strings.Contains(text, v) {
		return true
	}
	lex := textseg.Cues()
	if n, err := strconv.Atoi(v); err == nil {
		for w, val := range lex.Numbers {
			if val == n && textseg.Contains(text, w) {
				return true
			}
		}
		for w, val := range lex.Quantities {
			if val == n && textseg.Contains(text, w) {
				return true
			}
		}
		return false
	}
	stems := map[string]bool{}
	textseg.Segment(text, textseg.Options{Stem: true}, func(t textseg.Term) { stems[t.Text] = true })
	all, any := true, false
	textseg.Segment(v, textseg.Options{Stem: true}, func(t textseg.Term) {
		any = true
		all = all && stems[t.Text]
	})
	return any && all
}

// preferenceCues are words with which people state a preference. A "preference" whose user
// text has none of them is a passing mention (the article's Shanghai mistake), not a
// preference.
var preferenceCues = []string{
	"喜欢", "爱吃", "爱喝", "爱看", "爱玩", "最爱", "我爱", "偏好", "偏爱", "习惯", "总是", "一直", "通常", "一般都",
	"平时", "每次", "经常", "常去", "常用", "讨厌", "不要", "别给", "别用", "别再", "不吃", "不喝", "不想", "希望",
	"想要", "倾向", "宁愿", "宁可", "记住", "以后", "下次", "默认", "首选", "更喜欢", "受不了", "只吃", "只喝", "只用",
	"like", "love", "prefer", "favorite", "favourite", "always", "usually", "never", "hate", "dislike",
	"don't want", "do not want", "rather", "tend to", "every time", "from now on", "next time",
	"default", "remember", "enjoy", "can't stand", "only eat", "only drink", "only use",
}

// statesDurableFact reports whether the user's words state a lasting fact about them (an allergy,
// a diet, a medical or accessibility need, a household, an address, a name: textseg's durable
// cues). Such a statement is kept whatever type the extractor gives it: losing an allergy is a
// safety failure, not a ranking one.
func statesDurableFact(userText string) bool {
	_, _, ok := textseg.FirstOf(textseg.FoldText(userText), textseg.Cues().Durable)
	return ok
}

func hasPreferenceCue(userText string) bool {
	for _, c := range preferenceCues {
		if strings.Contains(userText, c) {
			return true
		}
	}
	return false
}

// extract runs explicit extraction on a turn: the same code for ExtractTurn and the NATS
// consumer. It is idempotent by turn id: a processed turn returns its stored record; a turn
// another worker is processing returns errTurnBusy.
func (s *Service) extract(ctx context.Context, turn *eventsv1.TurnFinished) (*memoryv1.ExtractTurnResponse, error) {
	user, turnID := turn.GetUserId(), turn.GetTurnId()
	mat := turnMaterial(turn)
	if s.prefiltered(ctx, turn, mat) {
		return &memoryv1.ExtractTurnResponse{}, nil
	}
	lease := max(s.cfg.ConsumerAckWait, s.cfg.ExtractTimeout*time.Duration(max(s.cfg.ExtractAttempts, 1)))
	rec, busy, token, err := s.state.ClaimTurn(ctx, user, turnID, lease)
	if err != nil {
		return nil, err
	}
	if busy {
		return nil, errTurnBusy
	}
	if rec != nil {
		return s.processed(ctx, user, rec), nil
	}
	resp, rec2, err := s.extractClaimed(ctx, turn, mat)
	if err != nil {
		// Give the claim up so a redelivery can try again right away.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = s.state.ReleaseTurn(rctx, user, turnID, token)
		cancel()
		return nil, err
	}
	if s.beforeFinish != nil {
		s.beforeFinish(ctx, turnID)
	}
	if err := s.state.FinishTurn(ctx, user, turnID, token, rec2, s.cfg.ExtractionRecordTTL); err != nil {
		return nil, err
	}
	return resp, nil
}

// prefiltered reports whether the prefilter skips the turn: nothing to claim and no record to
// write, since the decision is deterministic on the event and a redelivered turn is skipped
// again.
func (s *Service) prefiltered(ctx context.Context, turn *eventsv1.TurnFinished, mat material) bool {
	if !s.cfg.ExplicitEnabled || !s.cfg.ExtractPrefilter {
		return false
	}
	ok, why := worthExtracting(mat, turn.GetRememberRequested())
	if !ok {
		s.log.DebugContext(ctx, "extraction skipped: the turn states nothing about the user", "turn", turn.GetTurnId(), "why", why)
	}
	return !ok
}

// processed answers for a turn that was already extracted.
func (s *Service) processed(ctx context.Context, user string, rec *TurnRecord) *memoryv1.ExtractTurnResponse {
	resp := &memoryv1.ExtractTurnResponse{AlreadyProcessed: true, SupersededIds: rec.SupersededIDs}
	for _, id := range rec.MemoryIDs {
		for _, t := range []memoryv1.Tier{memoryv1.Tier_TIER_SEMANTIC, memoryv1.Tier_TIER_EPISODIC} {
			if e, err := s.tier(t).Get(ctx, user, id); err == nil {
				e.Memory.Tier = t
				resp.Memories = append(resp.Memories, e.Memory)
				break
			}
		}
	}
	return resp
}

func (s *Service) extractClaimed(ctx context.Context, turn *eventsv1.TurnFinished, mat material) (*memoryv1.ExtractTurnResponse, TurnRecord, error) {
	resp := &memoryv1.ExtractTurnResponse{}
	rec := TurnRecord{At: s.now().UTC()}
	if !s.cfg.ExplicitEnabled {
		return resp, rec, nil
	}
	if len(mat.user) == 0 && len(mat.tools) == 0 {
		return resp, rec, nil
	}
	if s.model == nil {
		return nil, rec, errNoModel
	}
	items, err := s.askModel(ctx, mat)
	if err != nil {
		return nil, rec, err
	}
	rec.Candidates = len(items)
	userText := mat.userText()
	for i, it := range items {
		cand := &memoryv1.Candidate{Content: it.Content, Confidence: it.Confidence, Attributes: it.Attributes}
		resp.Candidates = append(resp.Candidates, cand)
		typ, ok := parseType(it.Type)
		cand.Type = typ
		switch {
		case it.Invalid != "":
			cand.Outcome, cand.Reason = "invalid", it.Invalid
			continue
		case !ok:
			cand.Outcome, cand.Reason = "invalid", fmt.Sprintf("unknown type %q", it.Type)
			continue
		case len(it.Content) > maxContentBytes:
			cand.Outcome, cand.Reason = "invalid", "content longer than 2000 bytes"
			continue
		case it.Confidence < s.cfg.MinConfidence:
			cand.Outcome, cand.Reason = "below_threshold", fmt.Sprintf("confidence %.2f < %.2f", it.Confidence, s.cfg.MinConfidence)
			continue
		}
		if ok, why := grounded(it, userText); !ok {
			cand.Outcome, cand.Reason = "ungrounded", why
			continue
		}
		if typ == memoryv1.MemoryType_MEMORY_TYPE_PREFERENCE && s.cfg.RequirePreferenceCue && !hasPreferenceCue(userText) && !statesDurableFact(userText) {
			cand.Outcome, cand.Reason = "no_preference_cue", "the user stated no preference (a passing mention is not one)"
			continue
		}
		attrs := it.Attributes
		if len(attrs) > maxAttributes {
			attrs = nil // an overlong attribute set is a model error; keep the memory, not the noise
		}
		res, err := s.write(ctx, turn.GetUserId(), candidate{
			typ: typ, content: it.Content, attributes: attrs, subject: truncate(it.Subject, maxSubjectBytes),
			keywords: capKeywords(it.Keywords), confidence: it.Confidence, source: memoryv1.Source_SOURCE_EXPLICIT,
			sessionID: turn.GetSessionId(), turnID: turn.GetTurnId(), sourceMsgIDs: capStrings(mat.msgIDs, maxSourceMessages),
			id:         derivedID("extract", turn.GetUserId(), turn.GetTurnId(), strconv.Itoa(i), it.Content),
			occurredAt: turnTime(turn),
		})
		if err != nil {
			return nil, rec, err
		}
		cand.MemoryId = res.memory.GetId()
		switch {
		case res.updated:
			cand.Outcome, cand.Reason = "updated", "a near duplicate of an existing memory; updated it"
		case len(res.superseded) > 0:
			cand.Outcome, cand.Reason = "superseding", fmt.Sprintf("replaces %s", strings.Join(res.superseded, ", "))
		default:
			cand.Outcome, cand.Reason = "written", "new memory in the "+strings.ToLower(strings.TrimPrefix(res.memory.GetTier().String(), "TIER_"))+" tier"
		}
		if !slices.Contains(rec.MemoryIDs, cand.MemoryId) {
			rec.MemoryIDs = append(rec.MemoryIDs, cand.MemoryId)
			resp.Memories = append(resp.Memories, res.memory)
		}
		rec.SupersededIDs = append(rec.SupersededIDs, res.superseded...)
	}
	resp.SupersededIds = rec.SupersededIDs
	return resp, rec, nil
}

// askModel calls the model, retrying a reply that holds no usable JSON.
func (s *Service) askModel(ctx context.Context, mat material) ([]rawCandidate, error) {
	attempts := max(s.cfg.ExtractAttempts, 1)
	zero := 0.0
	req := model.Request{
		JSON:        true,
		Temperature: &zero,
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: ExtractionSystemPrompt},
			{Role: model.RoleUser, Content: mat.prompt(max(s.cfg.ExtractMaxInputBytes, 1000))},
		},
	}
	var last string
	var lastErr error
	for a := 1; a <= attempts; a++ {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.ExtractTimeout)
		resp, err := s.model.Complete(cctx, req)
		cancel()
		if err != nil {
			return nil, modelErr(err)
		}
		items, err := parseExtraction(resp.Content)
		if err == nil {
			return items, nil
		}
		last, lastErr = resp.Content, err
		s.log.WarnContext(ctx, "extraction reply is not JSON", "attempt", a, "of", attempts)
	}
	return nil, &badReplyError{attempts: attempts, err: lastErr, reply: last}
}

// modelErr marks a failed model call with its class: a model that is down or overloaded is
// UNAVAILABLE; one that refuses the request (key, model name, request) is a precondition the
// operator must fix.
func modelErr(err error) error {
	switch {
	case model.Unavailable(err):
		return errclass.Mark(errclass.Unavailable, "extraction model", err)
	case model.StatusCode(err) >= 400:
		return errclass.Mark(errclass.Precondition, "extraction model", err)
	}
	return fmt.Errorf("extraction model: %w", err)
}

// turnTime is when a turn happened: when it finished (zero when the event does not say).
func turnTime(turn *eventsv1.TurnFinished) time.Time {
	if t := turn.GetFinishedAt(); t != nil && t.CheckValid() == nil {
		return t.AsTime()
	}
	return time.Time{}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

func capKeywords(ks []string) []string {
	var out []string
	for _, k := range ks {
		if len(out) == maxKeywords {
			break
		}
		out = append(out, truncate(k, maxKeywordBytes))
	}
	return out
}

func capStrings(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
