package memory

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

func termsOf(text string) []string {
	var out []string
	lexTerms(text, func(t string, _ float64) { out = append(out, t) })
	return out
}

func TestLexTerms(t *testing.T) {
	tests := []struct {
		text string
		want []string
	}{
		{"What did I say about the restaurants?", []string{"restaurant"}},
		{"Booked a flight, BOOKING flights", []string{"book", "flight", "book", "flight"}},
		{"用户喜欢吃川菜", []string{"户喜", "喜", "喜欢", "欢", "欢吃", "吃", "吃川", "川", "川菜", "菜"}},
		{"我的猫", []string{"猫"}},
		{"ＡＢＣ１２３", []string{"abc123"}},
	}
	for _, tc := range tests {
		if d := cmp.Diff(tc.want, termsOf(tc.text)); d != "" {
			t.Errorf("terms of %q (-want +got):\n%s", tc.text, d)
		}
	}
}

// A query term no memory has adds nothing and takes nothing away: the scores of the memories
// that match the other terms are the same with it or without it.
func TestUnseenQueryTermsDoNotPenalise(t *testing.T) {
	now := time.Now()
	docs := []string{"the user went hiking in the Alps", "the user likes hiking boots", "the user bought a new phone"}
	var all []Entry
	for i, d := range docs {
		all = append(all, Entry{Memory: testMemory("u", newID(), fact, d, now.Add(-time.Duration(i)*time.Hour))})
	}
	score := func(q string) map[string]float64 {
		out := map[string]float64{}
		for _, h := range searchEntries(all, SearchQuery{Lexical: lexQuery(q), MinLexical: 1e-9, Limit: 10}, now) {
			out[h.Memory.GetContent()] = h.Similarity
		}
		return out
	}
	base := score("hiking")
	with := score("hiking on 9 June 2023 with Zanzibar")
	if len(base) != 2 || cmp.Diff(base, with) != "" {
		t.Errorf("scores without the unseen terms %v, with them %v", base, with)
	}
}

func TestBM25Saturation(t *testing.T) {
	once := lexDoc("coffee")
	many := lexDoc("coffee coffee coffee coffee coffee coffee")
	long := lexDoc("coffee and then a long story about trains, planes, hotels, museums, friends and family")
	if !(once.val[0] < many.val[0] && many.val[0] < float32(bm25K1+1)) {
		t.Errorf("term frequency does not saturate: once %v, six times %v", once.val, many.val)
	}
	var longW float32
	for i, id := range long.idx {
		if id == lexTermID("coffee") {
			longW = long.val[i]
		}
	}
	if !(longW < once.val[0]) {
		t.Errorf("a long memory's term weighs %v, a short one's %v: no length normalisation", longW, once.val[0])
	}
}

// A memory borrows from the one it directly follows in its conversation: same session, at most
// conversationGap later, ordered by when it happened and then by when it was written.
func TestContextBoost(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	hit := func(id, session string, occurred, created time.Time, sim float64) tierHit {
		return tierHit{Hit: Hit{Entry: Entry{Memory: &memoryv1.Memory{Id: id, SessionId: session,
			OccurredAt: ts(occurred), CreatedAt: ts(created)}}, Similarity: sim}}
	}
	tests := []struct {
		name string
		w    float64
		hits []tierHit
		want []float64
	}{
		{"the answer after the question", 0.5, []tierHit{
			hit("answer", "", t0.Add(time.Minute), t0, 1),
			hit("question", "", t0, t0, 4),
		}, []float64{2, 0}},
		{"a chain: each borrows from the one before", 0.5, []tierHit{
			hit("a", "s", t0, t0, 4), hit("b", "s", t0.Add(time.Minute), t0, 2), hit("c", "s", t0.Add(2*time.Minute), t0, 1),
		}, []float64{0, 2, 1}},
		{"same moment, written later", 0.5, []tierHit{
			hit("first", "", t0, t0, 4), hit("second", "", t0, t0.Add(time.Millisecond), 1),
		}, []float64{0, 2}},
		{"same moment, written together: no order", 0.5, []tierHit{
			hit("x", "", t0, t0, 4), hit("y", "", t0, t0, 1),
		}, []float64{0, 0}},
		{"another session", 0.5, []tierHit{
			hit("a", "s1", t0, t0, 4), hit("b", "s2", t0.Add(time.Minute), t0, 1),
		}, []float64{0, 0}},
		{"after a long pause", 0.5, []tierHit{
			hit("a", "", t0, t0, 4), hit("b", "", t0.Add(conversationGap+time.Second), t0, 1),
		}, []float64{0, 0}},
		{"turned off", 0, []tierHit{
			hit("a", "", t0, t0, 4), hit("b", "", t0.Add(time.Minute), t0, 1),
		}, []float64{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, contextBoost(tc.hits, tc.w)); d != "" {
				t.Errorf("boost (-want +got):\n%s", d)
			}
		})
	}
}
