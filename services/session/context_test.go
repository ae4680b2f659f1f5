package session

import (
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// msg builders for compact test logs.
func user(text string) *sessionv1.Message {
	return &sessionv1.Message{Role: sessionv1.Role_ROLE_USER, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: text, TokenCount: 10}
}

func assistant(text string) *sessionv1.Message {
	return &sessionv1.Message{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: text, TokenCount: 10}
}

func call(id string) *sessionv1.Message {
	return &sessionv1.Message{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, Content: `{}`, ToolCallId: id, ToolName: "t", TokenCount: 10}
}

func result(id string) *sessionv1.Message {
	return &sessionv1.Message{Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, Content: `{"ok":true}`, ToolCallId: id, ToolName: "t", TokenCount: 10}
}

func sticky(m *sessionv1.Message) *sessionv1.Message { m.Sticky = true; return m }

func numbered(msgs ...*sessionv1.Message) []*sessionv1.Message {
	for i, m := range msgs {
		m.Seq = int64(i + 1)
	}
	return msgs
}

// referenceContext computes ContextData from a whole log by the definitions in store.go; the
// stores must produce the same, reading only part of the log.
func referenceContext(all []*sessionv1.Message, summarySeq int64, turns, maxEvicted int) *ContextData {
	d := &ContextData{}
	if summarySeq > 0 {
		d.Summary = &Summary{Content: "summary", ThroughSeq: summarySeq}
	}
	var userIdx []int
	for i, m := range all {
		if m.GetRole() == sessionv1.Role_ROLE_USER {
			userIdx = append(userIdx, i)
		}
	}
	start := 0
	if len(userIdx) > turns {
		start = userIdx[len(userIdx)-turns]
	}
	d.Window = all[start:]
	for _, m := range all[:start] {
		if m.GetSticky() {
			d.Sticky = append(d.Sticky, m)
		}
		if m.GetSeq() > summarySeq {
			if len(d.Evicted) < maxEvicted {
				d.Evicted = append(d.Evicted, m)
			} else {
				d.EvictedMore = true
			}
		}
	}
	return d
}

func seqs(msgs []*sessionv1.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		tag := ""
		if m.GetSynthesized() {
			tag = "s"
		}
		out[i] = fmt.Sprintf("%d%s:%s", m.GetSeq(), tag, m.GetToolCallId())
	}
	return out
}

func TestRepairPairs(t *testing.T) {
	tests := []struct {
		name    string
		in      []*sessionv1.Message
		want    []string
		repairs []sessionv1.RepairKind
	}{
		{
			name: "intact pairs stay",
			in:   numbered(user("u"), call("a"), call("b"), result("b"), result("a"), assistant("x")),
			want: []string{"1:", "2:a", "3:b", "4:b", "5:a", "6:"},
		},
		{
			name:    "missing result is synthesized after the step's calls",
			in:      numbered(user("u"), call("a"), call("b"), result("a"), assistant("x")),
			want:    []string{"1:", "2:a", "3:b", "4:a", "0s:b", "5:"},
			repairs: []sessionv1.RepairKind{sessionv1.RepairKind_REPAIR_KIND_SYNTHESIZED_RESULT},
		},
		{
			name:    "orphan result is dropped",
			in:      numbered(user("u"), result("z"), assistant("x")),
			want:    []string{"1:", "3:"},
			repairs: []sessionv1.RepairKind{sessionv1.RepairKind_REPAIR_KIND_DROPPED_ORPHAN_RESULT},
		},
		{
			name:    "separated result is moved next to its call",
			in:      numbered(user("u"), call("a"), user("again"), result("a")),
			want:    []string{"1:", "2:a", "4:a", "3:"},
			repairs: []sessionv1.RepairKind{sessionv1.RepairKind_REPAIR_KIND_MOVED_RESULT},
		},
		{
			name:    "second result for one call is dropped",
			in:      numbered(user("u"), call("a"), result("a"), result("a")),
			want:    []string{"1:", "2:a", "3:a"},
			repairs: []sessionv1.RepairKind{sessionv1.RepairKind_REPAIR_KIND_DROPPED_ORPHAN_RESULT},
		},
		{
			name:    "duplicate call id is dropped",
			in:      numbered(user("u"), call("a"), result("a"), call("a"), result("a")),
			want:    []string{"1:", "2:a", "3:a"},
			repairs: []sessionv1.RepairKind{sessionv1.RepairKind_REPAIR_KIND_DROPPED_DUPLICATE_CALL, sessionv1.RepairKind_REPAIR_KIND_DROPPED_ORPHAN_RESULT},
		},
		{
			name:    "result before its call is moved after it",
			in:      numbered(user("u"), result("a"), call("a")),
			want:    []string{"1:", "3:a", "2:a"},
			repairs: []sessionv1.RepairKind{sessionv1.RepairKind_REPAIR_KIND_MOVED_RESULT},
		},
		{
			name: "interleaved steps",
			in:   numbered(user("u"), call("a"), result("a"), call("b"), result("b")),
			want: []string{"1:", "2:a", "3:a", "4:b", "5:b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, repairs := repairPairs(tc.in, func(string) int32 { return 1 })
			if diff := cmp.Diff(tc.want, seqs(got)); diff != "" {
				t.Errorf("window (-want +got):\n%s", diff)
			}
			var kinds []sessionv1.RepairKind
			for _, r := range repairs {
				kinds = append(kinds, r.GetKind())
			}
			if diff := cmp.Diff(tc.repairs, kinds); diff != "" {
				t.Errorf("repairs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssembleBudget(t *testing.T) {
	// Four turns of 30 tokens each; the first has a sticky message.
	all := numbered(
		sticky(user("remember: no peanuts")), assistant("ok"), assistant("."),
		user("t2"), call("a"), result("a"),
		user("t3"), assistant("x"), assistant("y"),
		user("t4"), assistant("x"), assistant("y"),
	)
	tests := []struct {
		name        string
		budget      int
		wantTurns   int
		wantDropped int
		wantStart   int64
		wantPinned  []int64
		wantEvicted []int64
	}{
		{name: "no budget", budget: 0, wantTurns: 3, wantStart: 4, wantPinned: []int64{1}, wantEvicted: []int64{1, 2, 3}},
		{name: "fits", budget: 90, wantTurns: 3, wantStart: 4, wantPinned: []int64{1}, wantEvicted: []int64{1, 2, 3}},
		{name: "drops oldest whole turn", budget: 89, wantTurns: 2, wantDropped: 1, wantStart: 7, wantPinned: []int64{1}, wantEvicted: []int64{1, 2, 3, 4, 5, 6}},
		{name: "never fewer than the current turn", budget: 1, wantTurns: 1, wantDropped: 2, wantStart: 10, wantPinned: []int64{1}, wantEvicted: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := referenceContext(all, 0, 3, 100)
			a := assemble(d, 3, tc.budget, 100, func(string) int32 { return 1 })
			got := []any{a.windowTurns, a.droppedForBudget, a.windowStartSeq, seqList(a.pinned), seqList(a.evicted)}
			want := []any{tc.wantTurns, tc.wantDropped, tc.wantStart, tc.wantPinned, tc.wantEvicted}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("turns, dropped, start, pinned, evicted (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAssembleFold: the store loads the last window+fold-1 turns; turns beyond the last
// window leave it fold at a time, or all at once when a summary call is due anyway.
func TestAssembleFold(t *testing.T) {
	// Ten turns of a user message and an answer, 20 tokens each: turn i is seqs 2i-1 and 2i.
	// The user messages of turns 2 and 6 (seqs 3 and 11) are sticky.
	var all []*sessionv1.Message
	for i := 1; i <= 10; i++ {
		u := user(fmt.Sprintf("t%d", i))
		if i == 2 || i == 6 {
			sticky(u)
		}
		all = append(all, u, assistant("a"))
	}
	all = numbered(all...)
	seqRange := func(from, to int64) []int64 {
		var out []int64
		for s := from; s <= to; s++ {
			out = append(out, s)
		}
		return out
	}
	type want struct {
		Turns, Dropped int
		Start          int64
		Pinned         []int64
		Evicted        []int64
		More           bool
	}
	tests := []struct {
		name             string
		log              []*sessionv1.Message
		window, fold     int
		summary          int64
		budget, maxEvict int
		want             want
	}{
		{
			name: "fold 1 is the last N turns, evicting all older", window: 3, fold: 1,
			want: want{Turns: 3, Start: 15, Pinned: []int64{3, 11}, Evicted: seqRange(1, 14)},
		},
		{
			name: "fold 1 with a summary evicts what follows it", window: 3, fold: 1, summary: 10,
			want: want{Turns: 3, Start: 15, Pinned: []int64{3, 11}, Evicted: seqRange(11, 14)},
		},
		{
			name: "N+K-1 turns after the summary stay in the window", window: 3, fold: 4, summary: 8,
			want: want{Turns: 6, Start: 9, Pinned: []int64{3}},
		},
		{
			name: "N+K turns after the summary fold K at once", window: 3, fold: 4, summary: 6,
			want: want{Turns: 3, Start: 15, Pinned: []int64{3, 11}, Evicted: seqRange(7, 14)},
		},
		{
			name: "no summary: everything before the last N turns", window: 3, fold: 4,
			want: want{Turns: 3, Start: 15, Pinned: []int64{3, 11}, Evicted: seqRange(1, 14)},
		},
		{
			name: "loaded turns the summary covers are dropped silently", window: 3, fold: 4, summary: 12,
			want: want{Turns: 4, Start: 13, Pinned: []int64{3, 11}},
		},
		{
			name: "a turn the summary covers in part stays", window: 3, fold: 4, summary: 11,
			want: want{Turns: 5, Start: 11, Pinned: []int64{3}},
		},
		{
			name: "a summary inside the last N turns leaves them in the window", window: 3, fold: 4, summary: 18,
			want: want{Turns: 3, Start: 15, Pinned: []int64{3, 11}},
		},
		{
			name: "a budget drop evicts, and then the window folds to N", window: 3, fold: 4, summary: 10, budget: 90,
			want: want{Turns: 3, Dropped: 1, Start: 15, Pinned: []int64{3, 11}, Evicted: seqRange(11, 14)},
		},
		{
			name: "a budget below N turns", window: 3, fold: 4, summary: 10, budget: 45,
			want: want{Turns: 2, Dropped: 3, Start: 17, Pinned: []int64{3, 11}, Evicted: seqRange(11, 16)},
		},
		{
			name: "a budget drop of a summarised turn evicts nothing", window: 3, fold: 4, summary: 18, budget: 50,
			want: want{Turns: 2, Dropped: 1, Start: 17, Pinned: []int64{3, 11}},
		},
		{
			name: "the fold stops at max evicted", window: 3, fold: 4, summary: 6, maxEvict: 3,
			want: want{Turns: 3, Start: 15, Pinned: []int64{3, 11}, Evicted: []int64{7, 8, 9}, More: true},
		},
		{
			name: "fewer turns than the window", log: all[:4], window: 3, fold: 4,
			want: want{Turns: 2, Start: 1},
		},
		{
			name: "fold 2: the budget applies to the loaded turns", window: 2, fold: 2, summary: 10, budget: 50,
			want: want{Turns: 2, Dropped: 1, Start: 17, Pinned: []int64{3, 11}, Evicted: seqRange(11, 16)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := tc.log
			if log == nil {
				log = all
			}
			if tc.maxEvict == 0 {
				tc.maxEvict = 100
			}
			d := referenceContext(log, tc.summary, tc.window+tc.fold-1, tc.maxEvict)
			a := assemble(d, tc.window, tc.budget, tc.maxEvict, func(string) int32 { return 1 })
			got := want{a.windowTurns, a.droppedForBudget, a.windowStartSeq, seqList(a.pinned), seqList(a.evicted), a.evictedMore}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("assembled (-want +got):\n%s", diff)
			}
			checkInvariants(t, log, a)
			checkBudgetAndBlocks(t, log, a, tc.budget, tc.summary, tc.maxEvict)
			checkNothingBetween(t, log, a, tc.summary)
		})
	}
}

// checkNothingBetween asserts that every message after the summary is in the window or
// evicted: the evicted messages are exactly those between the summary and the window, or their
// oldest ones when evicted is truncated.
func checkNothingBetween(t *testing.T, all []*sessionv1.Message, a *assembled, summarySeq int64) {
	t.Helper()
	end := int64(len(all)) + 1
	if a.windowStartSeq > 0 { // set whenever the window had a message before pair repair
		end = a.windowStartSeq
	}
	var between []int64
	for _, m := range all {
		if m.GetSeq() > summarySeq && m.GetSeq() < end {
			between = append(between, m.GetSeq())
		}
	}
	got := seqList(a.evicted)
	if a.evictedMore && len(got) < len(between) {
		between = between[:len(got)]
	}
	if diff := cmp.Diff(between, got); diff != "" {
		t.Fatalf("evicted with the summary through %d and the window at %d (-between +evicted):\n%s", summarySeq, end, diff)
	}
}

func seqList(msgs []*sessionv1.Message) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.GetSeq())
	}
	return out
}

// checkInvariants asserts the context rules every built context must satisfy.
func checkInvariants(t *testing.T, all []*sessionv1.Message, a *assembled) {
	t.Helper()
	// Every run of tool_calls is immediately followed by exactly one result per call, and
	// every result belongs to the run right before it.
	w := a.window
	for i := 0; i < len(w); {
		if isResult(w[i]) {
			t.Fatalf("orphan tool_result %q at window[%d]: %v", w[i].GetToolCallId(), i, seqs(w))
		}
		if !isCall(w[i]) {
			i++
			continue
		}
		ids := map[string]bool{}
		for ; i < len(w) && isCall(w[i]); i++ {
			if ids[w[i].GetToolCallId()] {
				t.Fatalf("tool_call id %q twice in one step: %v", w[i].GetToolCallId(), seqs(w))
			}
			ids[w[i].GetToolCallId()] = true
		}
		for ; i < len(w) && isResult(w[i]); i++ {
			if !ids[w[i].GetToolCallId()] {
				t.Fatalf("tool_result %q does not answer the preceding step: %v", w[i].GetToolCallId(), seqs(w))
			}
			delete(ids, w[i].GetToolCallId())
		}
		if len(ids) > 0 {
			t.Fatalf("tool_calls without results %v: %v", ids, seqs(w))
		}
	}
	// Every sticky message appears exactly once in pinned + window.
	count := map[int64]int{}
	for _, m := range append(append([]*sessionv1.Message{}, a.pinned...), a.window...) {
		if m.GetSticky() {
			count[m.GetSeq()]++
		}
	}
	for _, m := range all {
		if m.GetSticky() && count[m.GetSeq()] != 1 {
			t.Fatalf("sticky message %d appears %d times", m.GetSeq(), count[m.GetSeq()])
		}
	}
	// The window starts at a turn boundary and holds the log's tail.
	if len(w) > 0 && len(all) > 0 && a.windowStartSeq > 1 {
		if all[a.windowStartSeq-1].GetRole() != sessionv1.Role_ROLE_USER {
			t.Fatalf("window starts at seq %d, not at a user message", a.windowStartSeq)
		}
	}
}

// FuzzBuildContext: for any message sequence, window size, fold, budget and summary position,
// the built context has no orphan tool_call or tool_result, every sticky message exactly once,
// and every message after the summary in the window or evicted.
func FuzzBuildContext(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, uint8(3), uint16(0), uint8(0))
	f.Add([]byte{0, 2, 2, 3, 0, 3, 2, 0, 1, 4, 9, 9}, uint8(1), uint16(25), uint8(2))
	f.Add([]byte{3, 3, 2, 0, 2, 2, 4, 4, 0, 8, 0, 2}, uint8(2), uint16(5), uint8(5))
	f.Fuzz(func(t *testing.T, ops []byte, turns uint8, budget uint16, summary uint8) {
		if len(ops) > 400 {
			ops = ops[:400]
		}
		var all []*sessionv1.Message
		nextCall := 0
		for i, op := range ops {
			var m *sessionv1.Message
			id := fmt.Sprintf("c%d", int(op>>4)%max(nextCall, 1))
			switch op % 10 {
			case 0:
				m = user(fmt.Sprintf("u%d", i))
			case 1:
				m = sticky(user(fmt.Sprintf("u%d", i)))
			case 2:
				m = call(fmt.Sprintf("c%d", nextCall))
				nextCall++
			case 3:
				m = result(fmt.Sprintf("c%d", max(nextCall-1, 0)))
			case 4:
				m = result(id) // possibly an old or unknown call
			case 5:
				m = sticky(assistant("a"))
			case 6:
				m = call(id) // possibly a repeated id
			default:
				m = assistant("a")
			}
			m.Seq = int64(i + 1)
			m.TokenCount = int32(op%7 + 1)
			all = append(all, m)
		}
		nTurns := int(turns%20) + 1
		fold := int(turns/20)%5 + 1
		summarySeq := int64(summary) % int64(len(all)+1)
		d := referenceContext(all, summarySeq, nTurns+fold-1, 50)
		a := assemble(d, nTurns, int(budget), 50, func(string) int32 { return 1 })
		checkInvariants(t, all, a)
		checkBudgetAndBlocks(t, all, a, int(budget), summarySeq, 50)
		checkNothingBetween(t, all, a, summarySeq)
	})
}

// checkBudgetAndBlocks asserts what assemble promises beyond pairing: the window is the log's
// tail from windowStartSeq, within the budget unless it is the last turn alone, with every
// message that is not a tool call or result kept in order; pinned holds sticky messages older
// than the window; evicted holds messages older than the window and newer than the summary,
// at most maxEvicted of them.
func checkBudgetAndBlocks(t *testing.T, all []*sessionv1.Message, a *assembled, budget int, summarySeq int64, maxEvicted int) {
	t.Helper()
	if len(all) == 0 {
		return
	}
	start := a.windowStartSeq
	if start < 1 || start > int64(len(all)) {
		t.Fatalf("window starts at seq %d of %d messages", start, len(all))
	}
	tail := all[start-1:]
	tokens := 0
	for _, m := range tail {
		tokens += int(m.GetTokenCount())
	}
	if budget > 0 && a.windowTurns > 1 && tokens > budget {
		t.Fatalf("window of %d turns holds %d tokens, budget %d", a.windowTurns, tokens, budget)
	}
	var want, got []int64
	for _, m := range tail {
		if !isCall(m) && !isResult(m) {
			want = append(want, m.GetSeq())
		}
	}
	for _, m := range a.window {
		if !isCall(m) && !isResult(m) {
			got = append(got, m.GetSeq())
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("window messages other than tool calls and results (-want +got):\n%s", diff)
	}
	for i, m := range a.pinned {
		if !m.GetSticky() || m.GetSeq() >= start || (i > 0 && m.GetSeq() <= a.pinned[i-1].GetSeq()) {
			t.Fatalf("pinned %v with the window at %d", seqList(a.pinned), start)
		}
	}
	if len(a.evicted) > maxEvicted {
		t.Fatalf("%d evicted, at most %d", len(a.evicted), maxEvicted)
	}
	for i, m := range a.evicted {
		if m.GetSeq() <= summarySeq || m.GetSeq() >= start || (i > 0 && m.GetSeq() <= a.evicted[i-1].GetSeq()) {
			t.Fatalf("evicted %v with the summary through %d and the window at %d", seqList(a.evicted), summarySeq, start)
		}
	}
}

// TestWellPaired checks the quick check against the full pass on random windows of calls,
// results and other messages over a few call ids: a window it passes is one the full pass
// leaves exactly as it is, and every window the full pass leaves as it is passes (below the
// quick check's bound on calls).
func TestWellPaired(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(25, 34))
	ids := []string{"a", "b", "c", "d", "e", "f", ""}
	passed, changed := 0, 0
	for range 20000 {
		// Steps of calls with their results (shuffled), often well formed, with ids that may
		// repeat across steps, and stray messages of every kind between them.
		var msgs []*sessionv1.Message
		for range rng.IntN(6) {
			switch rng.IntN(6) {
			case 0:
				msgs = append(msgs, user("u"))
			case 1:
				msgs = append(msgs, assistant("x"))
			case 2:
				msgs = append(msgs, result(ids[rng.IntN(len(ids))]))
			default:
				run := rng.Perm(len(ids))[:1+rng.IntN(3)]
				for _, j := range run {
					msgs = append(msgs, call(ids[j]))
				}
				rng.Shuffle(len(run), func(a, b int) { run[a], run[b] = run[b], run[a] })
				for _, j := range run[:len(run)-rng.IntN(2)] {
					msgs = append(msgs, result(ids[j]))
				}
			}
		}
		numbered(msgs...)
		full, repairs := repairAll(msgs, func(string) int32 { return 1 })
		same := len(repairs) == 0 && slices.Equal(full, msgs)
		if got := wellPaired(msgs); got != same {
			t.Fatalf("wellPaired(%v) = %v; the full pass leaves it as it is: %v (%v, repairs %v)", seqs(msgs), got, same, seqs(full), repairs)
		}
		if same {
			passed++
		} else {
			changed++
		}
	}
	// The quick check's bound: more calls than it tracks take the full pass.
	var many []*sessionv1.Message
	for i := range maxQuickCalls + 1 {
		many = append(many, call(fmt.Sprint(i)), result(fmt.Sprint(i)))
	}
	if wellPaired(many) {
		t.Errorf("wellPaired passed %d calls, more than its bound %d", maxQuickCalls+1, maxQuickCalls)
	}
	if got, repairs := repairPairs(many, func(string) int32 { return 1 }); len(repairs) != 0 || !slices.Equal(got, many) {
		t.Errorf("a long intact window changed: %d repairs", len(repairs))
	}
	if passed < 2000 || changed < 2000 {
		t.Errorf("%d of the random windows were intact, %d repaired: the test covers too little", passed, changed)
	}
}
