package memory

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
