package memory

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/hermes-agent/hermes/internal/workpool"
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
	hit       Hit
	tier      memoryv1.Tier
	score     float64
	reason    string
	threshold float64
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
	ref := p.refTime
	if ref.IsZero() {
		ref = now
	}
	win, hasWin := queryTimeWindow(p.query, ref)
	q, err := s.recallQuery(ctx, p, now, ref, win, hasWin)
	if err != nil {
		return nil, err
	}
	hits, err := s.searchTiers(ctx, p.userID, q)
	if err != nil {
		return nil, err
	}
	var boost []float64
	if len(p.attributeKeys) == 0 {
		boost = contextBoost(hits, s.cfg.ContextWeight)
	}
	ranked := make([]recalled, 0, len(hits))
	for i, h := range hits {
		var b float64
		if boost != nil {
			b = boost[i]
		}
		// The pool of a context search holds memories below the threshold too: one is kept
		// only when its similarity with what it borrows from the memory it follows reaches it.
		if q.ContextPool && h.Similarity < h.Floor && h.Similarity+b < h.Floor {
			continue
		}
		r := recalled{hit: h.Hit, tier: h.tier, threshold: appliedThreshold(h.Hit, p, q)}
		r.score, r.reason = s.weigh(h.Hit, b, now, win, hasWin)
		r.reason = s.foundBecause(h.Hit, b, p, q) + "; " + r.reason
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
		out = append(out, &memoryv1.RecalledMemory{Memory: m, Score: r.score, Similarity: r.hit.Similarity, Reason: r.reason, Threshold: r.threshold})
	}
	s.queueTouch(p.userID, ranked, now)
	return out, nil
}

// recallQuery builds the tiers' search: the query's lexical terms, its vector with a model
// embedder, the thresholds (none for an attribute lookup) and the filters. A past time named
// relative to the time of asking ("last weekend", "上周") keeps its words in the query: people
// repeat them ("I ran 20 miles last weekend"), and the memories' own times may be unknown; the
// window boosts what happened then (recall).
func (s *Service) recallQuery(ctx context.Context, p recallParams, now, ref time.Time, win timeWindow, hasWin bool) (SearchQuery, error) {
	text := p.query
	if hasWin && win.relative && win.contains(ref) {
		// "today", "今天", "this week" name the asker's present: a memory that says "today"
		// said it of another day, so the words would only match the wrong memories.
		text = strings.Replace(strings.ToLower(text), win.phrase, " ", 1)
	}
	q := SearchQuery{
		Lexical: lexQuery(text), MinLexical: s.cfg.LexicalMinSimilarity, MinSimilarity: s.cfg.MinSimilarity,
		Limit: max(3*p.limit, 20), Types: p.types, OccurredAfter: p.occurredAfter, OccurredBefore: p.occurredBefore,
	}
	if s.emb.Lexical() {
		q.MinLexical = p.minSimilarity
		q.ContextPool = s.cfg.ContextWeight > 0 && len(p.attributeKeys) == 0
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
	g, gctx := workpool.NewGroup(ctx, s.pool)
	for i, t := range tiers {
		search := func() error {
			hits, err := s.tier(t).Search(gctx, userID, q)
			results[i] = hits
			return err
		}
		if i == len(tiers)-1 {
			g.Do(search) // this goroutine would only wait
		} else {
			g.Go(search)
		}
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
func (s *Service) foundBecause(h Hit, boost float64, p recallParams, q SearchQuery) string {
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
	case q.ContextPool && h.Similarity < h.Floor:
		return fmt.Sprintf("BM25 score %.3f + %.3f from the memory it follows >= %.3f", h.Similarity, boost, h.Floor)
	case q.ContextPool:
		return fmt.Sprintf("BM25 score %.3f >= %.3f", h.Similarity, h.Floor)
	default:
		return fmt.Sprintf("BM25 score %.3f >= %.3f", h.Similarity, appliedThreshold(h, p, q))
	}
}

// appliedThreshold is the threshold a hit was held to: none for an attribute lookup, the cosine
// threshold with a model embedder, else the lexical floor the store applied (the configured one,
// capped for users with few memories).
func appliedThreshold(h Hit, p recallParams, q SearchQuery) float64 {
	switch {
	case len(p.attributeKeys) > 0:
		return 0
	case len(q.Vector) > 0:
		return q.MinSimilarity
	case h.Floor > 0:
		return h.Floor
	default:
		return q.MinLexical
	}
}

// conversationGap is the longest pause between two memories of one session that still makes
// the later one follow the earlier in a conversation.
const conversationGap = 30 * time.Minute

// contextBoost returns, per hit, w × the similarity of the hit it directly follows in its
// conversation: the memory it names as the one it follows (Memory.follows_id, set when it was
// written), else — for memories written without a link — the hit of the same session that
// happened last before it, at most conversationGap earlier (memories that happened at the same
// moment are ordered by when they were written). In a conversation the turn that answers a
// question is the one after it, and it often shares few words with the question that a later
// query repeats. Only hits lend and borrow, so a memory sharing no word with the query gets
// nothing and lends nothing.
func contextBoost(hits []tierHit, w float64) []float64 {
	boost := make([]float64, len(hits))
	if w <= 0 || len(hits) < 2 {
		return boost
	}
	type key struct {
		session  string
		occurred time.Time
		created  time.Time
	}
	keys := make([]key, len(hits))
	order := make([]int, len(hits))
	for i, h := range hits {
		m := h.Memory
		keys[i] = key{m.GetSessionId(), occurredAt(m), m.GetCreatedAt().AsTime()}
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		ka, kb := keys[order[a]], keys[order[b]]
		switch {
		case ka.session != kb.session:
			return ka.session < kb.session
		case !ka.occurred.Equal(kb.occurred):
			return ka.occurred.Before(kb.occurred)
		default:
			return ka.created.Before(kb.created)
		}
	})
	for j := 1; j < len(order); j++ {
		prev, cur := keys[order[j-1]], keys[order[j]]
		if prev.session != cur.session || cur.occurred.Sub(prev.occurred) > conversationGap {
			continue
		}
		if cur.occurred.Equal(prev.occurred) && !cur.created.After(prev.created) {
			continue // written at the same moment: no order between them
		}
		boost[order[j]] = w * hits[order[j-1]].Similarity
	}
	// A link names the turn before exactly; the order above only guesses it among the hits.
	byID := make(map[string]int, len(hits))
	for i, h := range hits {
		byID[h.Memory.GetId()] = i
	}
	for i, h := range hits {
		if f := h.Memory.GetFollowsId(); f != "" {
			boost[i] = 0
			if j, ok := byID[f]; ok {
				boost[i] = w * hits[j].Similarity
			}
		}
	}
	return boost
}

// weigh is the ordering score of a memory that passed the threshold: (similarity + boost, what
// it borrows from the memory it follows, see contextBoost) × source weight × (1 − w + w·r),
// where r halves every recency half-life since the last update, × (1 + memory.time-boost) when
// the memory happened in the time the query names.
func (s *Service) weigh(h Hit, boost float64, now time.Time, win timeWindow, hasWin bool) (float64, string) {
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
	score := (h.Similarity + boost) * sw * (1 - w + w*r)
	why := fmt.Sprintf("updated %s ago; recency x%.2f; %s weight %.2f", humanAge(age), 1-w+w*r, sourceName(h.Memory.GetSource()), sw)
	if boost > 0 {
		why = fmt.Sprintf("follows a matching memory in its conversation: +%.3f; ", boost) + why
	}
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
