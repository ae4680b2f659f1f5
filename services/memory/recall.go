package memory

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// recallParams are a validated Recall request.
type recallParams struct {
	userID        string
	query         string
	limit         int
	minSimilarity float64
	maxAge        time.Duration // 0: no age limit
	types         []memoryv1.MemoryType
	attributeKeys []string
}

// recall finds the user's live memories similar to the query. The threshold is applied to the
// raw similarity first; only the memories that passed are then ordered by a score that weighs
// in recency and the source's weight, so recency reorders relevant memories but never lets an
// irrelevant one in. Facts are exempt from the age limit.
//
// With the lexical embedder the similarity is lexical: the stored vectors find candidates (the
// query vector weighted by IDF² over the user's memories, see lexicalSimilarity), and each
// candidate is then scored exactly on its unhashed features, so hash collisions add nothing.
// A threshold above zero also leaves out memories below memory.lexical-relative-similarity ×
// the best similarity: a weak match next to a much stronger one is usually a shared common
// word. Both cuts come before recency weighting.
func (s *Service) recall(ctx context.Context, p recallParams) ([]*memoryv1.RecalledMemory, error) {
	vec, err := s.embedOne(ctx, p.query)
	if err != nil {
		return nil, err
	}
	now := s.now()
	q := SearchQuery{Vector: vec, MinSimilarity: p.minSimilarity, Limit: max(3*p.limit, 20), Types: p.types}
	lex, lexOK := s.emb.(lexicalEmbedding)
	var lq lexicalQuery
	var lexN int
	if lexOK && s.emb.Lexical() {
		lq, lexN, err = s.lexicalQuery(ctx, lex, p.userID, p.query)
		if err != nil {
			return nil, err
		}
		q.Vector = lq.weighted(vec)
		// Candidates: anything sharing a feature, the best 50 or more; the exact score decides.
		q.Limit = max(10*p.limit, 50)
		if p.minSimilarity > 0 {
			q.MinSimilarity = 1e-9
		}
	} else {
		lexOK = false
	}
	if p.maxAge > 0 {
		q.UpdatedAfter = now.Add(-p.maxAge)
	}
	type tierHits struct {
		tier memoryv1.Tier
		hits []Hit
	}
	var results [4]tierHits
	g, gctx := errgroup.WithContext(ctx)
	for i, t := range []memoryv1.Tier{memoryv1.Tier_TIER_EPISODIC, memoryv1.Tier_TIER_SEMANTIC} {
		g.Go(func() error {
			hits, err := s.tier(t).Search(gctx, p.userID, q)
			results[i] = tierHits{t, hits}
			return err
		})
		if len(p.attributeKeys) > 0 {
			aq := q
			aq.MinSimilarity = -1
			aq.AttributeKeys = p.attributeKeys
			aq.Limit = max(p.limit, 5)
			g.Go(func() error {
				hits, err := s.tier(t).Search(gctx, p.userID, aq)
				results[2+i] = tierHits{t, hits}
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// vecSim keeps the vector's similarity of each lexical hit for the reason.
	vecSim := map[string]float64{}
	if lexOK {
		for i := range results {
			for j := range results[i].hits {
				h := &results[i].hits[j]
				vecSim[h.Memory.GetId()] = h.Similarity
				h.Similarity = lexicalSimilarity(lq, lex.profile(embedText(h.Memory)))
			}
		}
	}

	type cand struct {
		hit    Hit
		tier   memoryv1.Tier
		score  float64
		reason string
		byAttr string
	}
	seen := map[string]bool{}
	var passed []cand
	best := 0.0
	for _, r := range results[:2] {
		for _, h := range r.hits {
			if h.Similarity < p.minSimilarity || seen[h.Memory.GetId()] {
				continue
			}
			seen[h.Memory.GetId()] = true
			best = max(best, h.Similarity)
			passed = append(passed, cand{hit: h, tier: r.tier})
		}
	}
	rel := 0.0
	if lexOK && p.minSimilarity > 0 {
		rel = min(max(s.cfg.LexicalRelativeSimilarity, 0), 1)
	}
	var relevant []cand
	for _, c := range passed {
		h := c.hit
		if h.Similarity < rel*best {
			delete(seen, h.Memory.GetId())
			continue
		}
		score, why := s.weigh(h, now)
		c.score = score
		if !lexOK {
			c.reason = fmt.Sprintf("similarity %.3f >= %.3f; %s", h.Similarity, p.minSimilarity, why)
		} else {
			relCut := ""
			if rel > 0 {
				relCut = fmt.Sprintf(" and >= %.2f x best %.3f", rel, best)
			}
			c.reason = fmt.Sprintf("lexical similarity %.3f >= %.3f%s (IDF over %d memories; hashed vector %.3f); %s",
				h.Similarity, p.minSimilarity, relCut, lexN, vecSim[h.Memory.GetId()], why)
		}
		relevant = append(relevant, c)
	}
	sort.SliceStable(relevant, func(i, j int) bool { return relevant[i].score > relevant[j].score })
	if len(relevant) > p.limit {
		relevant = relevant[:p.limit]
	}

	// One memory per requested attribute key — the most recently updated one carrying it —
	// joins the result when none of the relevant memories carries that key. It takes the place
	// of the lowest-ranked relevant memory only when the result is full.
	if len(p.attributeKeys) > 0 {
		var attrHits []cand
		for _, r := range results[2:] {
			for _, h := range r.hits {
				attrHits = append(attrHits, cand{hit: h, tier: r.tier})
			}
		}
		sort.SliceStable(attrHits, func(i, j int) bool {
			return attrHits[i].hit.Memory.GetUpdatedAt().AsTime().After(attrHits[j].hit.Memory.GetUpdatedAt().AsTime())
		})
		for _, key := range p.attributeKeys {
			covered := false
			for _, c := range relevant {
				if _, ok := c.hit.Memory.GetAttributes()[key]; ok {
					covered = true
					break
				}
			}
			if covered {
				continue
			}
			for _, c := range attrHits {
				if _, ok := c.hit.Memory.GetAttributes()[key]; !ok || seen[c.hit.Memory.GetId()] {
					continue
				}
				seen[c.hit.Memory.GetId()] = true
				c.score, _ = s.weigh(c.hit, now)
				c.reason = fmt.Sprintf("carries requested attribute %s; similarity %.3f (below the threshold is allowed for attribute lookups)", key, c.hit.Similarity)
				if len(relevant) >= p.limit {
					relevant = relevant[:p.limit-1]
				}
				relevant = append(relevant, c)
				break
			}
		}
	}

	out := make([]*memoryv1.RecalledMemory, 0, len(relevant))
	tr := touchReq{userID: p.userID, at: now}
	for _, c := range relevant {
		m := c.hit.Memory
		m.Tier = c.tier
		out = append(out, &memoryv1.RecalledMemory{Memory: m, Score: c.score, Similarity: c.hit.Similarity, Reason: c.reason})
		if c.tier == memoryv1.Tier_TIER_SEMANTIC {
			tr.sem = append(tr.sem, m.GetId())
		} else {
			tr.ep = append(tr.ep, m.GetId())
		}
	}
	if len(out) > 0 {
		select {
		case s.touches <- tr:
		default:
			s.log.Warn("recall statistics queue full; a recall is not recorded", "user", p.userID)
		}
	}
	return out, nil
}

// lexicalEmbedding is the lexical embedder's exact scoring, which recall uses when the
// embedder is lexical.
type lexicalEmbedding interface {
	profile(text string) lexicalProfile
}

// lexicalQuery profiles the query and weighs its features by IDF² over the user's memories in
// both tiers; n is how many memories that is.
func (s *Service) lexicalQuery(ctx context.Context, lex lexicalEmbedding, userID, query string) (lexicalQuery, int, error) {
	qp := lex.profile(query)
	var dims []int
	at := map[int]int{}
	for _, f := range qp.feats {
		if _, ok := at[f.bucket]; !ok {
			at[f.bucket] = len(dims)
			dims = append(dims, f.bucket)
		}
	}
	var n [2]int
	var df [2][]int
	g, gctx := errgroup.WithContext(ctx)
	for i, t := range []TierStore{s.ep, s.sem} {
		g.Go(func() error {
			var err error
			n[i], df[i], err = t.DocFreq(gctx, userID, dims)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return lexicalQuery{}, 0, err
	}
	total := n[0] + n[1]
	lq := lexicalQuery{p: qp, idf2: make(map[string]float64, len(qp.feats)), idf2ByDim: map[int]float64{}}
	var sq float64
	for f, qf := range qp.feats {
		j := at[qf.bucket]
		idf := lexicalIDF(total, df[0][j]+df[1][j])
		lq.idf2[f] = idf * idf
		lq.idf2ByDim[qf.bucket] = idf * idf
		w := qf.w * idf * idf
		sq += w * w
	}
	lq.norm = math.Sqrt(sq)
	return lq, total, nil
}

// weigh is the ordering score of a memory that passed the threshold: similarity × source
// weight × (1 − w + w·r), where r halves every recency half-life since the last update.
func (s *Service) weigh(h Hit, now time.Time) (float64, string) {
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
	return score, fmt.Sprintf("updated %s ago; recency x%.2f; %s weight %.2f", humanAge(age), 1-w+w*r, sourceName(h.Memory.GetSource()), sw)
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

// listParams are a validated ListMemories request.
type listParams struct {
	userID         string
	types          []memoryv1.MemoryType
	tier           memoryv1.Tier
	includeExpired bool
	pageSize       int
	after          *pageCursor
}

// pageCursor is the position after the last memory of a page: newest first, by creation time
// then id.
type pageCursor struct {
	createdMs int64
	id        string
}

func (c pageCursor) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.createdMs, 10) + "|" + c.id))
}

func parsePageToken(s string) (*pageCursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not a page token of this service")
	}
	ms, id, ok := strings.Cut(string(b), "|")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || !validID(id) {
		return nil, errors.New("not a page token of this service")
	}
	return &pageCursor{createdMs: n, id: id}, nil
}

func (c pageCursor) before(o pageCursor) bool {
	if c.createdMs != o.createdMs {
		return c.createdMs > o.createdMs
	}
	return c.id > o.id
}

// list returns one page of the user's memories, newest first.
func (s *Service) list(ctx context.Context, p listParams) ([]*memoryv1.Memory, string, error) {
	var all []*memoryv1.Memory
	for _, t := range []memoryv1.Tier{memoryv1.Tier_TIER_EPISODIC, memoryv1.Tier_TIER_SEMANTIC} {
		if p.tier != memoryv1.Tier_TIER_UNSPECIFIED && p.tier != t {
			continue
		}
		err := s.tier(t).Scan(ctx, p.userID, func(e Entry) error {
			m := e.Memory
			if (!p.includeExpired && !live(m)) || !typeAllowed(p.types, m.GetType()) {
				return nil
			}
			m.Tier = t
			all = append(all, m)
			return nil
		})
		if err != nil {
			return nil, "", err
		}
	}
	cur := func(m *memoryv1.Memory) pageCursor {
		return pageCursor{m.GetCreatedAt().AsTime().UnixMilli(), m.GetId()}
	}
	sort.Slice(all, func(i, j int) bool { return cur(all[i]).before(cur(all[j])) })
	start := 0
	if p.after != nil {
		start = sort.Search(len(all), func(i int) bool { return p.after.before(cur(all[i])) })
	}
	end := min(start+p.pageSize, len(all))
	page := all[start:end]
	next := ""
	if end < len(all) && len(page) > 0 {
		next = cur(page[len(page)-1]).token()
	}
	return page, next, nil
}

// forget deletes one memory of the user from whichever tier holds it.
func (s *Service) forget(ctx context.Context, userID, id string) error {
	found := false
	for _, t := range []TierStore{s.ep, s.sem} {
		ok, err := t.Delete(ctx, userID, id)
		if err != nil {
			return err
		}
		found = found || ok
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// forgetUser deletes everything of the user in every store.
func (s *Service) forgetUser(ctx context.Context, userID string) (*memoryv1.ForgetUserResponse, error) {
	ep, err := s.ep.DeleteUser(ctx, userID)
	if err != nil {
		return nil, err
	}
	sem, err := s.sem.DeleteUser(ctx, userID)
	if err != nil {
		return nil, err
	}
	counters, records, err := s.state.DeleteUser(ctx, userID)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "forgot user", "user", userID, "memories", ep.Live+sem.Live, "expired", ep.Expired+sem.Expired)
	return &memoryv1.ForgetUserResponse{
		Memories: ep.Live + sem.Live, Expired: ep.Expired + sem.Expired, Counters: counters,
		ExtractionRecords: records, Vectors: ep.Live + ep.Expired + sem.Live + sem.Expired,
	}, nil
}

// recordBehavior counts a behaviour and writes one habit memory once the count passes the
// threshold; the state store's atomic claim makes that one memory even with several replicas.
func (s *Service) recordBehavior(ctx context.Context, req *memoryv1.RecordBehaviorRequest) (*memoryv1.RecordBehaviorResponse, error) {
	if !s.cfg.ImplicitEnabled {
		return &memoryv1.RecordBehaviorResponse{Disabled: true}, nil
	}
	user, key := req.GetUserId(), req.GetKey()
	n, claim, habitID, err := s.state.CountBehavior(ctx, user, key, s.now(), s.cfg.BehaviorWindow, s.cfg.HabitThreshold)
	if err != nil {
		return nil, err
	}
	resp := &memoryv1.RecordBehaviorResponse{Count: n}
	if habitID != "" {
		for _, t := range []memoryv1.Tier{memoryv1.Tier_TIER_SEMANTIC, memoryv1.Tier_TIER_EPISODIC} {
			if e, err := s.tier(t).Get(ctx, user, habitID); err == nil {
				e.Memory.Tier = t
				resp.Habit = e.Memory
				return resp, nil
			}
		}
		// The habit memory was forgotten: release the record so the next count writes it anew.
		if err := s.state.SetHabit(ctx, user, key, ""); err != nil {
			return nil, err
		}
		return resp, nil
	}
	if !claim {
		return resp, nil
	}
	desc := strings.TrimSpace(req.GetDescription())
	if desc == "" {
		desc = fmt.Sprintf("用户的习惯 (user habit): %s", key)
	}
	res, err := s.write(ctx, user, candidate{
		typ: memoryv1.MemoryType_MEMORY_TYPE_HABIT, content: desc, attributes: map[string]string{"behavior": key},
		subject: "habit " + key, confidence: 0.9, source: memoryv1.Source_SOURCE_IMPLICIT,
		tier: memoryv1.Tier_TIER_SEMANTIC, sessionID: req.GetSessionId(), id: derivedID("habit", user, key),
	})
	if err != nil {
		_ = s.state.SetHabit(context.WithoutCancel(ctx), user, key, "")
		return nil, err
	}
	if err := s.state.SetHabit(ctx, user, key, res.memory.GetId()); err != nil {
		return nil, err
	}
	res.memory.Tier = memoryv1.Tier_TIER_SEMANTIC
	resp.Habit = res.memory
	resp.HabitWritten = true
	return resp, nil
}
