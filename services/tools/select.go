package tools

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hermes-agent/hermes/internal/textseg"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Selection tuning. A group is chosen when it scores at least groupRatio of the best group; a
// tool outside the chosen groups joins when it scores at least extraRatio of the best tool.
const (
	maxSelectedGroups = 3
	groupRatio        = 0.25
	relatedWeight     = 0.5
	coverRatio        = 0.5
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
	mu  sync.Mutex // guards rev and idx
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

// queryTerm is a term of the turn with its weight: 1 for the turn's own words, less for
// related terms the thesaurus adds.
type queryTerm struct {
	term   string
	weight float64
}

// scored is a tool's relevance to the turn: its BM25 score and each matched term's share.
type scored struct {
	i       int
	score   float64
	contrib map[string]float64
	matched []string
}

func (idx *toolIndex) score(query []queryTerm) []scored {
	n := float64(len(idx.tools))
	out := make([]scored, len(idx.tools))
	for i := range idx.tools {
		out[i].i = i
		norm := bm25K1 * (1 - bm25B + bm25B*idx.length[i]/math.Max(idx.avgLen, 1))
		for _, q := range query {
			tf := idx.tf[i][q.term]
			if tf == 0 {
				continue
			}
			df := float64(idx.df[q.term])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			c := q.weight * idf * tf * (bm25K1 + 1) / (tf + norm)
			if out[i].contrib == nil {
				out[i].contrib = map[string]float64{}
			}
			out[i].contrib[q.term] = c
			out[i].score += c
			out[i].matched = append(out[i].matched, q.term)
		}
	}
	return out
}

// residual is a tool's score from the terms not yet covered.
func (s *scored) residual(covered map[string]bool) float64 {
	var r float64
	for t, c := range s.contrib {
		if !covered[t] {
			r += c
		}
	}
	return r
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

// choose picks the tools for a query. Groups are chosen greedily by coverage: the best group
// first, then each next group by what it adds for the turn's terms the chosen groups do not
// match yet, while that is at least groupRatio of the first group's score — so "email my
// itinerary" gets both travel and email, but a second group that only repeats the first one's
// matches is left out. Then the best tools outside the chosen groups join, and the list is
// capped at maxTools, most relevant first.
func (idx *toolIndex) choose(text string, maxTools int) selection {
	sc := idx.score(expand(uniq(terms(text))))
	best := 0.0
	for _, s := range sc {
		best = math.Max(best, s.score)
	}
	if best == 0 {
		return selection{}
	}
	gc := newGroupChoice(idx, sc)
	sel := gc.chooseGroups(maxTools)
	sel.picks = append(sel.picks, extraPicks(sc, gc.chosen, best)...)
	sort.SliceStable(sel.picks, func(a, b int) bool { return sel.picks[a].score > sel.picks[b].score })
	if len(sel.picks) > maxTools {
		sel.picks = sel.picks[:maxTools]
	}
	return sel
}

// groupChoice is the state of choosing groups for one query, one group at a time.
type groupChoice struct {
	idx      *toolIndex
	sc       []scored
	names    []string           // the index's groups, sorted so ties go the same way each time
	termBest map[string]float64 // each query term's strongest contribution in any tool
	chosen   map[int]bool       // tools picked so far
	covered  map[string]bool    // query terms a chosen group is about
	taken    map[string]bool    // groups chosen so far
}

func newGroupChoice(idx *toolIndex, sc []scored) *groupChoice {
	gc := &groupChoice{
		idx:      idx,
		sc:       sc,
		names:    make([]string, 0, len(idx.groups)),
		termBest: map[string]float64{},
		chosen:   map[int]bool{},
		covered:  map[string]bool{},
		taken:    map[string]bool{},
	}
	for _, s := range sc {
		for t, c := range s.contrib {
			gc.termBest[t] = math.Max(gc.termBest[t], c)
		}
	}
	for g := range idx.groups {
		gc.names = append(gc.names, g)
	}
	sort.Strings(gc.names)
	return gc
}

// chooseGroups takes the best group, then each next best while it scores at least
// groupRatio of the first, and picks every tool of the groups it takes.
func (gc *groupChoice) chooseGroups(maxTools int) selection {
	var sel selection
	first := 0.0
	for len(sel.groups) < maxSelectedGroups {
		g, score, matched := gc.next(len(sel.groups) > 0, maxTools)
		if g == "" || (first > 0 && score < groupRatio*first) {
			break
		}
		if first == 0 {
			first = score
		}
		gc.taken[g] = true
		sel.groups = append(sel.groups, g)
		gc.cover(g, matched)
		sel.picks = append(sel.picks, gc.pickGroup(g, matched)...)
	}
	return sel
}

// next returns the untaken group that adds most for the terms not yet covered, with the
// terms it matches; after the first group, one that would overflow maxTools is passed over.
func (gc *groupChoice) next(after bool, maxTools int) (group string, score float64, matched []string) {
	for _, g := range gc.names {
		if gc.taken[g] {
			continue
		}
		if after && len(gc.chosen)+len(gc.idx.groups[g]) > maxTools {
			continue
		}
		if s, m := gc.groupScore(g); s > score {
			group, score, matched = g, s, m
		}
	}
	return group, score, matched
}

// groupScore is group g's best tool's residual score plus half its second best, with
// the uncovered terms its tools match.
func (gc *groupChoice) groupScore(g string) (float64, []string) {
	var top []float64
	seen := map[string]bool{}
	var matched []string
	for _, i := range gc.idx.groups[g] {
		top = append(top, gc.sc[i].residual(gc.covered))
		for _, m := range gc.sc[i].matched {
			if !seen[m] && !gc.covered[m] {
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
	return score, matched
}

// cover marks the terms group g is about as covered. A term counts as covered only where
// the group matches it about as strongly as the best tool anywhere does; a passing mention
// (an "email" argument of a calendar tool) leaves it to the group it is about.
func (gc *groupChoice) cover(g string, matched []string) {
	for _, m := range matched {
		var inGroup float64
		for _, i := range gc.idx.groups[g] {
			inGroup = math.Max(inGroup, gc.sc[i].contrib[m])
		}
		if inGroup >= coverRatio*gc.termBest[m] {
			gc.covered[m] = true
		}
	}
}

// pickGroup picks group g's tools not picked yet, each with the reason it was offered.
func (gc *groupChoice) pickGroup(g string, matched []string) []pick {
	var picks []pick
	for _, i := range gc.idx.groups[g] {
		if gc.chosen[i] {
			continue
		}
		gc.chosen[i] = true
		r := fmt.Sprintf("in group %s, which matches %s", g, quoteTerms(matched))
		if len(gc.sc[i].matched) > 0 {
			r += fmt.Sprintf("; the tool itself matches %s", quoteTerms(gc.sc[i].matched))
		}
		picks = append(picks, pick{i, gc.sc[i].score, r})
	}
	return picks
}

// extraPicks picks up to maxExtraTools of the best tools not chosen yet that score at
// least extraRatio of the best, most relevant first; it marks them in chosen.
func extraPicks(sc []scored, chosen map[int]bool, best float64) []pick {
	ranked := append([]scored(nil), sc...)
	sort.SliceStable(ranked, func(a, b int) bool { return ranked[a].score > ranked[b].score })
	var picks []pick
	for _, s := range ranked {
		if len(picks) == maxExtraTools || s.score < extraRatio*best {
			break
		}
		if chosen[s.i] {
			continue
		}
		chosen[s.i] = true
		picks = append(picks, pick{s.i, s.score, fmt.Sprintf("matches %s", quoteTerms(s.matched))})
	}
	return picks
}

// expand adds related terms from the thesaurus at half weight.
func expand(ts []string) []queryTerm {
	out := make([]queryTerm, 0, len(ts))
	seen := map[string]bool{}
	for _, t := range ts {
		seen[t] = true
		out = append(out, queryTerm{t, 1})
	}
	for _, t := range ts {
		for _, r := range related[t] {
			if !seen[r] {
				seen[r] = true
				out = append(out, queryTerm{r, relatedWeight})
			}
		}
	}
	return out
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
// stop words and one-letter words dropped, lightly stemmed; CJK runs become overlapping
// character pairs.
func terms(text string) []string {
	var out []string
	textseg.Segment(text, textseg.Options{SplitCamel: true, MinWordRunes: 2, Stop: stopwords, Stem: true}, func(t textseg.Term) {
		out = append(out, t.Text)
	})
	return out
}

// thesaurus groups everyday words a user says with the words tool descriptions use for the same
// thing. Lexical matching cannot know that "yen" is a currency or "hot" a temperature; this
// small, general table bridges the commonest gaps. Each line is one set; every member brings the
// others in at relatedWeight.
const thesaurus = `
currency exchange convert dollar dollars usd euro euros eur yen jpy pound pounds gbp yuan rmb franc
temperature hot cold warm chilly freezing heat degrees
rain umbrella precipitation snow shower showers wet storm
wind windy breeze gust
buy purchase shop shopping product products store item
order orders purchased delivery package parcel shipment
meeting meetings appointment event calendar schedule
remind reminder alarm notify
email mail inbox message messages
money payment pay paid bill invoice
balance funds account
spend spent spending expenses expense budget
stock stocks share shares ticker market
file files document documents doc docs pdf drive folder
deploy deployment release rollout ship
rollback revert undo
error errors bug crash broken failing failure exception
log logs trace
latency slow performance p99 p95 response
flight flights fly plane airline airport
hotel hotels room stay accommodation lodging
car vehicle suv rental
trip trips travel journey vacation holiday
`

var related = func() map[string][]string {
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(thesaurus), "\n") {
		var set []string
		for _, w := range strings.Fields(line) {
			for _, t := range terms(w) {
				if !slices.Contains(set, t) {
					set = append(set, t)
				}
			}
		}
		for _, a := range set {
			for _, b := range set {
				if a != b && !slices.Contains(m[a], b) {
					m[a] = append(m[a], b)
				}
			}
		}
	}
	return m
}()
