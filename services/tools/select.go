package tools

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"unicode"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Selection tuning. A group is chosen when it scores at least groupRatio of the best group; a
// tool outside the chosen groups joins when it scores at least extraRatio of the best tool.
const (
	maxSelectedGroups = 3
	groupRatio        = 0.5
	maxExtraTools     = 3
	extraRatio        = 0.5
	bm25K1            = 1.2
	bm25B             = 0.75
	nameWeight        = 3.0
	groupWeight       = 2.0
	descWeight        = 1.0
	propWeight        = 1.0
	propDescWeight    = 0.5
)

// selector ranks tools for a turn with BM25 over what a model sees of each tool (name,
// description, groups, argument names and descriptions), then picks whole groups, so a turn that
// needs one travel tool also gets the travel tools it usually needs next. The index is rebuilt
// only when the registry revision changes.
type selector struct {
	mu  sync.Mutex
	rev int64
	idx *toolIndex
}

type toolIndex struct {
	tools  []*StoredTool
	tf     []map[string]float64 // weighted term frequency per tool
	length []float64
	avgLen float64
	df     map[string]int
	groups map[string][]int // group → tool indices, by name
}

func (s *selector) index(tools []*StoredTool, rev int64) *toolIndex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx != nil && s.rev == rev {
		return s.idx
	}
	idx := &toolIndex{tools: tools, df: map[string]int{}, groups: map[string][]int{}}
	var total float64
	for i, st := range tools {
		tf := toolTerms(st.Tool.GetSpec())
		var n float64
		for t, w := range tf {
			idx.df[t]++
			n += w
		}
		idx.tf = append(idx.tf, tf)
		idx.length = append(idx.length, n)
		total += n
		for _, g := range st.Tool.GetSpec().GetGroups() {
			idx.groups[g] = append(idx.groups[g], i)
		}
	}
	if len(tools) > 0 {
		idx.avgLen = total / float64(len(tools))
	}
	s.idx, s.rev = idx, rev
	return idx
}

// toolTerms is a tool's weighted bag of terms.
func toolTerms(spec *toolsv1.ToolSpec) map[string]float64 {
	tf := map[string]float64{}
	add := func(text string, w float64) {
		for _, t := range terms(text) {
			tf[t] += w
		}
	}
	add(spec.GetName(), nameWeight)
	for _, g := range spec.GetGroups() {
		add(g, groupWeight)
	}
	add(spec.GetDescription(), descWeight)
	var schema struct {
		Properties map[string]struct {
			Description string `json:"description"`
			Enum        []any  `json:"enum"`
		} `json:"properties"`
	}
	if json.Unmarshal([]byte(spec.GetInputSchema()), &schema) == nil {
		for name, p := range schema.Properties {
			add(name, propWeight)
			add(p.Description, propDescWeight)
			for _, e := range p.Enum {
				if s, ok := e.(string); ok {
					add(s, propDescWeight)
				}
			}
		}
	}
	return tf
}

// scored is a tool's relevance to the turn and the query terms it matched.
type scored struct {
	i       int
	score   float64
	matched []string
}

func (idx *toolIndex) score(query []string) []scored {
	n := float64(len(idx.tools))
	out := make([]scored, len(idx.tools))
	for i := range idx.tools {
		out[i].i = i
		norm := bm25K1 * (1 - bm25B + bm25B*idx.length[i]/math.Max(idx.avgLen, 1))
		for _, q := range query {
			tf := idx.tf[i][q]
			if tf == 0 {
				continue
			}
			df := float64(idx.df[q])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			out[i].score += idf * tf * (bm25K1 + 1) / (tf + norm)
			out[i].matched = append(out[i].matched, q)
		}
	}
	return out
}

// selection is SelectTools' answer before it becomes a response.
type selection struct {
	picks  []pick
	groups []string
}

type pick struct {
	i      int
	score  float64
	reason string
}

// choose picks the tools for a query: the best groups, the best tools outside them, capped at
// maxTools, most relevant first.
func (idx *toolIndex) choose(text string, maxTools int) selection {
	query := uniq(terms(text))
	sc := idx.score(query)
	best := 0.0
	for _, s := range sc {
		best = math.Max(best, s.score)
	}
	if best == 0 {
		return selection{}
	}

	type groupScore struct {
		name    string
		score   float64
		matched []string
	}
	var gs []groupScore
	for g, members := range idx.groups {
		var top []float64
		seen := map[string]bool{}
		var matched []string
		for _, i := range members {
			top = append(top, sc[i].score)
			for _, m := range sc[i].matched {
				if !seen[m] {
					seen[m] = true
					matched = append(matched, m)
				}
			}
		}
		sort.Sort(sort.Reverse(sort.Float64Slice(top)))
		score := top[0]
		if len(top) > 1 {
			score += 0.5 * top[1]
		}
		if score > 0 {
			gs = append(gs, groupScore{g, score, matched})
		}
	}
	sort.Slice(gs, func(a, b int) bool {
		if gs[a].score != gs[b].score {
			return gs[a].score > gs[b].score
		}
		return gs[a].name < gs[b].name
	})

	var sel selection
	chosen := map[int]bool{}
	for _, g := range gs {
		if len(sel.groups) == maxSelectedGroups || g.score < groupRatio*gs[0].score {
			break
		}
		members := idx.groups[g.name]
		if len(sel.groups) > 0 && len(chosen)+len(members) > maxTools {
			continue
		}
		sel.groups = append(sel.groups, g.name)
		for _, i := range members {
			if chosen[i] {
				continue
			}
			chosen[i] = true
			r := fmt.Sprintf("in group %s, which matches %s", g.name, quoteTerms(g.matched))
			if len(sc[i].matched) > 0 {
				r += fmt.Sprintf("; the tool itself matches %s", quoteTerms(sc[i].matched))
			}
			sel.picks = append(sel.picks, pick{i, sc[i].score, r})
		}
	}
	ranked := append([]scored(nil), sc...)
	sort.SliceStable(ranked, func(a, b int) bool { return ranked[a].score > ranked[b].score })
	extra := 0
	for _, s := range ranked {
		if extra == maxExtraTools || s.score < extraRatio*best {
			break
		}
		if chosen[s.i] {
			continue
		}
		chosen[s.i] = true
		extra++
		sel.picks = append(sel.picks, pick{s.i, s.score, fmt.Sprintf("matches %s", quoteTerms(s.matched))})
	}
	sort.SliceStable(sel.picks, func(a, b int) bool { return sel.picks[a].score > sel.picks[b].score })
	if len(sel.picks) > maxTools {
		sel.picks = sel.picks[:maxTools]
	}
	return sel
}

func quoteTerms(ts []string) string {
	if len(ts) == 0 {
		return "the turn"
	}
	q := make([]string, 0, min(len(ts), 5))
	for _, t := range ts[:min(len(ts), 5)] {
		q = append(q, "'"+t+"'")
	}
	return strings.Join(q, ", ")
}

func uniq(ts []string) []string {
	seen := map[string]bool{}
	out := ts[:0:0]
	for _, t := range ts {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the and or but of to in on for with by at from as into onto about over under
		is are was were be been being am do does did done have has had having will would shall should can could may might must
		i me my mine we us our you your yours he him his she her it its they them their this that these those there here
		what whats which who whom whose when where why how all any some each every no not only just also very too so than then
		please pls thanks thank hi hello hey ok okay want wanted need needs like would let lets get got give tell show make
		tool tools use using via up out if else s t`) {
		stopwords[w] = true
	}
}

// terms splits text into search terms: words split at non-letters and camelCase, lower-cased,
// stop words dropped and lightly stemmed; CJK runs become overlapping character pairs.
func terms(text string) []string {
	var out []string
	var word []rune
	var cjk []rune
	flushWord := func() {
		if len(word) == 0 {
			return
		}
		w := strings.ToLower(string(word))
		word = word[:0]
		if len([]rune(w)) < 2 && !isDigits(w) || stopwords[w] {
			return
		}
		out = append(out, stem(w))
	}
	flushCJK := func() {
		switch len(cjk) {
		case 0:
		case 1:
			out = append(out, string(cjk))
		default:
			for i := 0; i+1 < len(cjk); i++ {
				out = append(out, string(cjk[i:i+2]))
			}
		}
		cjk = cjk[:0]
	}
	var prev rune
	for _, r := range text {
		switch {
		case isCJK(r):
			flushWord()
			cjk = append(cjk, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			flushCJK()
			if unicode.IsUpper(r) && unicode.IsLower(prev) {
				flushWord()
			}
			word = append(word, r)
		default:
			flushWord()
			flushCJK()
		}
		prev = r
	}
	flushWord()
	flushCJK()
	return out
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

func isCJK(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)
}

// stem strips common English inflections so "flights", "booking" and "booked" meet "flight"
// and "book".
func stem(w string) string {
	w = stripSuffix(w)
	// A final "e" goes too, so "schedule", "scheduled" and "scheduling" all meet.
	if len(w) > 4 && w[len(w)-1] == 'e' {
		w = w[:len(w)-1]
	}
	return w
}

func stripSuffix(w string) string {
	n := len(w)
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		return w[:n-3] + "y"
	case strings.HasSuffix(w, "sses"):
		return w[:n-2]
	case n > 4 && (strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes") || strings.HasSuffix(w, "zes")):
		return w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return w[:n-1]
	case n > 5 && strings.HasSuffix(w, "ing"):
		return undouble(w[:n-3])
	case n > 4 && strings.HasSuffix(w, "ed"):
		return undouble(w[:n-2])
	}
	return w
}

// undouble turns "shipp" (from "shipping") into "ship".
func undouble(w string) string {
	n := len(w)
	if n >= 3 && w[n-1] == w[n-2] && !strings.ContainsRune("aeiouls", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}
