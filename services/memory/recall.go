package memory

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// recallParams are a validated Recall request.
type recallParams struct {
	userID         string
	query          string
	limit          int
	minSimilarity  float64       // the threshold of the configured embedder's similarity
	maxAge         time.Duration // 0: no age limit
	types          []memoryv1.MemoryType
	attributeKeys  []string // an attribute lookup
	occurredAfter  time.Time
	occurredBefore time.Time
	refTime        time.Time // zero: now
}

// recalled is a memory found by recall, with its ordering score and why it was found.
type recalled struct {
	hit    Hit
	tier   memoryv1.Tier
	score  float64
	reason string
}

// recall finds the user's live memories relevant to the query: both tiers are searched with the
// query's terms (BM25) and, with a model embedder, its vector (the two rankings fused), and only
// memories at or above the threshold of their similarity are kept. Only those are then ordered
// by a score that weighs in the source's weight, recency and whether the memory happened in the
// time the query names, so these reorder relevant memories but never let an irrelevant one in.
// Facts are exempt from the age limit.
//
// An attribute lookup (attributeKeys) is the other use: every memory carrying one of the keys,
// ranked by similarity and recency, without a threshold, for filling a missing tool argument.
func (s *Service) recall(ctx context.Context, p recallParams) ([]*memoryv1.RecalledMemory, error) {
	now := s.now()
	q, err := s.recallQuery(ctx, p, now)
	if err != nil {
		return nil, err
	}
	hits, err := s.searchTiers(ctx, p.userID, q)
	if err != nil {
		return nil, err
	}
	ref := p.refTime
	if ref.IsZero() {
		ref = now
	}
	win, hasWin := queryTimeWindow(p.query, ref)
	ranked := make([]recalled, 0, len(hits))
	for _, h := range hits {
		r := recalled{hit: h.Hit, tier: h.tier}
		r.score, r.reason = s.weigh(h.Hit, now, win, hasWin)
		r.reason = s.foundBecause(h.Hit, p, q) + "; " + r.reason
		ranked = append(ranked, r)
	}
	sort.SliceStable(ranked, func(i, j int) bool {
		if ranked[i].score != ranked[j].score {
			return ranked[i].score > ranked[j].score
		}
		return ranked[i].hit.Memory.GetUpdatedAt().AsTime().After(ranked[j].hit.Memory.GetUpdatedAt().AsTime())
	})
	if len(ranked) > p.limit {
		ranked = ranked[:p.limit]
	}
	out := make([]*memoryv1.RecalledMemory, 0, len(ranked))
	for _, r := range ranked {
		m := r.hit.Memory
		m.Tier = r.tier
		out = append(out, &memoryv1.RecalledMemory{Memory: m, Score: r.score, Similarity: r.hit.Similarity, Reason: r.reason})
	}
	s.queueTouch(p.userID, ranked, now)
	return out, nil
}

// recallQuery builds the tiers' search: the query's lexical terms, its vector with a model
// embedder, the thresholds (none for an attribute lookup) and the filters.
func (s *Service) recallQuery(ctx context.Context, p recallParams, now time.Time) (SearchQuery, error) {
	q := SearchQuery{
		Lexical: lexQuery(p.query), MinLexical: s.cfg.LexicalMinSimilarity, MinSimilarity: s.cfg.MinSimilarity,
		Limit: max(3*p.limit, 20), Types: p.types, OccurredAfter: p.occurredAfter, OccurredBefore: p.occurredBefore,
	}
	if s.emb.Lexical() {
		q.MinLexical = p.minSimilarity
	} else {
		q.MinSimilarity = p.minSimilarity
		vec, err := s.embedOne(ctx, p.query)
		if err != nil {
			return q, err
		}
		q.Vector = vec
	}
	if p.maxAge > 0 {
		q.UpdatedAfter = now.Add(-p.maxAge)
	}
	if len(p.attributeKeys) > 0 {
		q.AttributeKeys = p.attributeKeys
		q.MinLexical, q.MinSimilarity = 0, -1
		if q.Lexical.empty() {
			// Every memory carrying the key qualifies; a term no memory has makes the lexical
			// search a plain ranking by recency.
			q.Lexical = sparseVec{idx: []uint32{0}, val: []float32{0}}
		}
	}
	return q, nil
}

// tierHit is a hit with the tier it came from.
type tierHit struct {
	Hit
	tier memoryv1.Tier
}

// searchTiers searches both tiers at once and merges their hits (a memory in both, moved
// meanwhile, counts once, with its better similarity).
func (s *Service) searchTiers(ctx context.Context, userID string, q SearchQuery) ([]tierHit, error) {
	tiers := []memoryv1.Tier{memoryv1.Tier_TIER_EPISODIC, memoryv1.Tier_TIER_SEMANTIC}
	results := make([][]Hit, len(tiers))
	g, gctx := errgroup.WithContext(ctx)
	for i, t := range tiers {
		g.Go(func() error {
			hits, err := s.tier(t).Search(gctx, userID, q)
			results[i] = hits
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	at := map[string]int{}
	var out []tierHit
	for i, hits := range results {
		for _, h := range hits {
			if j, ok := at[h.Memory.GetId()]; ok {
				if h.Similarity > out[j].Similarity {
					out[j] = tierHit{h, tiers[i]}
				}
				continue
			}
			at[h.Memory.GetId()] = len(out)
			out = append(out, tierHit{h, tiers[i]})
		}
	}
	return out, nil
}

// foundBecause says why a hit was found, in the terms of the search that found it.
func (s *Service) foundBecause(h Hit, p recallParams, q SearchQuery) string {
	switch {
	case len(p.attributeKeys) > 0:
		var keys []string
		for _, k := range p.attributeKeys {
			if _, ok := h.Memory.GetAttributes()[k]; ok {
				keys = append(keys, k)
			}
		}
		return fmt.Sprintf("attribute lookup: carries %s (no similarity threshold); lexical score %.3f", strings.Join(keys, ", "), h.Similarity)
	case len(q.Vector) > 0:
		return fmt.Sprintf("fused rank score %.4f of BM25 (>= %.2f) and cosine (>= %.2f) rankings", h.Similarity, q.MinLexical, q.MinSimilarity)
	default:
		return fmt.Sprintf("BM25 score %.3f >= %.3f", h.Similarity, q.MinLexical)
	}
}

// weigh is the ordering score of a memory that passed the threshold: similarity × source weight
// × (1 − w + w·r), where r halves every recency half-life since the last update, × (1 +
// memory.time-boost) when the memory happened in the time the query names.
func (s *Service) weigh(h Hit, now time.Time, win timeWindow, hasWin bool) (float64, string) {
	age := max(now.Sub(h.Memory.GetUpdatedAt().AsTime()), 0)
	r := 1.0
	if hl := s.cfg.RecencyHalfLife; hl > 0 {
		r = math.Pow(0.5, float64(age)/float64(hl))
	}
	w := min(max(s.cfg.RecencyWeight, 0), 1)
	sw := 1.0
	switch h.Memory.GetSource() {
	case memoryv1.Source_SOURCE_EXPLICIT:
		sw = s.cfg.ExplicitWeight
	case memoryv1.Source_SOURCE_IMPLICIT:
		sw = s.cfg.ImplicitWeight
	}
	score := h.Similarity * sw * (1 - w + w*r)
	why := fmt.Sprintf("updated %s ago; recency x%.2f; %s weight %.2f", humanAge(age), 1-w+w*r, sourceName(h.Memory.GetSource()), sw)
	if hasWin && win.contains(occurredAt(h.Memory)) {
		score *= 1 + max(s.cfg.TimeBoost, 0)
		why += fmt.Sprintf("; happened %s, in the query's %q: x%.2f", occurredAt(h.Memory).Format("2006-01-02"), win.phrase, 1+max(s.cfg.TimeBoost, 0))
	}
	return score, why
}

// queueTouch records the recall of what it returned in the background, so Recall answers
// without waiting for a write.
func (s *Service) queueTouch(userID string, ranked []recalled, now time.Time) {
	if len(ranked) == 0 {
		return
	}
	tr := touchReq{userID: userID, at: now}
	for _, r := range ranked {
		if r.tier == memoryv1.Tier_TIER_SEMANTIC {
			tr.sem = append(tr.sem, r.hit.Memory.GetId())
		} else {
			tr.ep = append(tr.ep, r.hit.Memory.GetId())
		}
	}
	select {
	case s.touches <- tr:
	default:
		s.log.Warn("recall statistics queue full; a recall is not recorded", "user", userID)
	}
}

func sourceName(s memoryv1.Source) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "SOURCE_"))
}

func humanAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
