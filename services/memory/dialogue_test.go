package memory

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/textseg"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// dialogueSet is testdata/dialogues.txt: conversations of two people over several sessions and
// questions about them, each tied to the turns that answer it.
type dialogueSet struct {
	convs     []*dialogue
	questions []dialogueQuestion
}

type dialogue struct {
	id, lang string
	turns    []dialogueTurn
}

type dialogueTurn struct {
	id, speaker, text string
	at                time.Time
}

type dialogueQuestion struct {
	conv     *dialogue
	askedAt  time.Time
	split    string
	text     string
	evidence []string
}

func loadDialogues(t testing.TB) dialogueSet {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "dialogues.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var set dialogueSet
	var cur *dialogue
	var session, turn int
	var at time.Time
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "= conversation "):
			f := strings.Fields(line)
			cur = &dialogue{id: f[2], lang: f[3]}
			set.convs = append(set.convs, cur)
			session = 0
		case strings.HasPrefix(line, "== "):
			if at, err = time.Parse(time.RFC3339, line[3:]); err != nil {
				t.Fatalf("line %d: %v", n, err)
			}
			session++
			turn = 0
		case strings.HasPrefix(line, "? "):
			p := strings.Split(line[2:], "|")
			if len(p) != 4 {
				t.Fatalf("line %d: question needs 4 fields", n)
			}
			asked, err := time.Parse(time.RFC3339, strings.TrimSpace(p[0]))
			if err != nil {
				t.Fatalf("line %d: %v", n, err)
			}
			q := dialogueQuestion{conv: cur, askedAt: asked, split: strings.TrimSpace(p[1]), text: strings.TrimSpace(p[2])}
			for _, e := range strings.Fields(p[3]) {
				if !slices.ContainsFunc(cur.turns, func(tt dialogueTurn) bool { return tt.id == e }) {
					t.Fatalf("line %d: no turn %s", n, e)
				}
				q.evidence = append(q.evidence, e)
			}
			set.questions = append(set.questions, q)
		default:
			speaker, text, ok := strings.Cut(line, ":")
			if !ok {
				t.Fatalf("line %d: not a turn: %q", n, line)
			}
			turn++
			cur.turns = append(cur.turns, dialogueTurn{id: fmt.Sprintf("s%d.%d", session, turn), speaker: speaker,
				text: strings.TrimSpace(text), at: at.Add(time.Duration(turn) * time.Minute)})
		}
	}
	return set
}

// bm25Baseline is plain BM25 (k1 1.5, b 0.75, the corpus's own average length) over words and
// CJK character pairs, with an English stop-word list (NLTK's) and nothing else: no stemming,
// no Chinese stop words, no single CJK characters, no time. It ranks every turn of the
// conversation for a question.
type bm25Baseline struct {
	docs   [][]string
	ids    []string
	df     map[string]int
	avgLen float64
}

var nltkStop = strings.Fields(`i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves
he him his himself she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that
that'll these those am is are was were be been being have has had having do does did doing a an the and but if or because as
until while of at by for with about against between into through during before after above below to from up down in out on off
over under again further then once here there when where why how all any both each few more most other some such no nor not only
own same so than too very s t can will just don don't should should've now d ll m o re ve y ain aren aren't couldn couldn't didn
didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't
shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't`)

var reBaselineWord = regexp.MustCompile(`[\p{L}\p{N}]+`)

func baselineTokens(text string) []string {
	stop := map[string]bool{}
	for _, w := range nltkStop {
		stop[w] = true
	}
	var out []string
	for _, w := range reBaselineWord.FindAllString(strings.ToLower(text), -1) {
		// Split runs of CJK into pairs (a lone character is itself); other words as they are.
		var run []rune
		flush := func() {
			switch len(run) {
			case 0:
			case 1:
				out = append(out, string(run))
			default:
				for i := 0; i+1 < len(run); i++ {
					out = append(out, string(run[i:i+2]))
				}
			}
			run = run[:0]
		}
		var word []rune
		for _, r := range w {
			if textseg.IsCJK(r) {
				if len(word) > 0 && !stop[string(word)] {
					out = append(out, string(word))
				}
				word = word[:0]
				run = append(run, r)
				continue
			}
			flush()
			if unicode.IsLetter(r) || unicode.IsDigit(r) {
				word = append(word, r)
			}
		}
		flush()
		if len(word) > 0 && !stop[string(word)] {
			out = append(out, string(word))
		}
	}
	return out
}

func newBM25Baseline(texts, ids []string) *bm25Baseline {
	b := &bm25Baseline{ids: ids, df: map[string]int{}}
	total := 0
	for _, t := range texts {
		d := baselineTokens(t)
		b.docs = append(b.docs, d)
		total += len(d)
		seen := map[string]bool{}
		for _, w := range d {
			if !seen[w] {
				seen[w] = true
				b.df[w]++
			}
		}
	}
	b.avgLen = float64(total) / float64(max(len(texts), 1))
	return b
}

func (b *bm25Baseline) rank(query string) []string {
	const k1, bb = 1.5, 0.75
	n := float64(len(b.docs))
	q := map[string]bool{}
	for _, w := range baselineTokens(query) {
		q[w] = true
	}
	type sc struct {
		id string
		s  float64
	}
	var out []sc
	for i, d := range b.docs {
		tf := map[string]float64{}
		for _, w := range d {
			tf[w]++
		}
		s := 0.0
		for w := range q {
			f := tf[w]
			if f == 0 {
				continue
			}
			df := float64(b.df[w])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			s += idf * f * (k1 + 1) / (f + k1*(1-bb+bb*float64(len(d))/b.avgLen))
		}
		if s > 0 {
			out = append(out, sc{b.ids[i], s})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].s > out[j].s })
	ids := make([]string, len(out))
	for i, o := range out {
		ids[i] = o.id
	}
	return ids
}

// hitAndRR scores a ranking (best first, at most five counted) against a question's evidence:
// whether an evidence turn is in the top five, and the reciprocal rank of the first one.
func hitAndRR(ranked []string, evidence []string) (float64, float64) {
	for i, id := range ranked[:min(5, len(ranked))] {
		if slices.Contains(evidence, id) {
			return 1, 1 / float64(i+1)
		}
	}
	return 0, 0
}

// TestDialogueRetrieval stores every turn of testdata/dialogues.txt as one memory (its speaker
// and the session's time) through Remember, asks each question through Recall at the defaults
// (limit 5, the question's time as the reference time), and compares recall@5 (an evidence
// turn in what Recall returns) and MRR with plain BM25 with English stop words ranking the same
// turns in the same run, per language and per split. Recall at its defaults must beat the
// baseline on both measures over the whole set and by five points on the held questions; the
// ranking alone (no threshold) must beat it by five points. A greeting gets no memory.
func TestDialogueRetrieval(t *testing.T) {
	set := loadDialogues(t)
	if len(set.questions) < 50 {
		t.Fatalf("%d questions", len(set.questions))
	}
	h := newHarness(t, "embedded", harnessOpts{})
	ctx := context.Background()
	type agg struct{ n, hit, rr, bHit, bRR, rHit, rRR float64 }
	aggs := map[string]*agg{}
	add := func(key string, hit, rr, bHit, bRR, rHit, rRR float64) {
		a := aggs[key]
		if a == nil {
			a = &agg{}
			aggs[key] = a
		}
		a.n++
		a.hit += hit
		a.rr += rr
		a.bHit += bHit
		a.bRR += bRR
		a.rHit += rHit
		a.rRR += rRR
	}
	for _, c := range set.convs {
		user := "dialogue-" + c.id
		byMem := map[string]string{}
		var texts, ids []string
		for _, turn := range c.turns {
			resp, err := h.svc.Remember(ctx, &memoryv1.RememberRequest{UserId: user, Type: memoryv1.MemoryType_MEMORY_TYPE_EVENT,
				Content: turn.text, Speaker: turn.speaker, OccurredAt: timestamppb.New(turn.at), Tier: memoryv1.Tier_TIER_SEMANTIC})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetUpdatedExisting() {
				t.Errorf("%s %s %q was merged into %q", c.id, turn.id, turn.text, resp.GetMemory().GetContent())
			}
			byMem[resp.GetMemory().GetId()] = turn.id
			texts = append(texts, turn.speaker+": "+turn.text)
			ids = append(ids, turn.id)
		}
		base := newBM25Baseline(texts, ids)
		// Nothing in the conversation answers a greeting: it gets no memory.
		for _, greeting := range []string{"hello, what can you do?", "今天天气怎么样？"} {
			resp, err := h.svc.Recall(ctx, &memoryv1.RecallRequest{UserId: user, Query: greeting})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(resp.GetMemories()); n != 0 {
				t.Errorf("%s: %q recalled %d memories: %v", c.id, greeting, n, resp.GetMemories())
			}
		}
		for _, q := range set.questions {
			if q.conv != c {
				continue
			}
			resp, err := h.svc.Recall(ctx, &memoryv1.RecallRequest{UserId: user, Query: q.text, ReferenceTime: timestamppb.New(q.askedAt)})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range resp.GetMemories() {
				got = append(got, byMem[m.GetMemory().GetId()])
			}
			hit, rr := hitAndRR(got, q.evidence)
			bHit, bRR := hitAndRR(base.rank(q.text), q.evidence)
			// The ranking alone: Recall with no threshold.
			resp, err = h.svc.Recall(ctx, &memoryv1.RecallRequest{UserId: user, Query: q.text, ReferenceTime: timestamppb.New(q.askedAt), MinSimilarity: ptr(1e-9)})
			if err != nil {
				t.Fatal(err)
			}
			var ranked []string
			for _, m := range resp.GetMemories() {
				ranked = append(ranked, byMem[m.GetMemory().GetId()])
			}
			rHit, rRR := hitAndRR(ranked, q.evidence)
			if hit < bHit {
				t.Logf("baseline finds, Recall does not: %s %q (evidence %v, got %v)", c.id, q.text, q.evidence, got)
			}
			for _, key := range []string{"all", c.lang, q.split, c.lang + " " + q.split} {
				add(key, hit, rr, bHit, bRR, rHit, rRR)
			}
		}
	}
	keys := make([]string, 0, len(aggs))
	for k := range aggs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a := aggs[k]
		t.Logf("%-9s %2.0f questions: Recall recall@5 %.3f MRR %.3f | no threshold %.3f %.3f | BM25+stop words %.3f %.3f", k, a.n, a.hit/a.n, a.rr/a.n, a.rHit/a.n, a.rRR/a.n, a.bHit/a.n, a.bRR/a.n)
	}
	all := aggs["all"]
	if all.hit < all.bHit || all.rr < all.bRR {
		t.Errorf("Recall recall@5 %.3f MRR %.3f; want at least BM25's %.3f and %.3f", all.hit/all.n, all.rr/all.n, all.bHit/all.n, all.bRR/all.n)
	}
	if held := aggs["held"]; held.hit/held.n < held.bHit/held.n+0.05 || held.rr/held.n < held.bRR/held.n+0.05 {
		t.Errorf("held questions: Recall recall@5 %.4f MRR %.4f; want 0.05 above BM25's %.4f and %.4f", held.hit/held.n, held.rr/held.n, held.bHit/held.n, held.bRR/held.n)
	}
	if all.rHit/all.n < all.bHit/all.n+0.05 || all.rRR/all.n < all.bRR/all.n+0.045 {
		t.Errorf("ranking without threshold: recall@5 %.4f MRR %.4f; want 0.05 and 0.045 above BM25's %.4f and %.4f", all.rHit/all.n, all.rRR/all.n, all.bHit/all.n, all.bRR/all.n)
	}
}
