package session

import (
	"slices"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// missingResultContent is what a synthesized tool_result says. It tells the model the call's
// outcome is unknown, so it neither assumes success nor silently repeats a step that may have run.
const missingResultContent = `{"error":"no result was recorded for this tool call (the step was interrupted or its result was lost); its outcome is unknown, do not assume it ran or did not run"}`

// assembled is a built context before it is turned into a response.
type assembled struct {
	pinned           []*sessionv1.Message
	window           []*sessionv1.Message
	evicted          []*sessionv1.Message
	evictedMore      bool
	repairs          []*sessionv1.Repair
	windowTurns      int
	droppedForBudget int
	windowStartSeq   int64
}

// assemble applies the context rules to what the store loaded (the last windowTurns+fold-1
// turns): drop the loaded turns beyond the last windowTurns that the summary already covers,
// then whole turns oldest first while the window exceeds the token budget (never the current,
// last turn); if anything not yet summarised leaves this way or the store reported evicted
// messages, a summary call is due anyway, so every turn beyond the last windowTurns leaves too
// and that one call folds them all. Otherwise they stay, and the window holds windowTurns to
// windowTurns+fold-1 turns. Sticky messages older than the window are carried in the pinned
// block; every message after the summary is in the window or evicted. Tool-call pairs in the
// window are repaired. count gives the token count of a synthesized message. budget <= 0
// means no budget.
func assemble(d *ContextData, windowTurns, budget, maxEvicted int, count func(string) int32) *assembled {
	summarySeq := int64(0)
	if d.Summary != nil {
		summarySeq = d.Summary.ThroughSeq
	}
	turns := splitTurns(d.Window)
	// turns[:gone] leave the window. A turn the summary covers only in part stays, so that
	// none of its messages falls between the summary and the window.
	gone := 0
	for gone < len(turns)-windowTurns && turns[gone][len(turns[gone])-1].GetSeq() <= summarySeq {
		gone++
	}
	covered := gone
	droppedTurns := 0
	if budget > 0 {
		total := 0
		for _, t := range turns[gone:] {
			total += turnTokens(t)
		}
		for len(turns)-gone > 1 && total > budget {
			total -= turnTokens(turns[gone])
			gone++
			droppedTurns++
		}
	}
	due := len(d.Evicted) > 0 || d.EvictedMore
	for _, t := range turns[covered:gone] {
		due = due || t[len(t)-1].GetSeq() > summarySeq
	}
	if due {
		gone = max(gone, len(turns)-windowTurns)
	}

	out := &assembled{droppedForBudget: droppedTurns, windowTurns: len(turns) - gone}
	var left, window []*sessionv1.Message
	for _, t := range turns[:gone] {
		left = append(left, t...)
	}
	for _, t := range turns[gone:] {
		window = append(window, t...)
	}
	if len(window) > 0 {
		out.windowStartSeq = window[0].GetSeq()
	}

	out.pinned = append(out.pinned, d.Sticky...)
	for _, m := range left {
		if m.GetSticky() {
			out.pinned = append(out.pinned, m)
		}
	}

	out.evicted = append(out.evicted, d.Evicted...)
	out.evictedMore = d.EvictedMore
	for _, m := range left {
		if m.GetSeq() <= summarySeq || out.evictedMore {
			continue
		}
		if len(out.evicted) >= maxEvicted {
			out.evictedMore = true
			continue
		}
		out.evicted = append(out.evicted, m)
	}

	out.window, out.repairs = repairPairs(window, count)
	return out
}

// splitTurns splits messages into turns; a turn starts at each user message, and messages
// before the first user message belong to the first turn.
func splitTurns(msgs []*sessionv1.Message) [][]*sessionv1.Message {
	var turns [][]*sessionv1.Message
	for _, m := range msgs {
		if m.GetRole() == sessionv1.Role_ROLE_USER || len(turns) == 0 {
			turns = append(turns, nil)
		}
		turns[len(turns)-1] = append(turns[len(turns)-1], m)
	}
	return turns
}

func turnTokens(t []*sessionv1.Message) int {
	n := 0
	for _, m := range t {
		n += int(m.GetTokenCount())
	}
	return n
}

func isCall(m *sessionv1.Message) bool {
	return m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL
}

func isResult(m *sessionv1.Message) bool {
	return m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT
}

// repairPairs returns msgs with every run of consecutive tool_calls immediately followed by one
// tool_result per call: results already there stay, a result found elsewhere is moved next to
// its call, a missing one is synthesized; results whose call is not in msgs, and second results
// for one call, are dropped, as are tool_calls whose id was already used.
// A window that needs no repair, every turn's usual case, is returned as it is (msgs itself).
func repairPairs(msgs []*sessionv1.Message, count func(string) int32) ([]*sessionv1.Message, []*sessionv1.Repair) {
	if wellPaired(msgs) {
		return msgs, nil
	}
	return repairAll(msgs, count)
}

// repairAll is repairPairs' full pass.
func repairAll(msgs []*sessionv1.Message, count func(string) int32) ([]*sessionv1.Message, []*sessionv1.Repair) {
	p := newPairRepair(msgs, count)
	for i := 0; i < len(msgs); {
		m := msgs[i]
		switch {
		case isResult(m):
			p.resultOutOfPlace(i)
			i++
		case isCall(m):
			var run []*sessionv1.Message
			run, i = p.callRun(i)
			var answered map[string]bool
			answered, i = p.resultsAfter(run, i)
			p.answerRest(run, answered)
		default:
			p.out = append(p.out, m)
			i++
		}
	}
	return p.out, p.repairs
}

// maxQuickCalls bounds the tool calls wellPaired checks; a window with more takes the full pass.
const maxQuickCalls = 64

// wellPaired reports, without allocating, whether repairPairs would leave msgs as they are:
// every run of tool_calls is followed right away by exactly one result for each of its calls
// (in any order), no other result stands anywhere, and no call id repeats.
func wellPaired(msgs []*sessionv1.Message) bool {
	var ids [maxQuickCalls]string
	n := 0
	for i := 0; i < len(msgs); {
		if isResult(msgs[i]) {
			return false
		}
		if !isCall(msgs[i]) {
			i++
			continue
		}
		start := n
		for ; i < len(msgs) && isCall(msgs[i]); i++ {
			id := msgs[i].GetToolCallId()
			if n == maxQuickCalls || slices.Contains(ids[:n], id) {
				return false
			}
			ids[n] = id
			n++
		}
		var answered uint64 // bit j: the run's call j has its result
		for ; i < len(msgs) && isResult(msgs[i]); i++ {
			j := slices.Index(ids[start:n], msgs[i].GetToolCallId())
			if j < 0 || answered&(1<<j) != 0 {
				return false
			}
			answered |= 1 << j
		}
		if answered != 1<<(n-start)-1 {
			return false
		}
	}
	return true
}

// pairRepair is the state of one repairPairs pass over msgs.
type pairRepair struct {
	msgs        []*sessionv1.Message
	count       func(string) int32
	firstResult map[string]int  // index in msgs of each call id's first result
	calls       map[string]bool // call ids that have a tool_call in msgs
	emitted     map[int]bool    // indexes of results already placed or dropped
	seenCall    map[string]bool // call ids whose tool_call is already in out
	out         []*sessionv1.Message
	repairs     []*sessionv1.Repair
}

func newPairRepair(msgs []*sessionv1.Message, count func(string) int32) *pairRepair {
	p := &pairRepair{
		msgs:        msgs,
		count:       count,
		firstResult: map[string]int{},
		calls:       map[string]bool{},
		emitted:     map[int]bool{},
		seenCall:    map[string]bool{},
		out:         make([]*sessionv1.Message, 0, len(msgs)),
	}
	for i, m := range msgs {
		if isResult(m) {
			if _, ok := p.firstResult[m.GetToolCallId()]; !ok {
				p.firstResult[m.GetToolCallId()] = i
			}
		}
	}
	for _, m := range msgs {
		if isCall(m) {
			p.calls[m.GetToolCallId()] = true
		}
	}
	return p
}

func (p *pairRepair) repair(kind sessionv1.RepairKind, m *sessionv1.Message) {
	p.repairs = append(p.repairs, &sessionv1.Repair{Kind: kind, ToolCallId: m.GetToolCallId(), Seq: m.GetSeq()})
}

// resultOutOfPlace handles the result at i met outside the results of a call run.
func (p *pairRepair) resultOutOfPlace(i int) {
	m := p.msgs[i]
	if p.emitted[i] {
		return
	}
	// Its call is absent, or this is a second result for a call already answered.
	if !p.calls[m.GetToolCallId()] || p.firstResult[m.GetToolCallId()] != i || p.seenCall[m.GetToolCallId()] {
		p.repair(sessionv1.RepairKind_REPAIR_KIND_DROPPED_ORPHAN_RESULT, m)
	}
	// Otherwise the result precedes its call; it is placed when the call is reached.
}

// callRun emits the run of consecutive tool_calls of one assistant step starting at i,
// dropping calls whose id was already used; it returns the calls kept and the index after
// the run.
func (p *pairRepair) callRun(i int) ([]*sessionv1.Message, int) {
	var run []*sessionv1.Message
	for ; i < len(p.msgs) && isCall(p.msgs[i]); i++ {
		c := p.msgs[i]
		if p.seenCall[c.GetToolCallId()] {
			p.repair(sessionv1.RepairKind_REPAIR_KIND_DROPPED_DUPLICATE_CALL, c)
			continue
		}
		p.seenCall[c.GetToolCallId()] = true
		run = append(run, c)
		p.out = append(p.out, c)
	}
	return run, i
}

// resultsAfter keeps the results right after run, starting at i, where they are, and drops
// second results and orphans among them; it stops at the first result of a call elsewhere.
// It returns the run's call ids answered and the index where it stopped.
func (p *pairRepair) resultsAfter(run []*sessionv1.Message, i int) (map[string]bool, int) {
	answered := map[string]bool{}
	for ; i < len(p.msgs) && isResult(p.msgs[i]); i++ {
		r := p.msgs[i]
		if p.emitted[i] {
			continue
		}
		id := r.GetToolCallId()
		inRun := slices.ContainsFunc(run, func(c *sessionv1.Message) bool { return c.GetToolCallId() == id })
		switch {
		case inRun && !answered[id] && p.firstResult[id] == i:
			answered[id] = true
			p.emitted[i] = true
			p.out = append(p.out, r)
		case inRun || !p.calls[id] || p.firstResult[id] != i:
			// A second result for a call of this run, or an orphan.
			p.emitted[i] = true
			p.repair(sessionv1.RepairKind_REPAIR_KIND_DROPPED_ORPHAN_RESULT, r)
		default:
			// The first result of a call elsewhere; leave it for that call.
			return answered, i
		}
	}
	return answered, i
}

// answerRest gives each call of run not yet answered its result: moved from elsewhere in
// msgs when there is one, else synthesized.
func (p *pairRepair) answerRest(run []*sessionv1.Message, answered map[string]bool) {
	for _, c := range run {
		id := c.GetToolCallId()
		if answered[id] {
			continue
		}
		if j, ok := p.firstResult[id]; ok && !p.emitted[j] {
			p.emitted[j] = true
			p.out = append(p.out, p.msgs[j])
			p.repair(sessionv1.RepairKind_REPAIR_KIND_MOVED_RESULT, p.msgs[j])
			continue
		}
		p.out = append(p.out, &sessionv1.Message{
			Role:        sessionv1.Role_ROLE_TOOL,
			Kind:        sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT,
			Content:     missingResultContent,
			ToolCallId:  id,
			ToolName:    c.GetToolName(),
			CreatedAt:   c.GetCreatedAt(),
			TokenCount:  p.count(missingResultContent),
			Synthesized: true,
		})
		p.repair(sessionv1.RepairKind_REPAIR_KIND_SYNTHESIZED_RESULT, c)
	}
}
