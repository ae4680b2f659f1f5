package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// retrievalSet is testdata/retrieval.json (made by testdata/gen_retrieval.py).
type retrievalSet struct {
	Memories []struct {
		ID         string            `json:"id"`
		User       string            `json:"user"`
		Type       string            `json:"type"`
		Content    string            `json:"content"`
		Subject    string            `json:"subject"`
		Attributes map[string]string `json:"attributes"`
	} `json:"memories"`
	Queries []struct {
		User     string   `json:"user"`
		Query    string   `json:"query"`
		Relevant []string `json:"relevant"`
	} `json:"queries"`
}

func loadRetrievalSet(t testing.TB) retrievalSet {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "retrieval.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s retrievalSet
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// rankedSims returns, per query, the similarity-ranked (memory set id, similarity) pairs of
// the query's user — the raw ranking before any threshold — through the embedded store's
// Search, exactly as Recall runs it.
type rankedHit struct {
	id  string
	sim float64
}

func rankRetrievalSet(t testing.TB, emb Embedder) ([][]rankedHit, retrievalSet) {
	t.Helper()
	set := loadRetrievalSet(t)
	ctx := context.Background()
	bs, err := OpenBoltStore(filepath.Join(t.TempDir(), "eval.db"), BoltOptions{EpisodicTTL: time.Hour, Embedder: emb.Name(), Dimension: emb.Dimension(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	now := time.Now()
	byStoreID := map[string]string{}
	const batch = 64
	for start := 0; start < len(set.Memories); start += batch {
		end := min(start+batch, len(set.Memories))
		var ms []*memoryv1.Memory
		var texts []string
		for _, sm := range set.Memories[start:end] {
			typ, _ := parseType(sm.Type)
			m := &memoryv1.Memory{Id: newID(), UserId: sm.User, Type: typ, Content: sm.Content, Subject: normalizeSubject(sm.Subject),
				Attributes: sm.Attributes, CreatedAt: ts(now), UpdatedAt: ts(now)}
			byStoreID[m.Id] = sm.ID
			ms = append(ms, m)
			texts = append(texts, embedText(m))
		}
		vecs, err := emb.Embed(ctx, texts)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range ms {
			if err := bs.Semantic().Put(ctx, Entry{Memory: m, Vector: vecs[i]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := make([][]rankedHit, len(set.Queries))
	for qi, q := range set.Queries {
		v, err := emb.Embed(ctx, []string{q.Query})
		if err != nil {
			t.Fatal(err)
		}
		hits, err := bs.Semantic().Search(ctx, q.User, SearchQuery{Vector: v[0], MinSimilarity: -1, Limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			out[qi] = append(out[qi], rankedHit{byStoreID[h.Memory.GetId()], h.Similarity})
		}
	}
	return out, set
}

// retrievalMetrics are measured at a threshold: what Recall with limit 5 returns.
type retrievalMetrics struct {
	threshold     float64
	recall5       float64 // relevant memories returned / relevant memories (queries with answers)
	precision     float64 // relevant returned / returned (all queries, no-answer ones included)
	rankOnly      float64 // recall@5 without a threshold: the ranking alone
	returned      int
	noAnswerFalse int // memories returned for queries with no relevant memory
}

func measure(ranked [][]rankedHit, set retrievalSet, threshold float64) retrievalMetrics {
	m := retrievalMetrics{threshold: threshold}
	var relTotal, relFound, relRank, returned, correct int
	for qi, q := range set.Queries {
		var top []string
		var rankTop []string
		for _, h := range ranked[qi] {
			if len(rankTop) < 5 {
				rankTop = append(rankTop, h.id)
			}
			if h.sim >= threshold && len(top) < 5 {
				top = append(top, h.id)
			}
		}
		returned += len(top)
		for _, id := range top {
			if slices.Contains(q.Relevant, id) {
				correct++
			}
		}
		if len(q.Relevant) == 0 {
			m.noAnswerFalse += len(top)
		}
		for _, r := range q.Relevant {
			relTotal++
			if slices.Contains(top, r) {
				relFound++
			}
			if slices.Contains(rankTop, r) {
				relRank++
			}
		}
	}
	m.returned = returned
	m.recall5 = float64(relFound) / float64(relTotal)
	m.rankOnly = float64(relRank) / float64(relTotal)
	if returned > 0 {
		m.precision = float64(correct) / float64(returned)
	} else {
		m.precision = 1
	}
	return m
}

func (m retrievalMetrics) String() string {
	return fmt.Sprintf("threshold %.2f: recall@5 %.3f, precision %.3f (%d returned, %d for no-answer queries), ranking-only recall@5 %.3f",
		m.threshold, m.recall5, m.precision, m.returned, m.noAnswerFalse, m.rankOnly)
}

// TestRetrievalSet measures recall@5 and precision of each embedder on testdata/retrieval.json
// at its configured default threshold, and sweeps thresholds to show the calibration. The
// OpenAI-compatible embedder is measured too when HERMES_EMBED_BASE_URL (and
// HERMES_EMBED_MODEL) point at an endpoint.
func TestRetrievalSet(t *testing.T) {
	set := loadRetrievalSet(t)
	users := map[string]bool{}
	zh, en := 0, 0
	for _, m := range set.Memories {
		users[m.User] = true
	}
	for _, q := range set.Queries {
		if strings.ContainsFunc(q.Query, isCJK) {
			zh++
		} else {
			en++
		}
	}
	if len(set.Memories) < 500 || len(set.Queries) < 50 || len(users) < 3 || zh == 0 || en == 0 {
		t.Fatalf("the set has %d memories, %d queries (%d Chinese, %d English), %d users", len(set.Memories), len(set.Queries), zh, en, len(users))
	}
	cfg := DefaultConfig()
	type embCase struct {
		emb       Embedder
		threshold float64
		minRecall float64
		minPrec   float64
	}
	cases := []embCase{{NewLexicalEmbedder(cfg.LexicalDimensions), cfg.LexicalMinSimilarity, 0.35, 0.25}}
	if base := os.Getenv("HERMES_EMBED_BASE_URL"); base != "" {
		mdl := os.Getenv("HERMES_EMBED_MODEL")
		if mdl == "" {
			mdl = "text-embedding-3-small"
		}
		e, err := NewOpenAIEmbedder(context.Background(), OpenAIEmbedderConfig{BaseURL: base, Model: mdl, APIKey: os.Getenv("HERMES_MODEL_API_KEY")})
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, embCase{e, cfg.MinSimilarity, 0, 0})
	}
	for _, c := range cases {
		t.Run(c.emb.Name(), func(t *testing.T) {
			ranked, set := rankRetrievalSet(t, c.emb)
			def := measure(ranked, set, c.threshold)
			t.Logf("%s default %s", c.emb.Name(), def)
			var sweep []retrievalMetrics
			for _, th := range []float64{0.05, 0.08, 0.10, 0.12, 0.15, 0.17, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50} {
				sweep = append(sweep, measure(ranked, set, th))
			}
			sort.SliceStable(sweep, func(i, j int) bool { return f1(sweep[i]) > f1(sweep[j]) })
			for _, m := range sweep[:6] {
				t.Logf("  best F1 %.3f at %s", f1(m), m)
			}
			if def.recall5 < c.minRecall || def.precision < c.minPrec {
				t.Errorf("%s at its default threshold: %s; want recall@5 >= %.2f and precision >= %.2f", c.emb.Name(), def, c.minRecall, c.minPrec)
			}
		})
	}
}

func f1(m retrievalMetrics) float64 {
	if m.recall5+m.precision == 0 {
		return 0
	}
	return 2 * m.recall5 * m.precision / (m.recall5 + m.precision)
}
