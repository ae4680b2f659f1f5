package memory

import (
	"container/heap"
	"slices"
	"sync"
	"time"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// vectorIndex is the embedded backend's in-process index of one tier: per user, each memory's
// filter fields, its lexical vector in an inverted index (term → memories with their BM25
// weight), and its dense vector when a model embedder is configured. Search is exact: the
// lexical score of a memory is the sum over the query's terms, the dense one a full scan.
// Document frequencies are the lengths of the postings, exact per term and per user (recall
// adds up both tiers' counts, see BoltTier.Search). The records themselves stay in bbolt; the
// index holds only what filtering and scoring need.
type vectorIndex struct {
	dim int

	mu    sync.RWMutex // guards users and everything under it
	users map[string]*userIndex

	scratch sync.Pool // *searchScratch
}

type userIndex struct {
	pos   map[string]int32 // id → slot
	slots []indexEntry     // a deleted slot has id "" and is on free
	free  []int32
	post  map[uint32][]posting
}

type posting struct {
	slot int32
	val  float32
}

// indexEntry is one memory's filter fields and vectors.
type indexEntry struct {
	id        string
	typ       memoryv1.MemoryType
	expired   bool
	updated   int64 // unix ms
	occurred  int64 // unix ms
	expiresAt int64 // unix ms, 0 = no TTL
	subject   string
	attrKeys  []string
	lex       sparseVec
	dense     []float32 // nil without a model embedder
	hasDense  bool
}

func newVectorIndex(dim int) *vectorIndex {
	return &vectorIndex{dim: dim, users: map[string]*userIndex{}}
}

func makeIndexEntry(m *memoryv1.Memory, vec []float32) indexEntry {
	e := indexEntry{
		id:       m.GetId(),
		typ:      m.GetType(),
		expired:  !live(m),
		updated:  m.GetUpdatedAt().AsTime().UnixMilli(),
		occurred: occurredAt(m).UnixMilli(),
		subject:  m.GetSubject(),
		attrKeys: attrKeys(m),
		lex:      lexDoc(embedText(m)),
	}
	if m.GetExpiresAt() != nil {
		e.expiresAt = m.GetExpiresAt().AsTime().UnixMilli()
	}
	if len(vec) > 0 {
		e.dense = slices.Clone(vec)
		e.hasDense = true
	}
	return e
}

func (u *userIndex) unpost(slot int32) {
	e := &u.slots[slot]
	for _, k := range e.lex.idx {
		list := u.post[k]
		for i, p := range list {
			if p.slot == slot {
				list[i] = list[len(list)-1]
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(u.post, k)
		} else {
			u.post[k] = list
		}
	}
}

func (u *userIndex) postSlot(slot int32) {
	e := &u.slots[slot]
	for j, k := range e.lex.idx {
		u.post[k] = append(u.post[k], posting{slot, e.lex.val[j]})
	}
}

func (x *vectorIndex) put(userID string, m *memoryv1.Memory, vec []float32) {
	e := makeIndexEntry(m, vec)
	x.mu.Lock()
	defer x.mu.Unlock()
	u := x.users[userID]
	if u == nil {
		u = &userIndex{pos: map[string]int32{}, post: map[uint32][]posting{}}
		x.users[userID] = u
	}
	if slot, ok := u.pos[e.id]; ok {
		u.unpost(slot)
		u.slots[slot] = e
		u.postSlot(slot)
		return
	}
	var slot int32
	if n := len(u.free); n > 0 {
		slot = u.free[n-1]
		u.free = u.free[:n-1]
		u.slots[slot] = e
	} else {
		slot = int32(len(u.slots))
		u.slots = append(u.slots, e)
	}
	u.pos[e.id] = slot
	u.postSlot(slot)
}

func (x *vectorIndex) remove(userID, id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	u := x.users[userID]
	if u == nil {
		return
	}
	slot, ok := u.pos[id]
	if !ok {
		return
	}
	u.unpost(slot)
	u.slots[slot] = indexEntry{}
	u.free = append(u.free, slot)
	delete(u.pos, id)
	if len(u.pos) == 0 {
		delete(x.users, userID)
	}
}

func (x *vectorIndex) removeUser(userID string) {
	x.mu.Lock()
	delete(x.users, userID)
	x.mu.Unlock()
}

// setExpiry renews an entry's TTL deadline after a recall.
func (x *vectorIndex) setExpiry(userID, id string, expiresAt int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if u := x.users[userID]; u != nil {
		if slot, ok := u.pos[id]; ok {
			u.slots[slot].expiresAt = expiresAt
		}
	}
}

// docFreq returns how many memories of the user the index holds and, per term, how many of
// them have it.
func (x *vectorIndex) docFreq(userID string, terms []uint32) (int, []int) {
	df := make([]int, len(terms))
	x.mu.RLock()
	defer x.mu.RUnlock()
	u := x.users[userID]
	if u == nil {
		return 0, df
	}
	for i, k := range terms {
		df[i] = len(u.post[k])
	}
	return len(u.pos), df
}

// scored is an id with its score.
type scored struct {
	id  string
	sim float64
}

type minHeap []scored

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].sim < h[j].sim }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(v any)        { *h = append(*h, v.(scored)) }
func (h *minHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

// topK keeps the best k offered scores.
type topK struct {
	k int
	h minHeap
}

func (t *topK) offer(id string, sim float64) {
	if len(t.h) < t.k {
		heap.Push(&t.h, scored{id, sim})
	} else if t.k > 0 && sim > t.h[0].sim {
		t.h[0] = scored{id, sim}
		heap.Fix(&t.h, 0)
	}
}

// best returns the kept scores, best first.
func (t *topK) best() []scored {
	out := make([]scored, len(t.h))
	for i := len(t.h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&t.h).(scored)
	}
	return out
}

// searchScratch are the per-query accumulators of the inverted path, reused across queries.
type searchScratch struct {
	acc     []float32
	mark    []uint32
	gen     uint32
	touched []int32
}

// filter holds a query's filters in the form the scan checks fastest.
type filter struct {
	nowMs, after        int64
	occAfter, occBefore int64
	typeMask            uint32
	keys                []string
}

func newFilter(q SearchQuery, now time.Time) filter {
	f := filter{nowMs: now.UnixMilli(), keys: q.AttributeKeys}
	if !q.UpdatedAfter.IsZero() {
		f.after = q.UpdatedAfter.UnixMilli()
	}
	if !q.OccurredAfter.IsZero() {
		f.occAfter = q.OccurredAfter.UnixMilli()
	}
	if !q.OccurredBefore.IsZero() {
		f.occBefore = q.OccurredBefore.UnixMilli()
	}
	for _, t := range q.Types {
		f.typeMask |= 1 << uint(t)
	}
	return f
}

func (f *filter) pass(e *indexEntry) bool {
	if e.id == "" || e.expired || (e.expiresAt != 0 && e.expiresAt <= f.nowMs) {
		return false
	}
	if f.typeMask != 0 && f.typeMask&(1<<uint(e.typ)) == 0 {
		return false
	}
	if f.after != 0 && e.updated < f.after && e.typ != memoryv1.MemoryType_MEMORY_TYPE_FACT {
		return false
	}
	if (f.occAfter != 0 && e.occurred < f.occAfter) || (f.occBefore != 0 && e.occurred >= f.occBefore) {
		return false
	}
	return len(f.keys) == 0 || hasAnyKey(e.attrKeys, f.keys)
}

// search returns the user's live entries that pass q's filters, best first (see SearchQuery for
// how the lexical and dense lists are thresholded and fused). idf holds the IDF of each of the
// lexical query's terms.
func (x *vectorIndex) search(userID string, q SearchQuery, idf []float32, now time.Time) []scored {
	if q.Limit <= 0 {
		return nil
	}
	f := newFilter(q, now)
	x.mu.RLock()
	defer x.mu.RUnlock()
	u := x.users[userID]
	if u == nil {
		return nil
	}
	var lists [][]scored
	if !q.Lexical.empty() {
		t := &topK{k: q.Limit}
		if len(q.AttributeKeys) > 0 && q.MinLexical <= 0 {
			// An attribute lookup: every memory carrying the key, matching words or not.
			for i := range u.slots {
				if e := &u.slots[i]; f.pass(e) {
					t.offer(e.id, float64(sparseDot(q.Lexical, idf, e.lex)))
				}
			}
		} else {
			x.searchInverted(u, q, idf, &f, t.offer)
		}
		lists = append(lists, t.best())
	}
	if len(q.Vector) > 0 && len(q.Vector) == x.dim {
		t := &topK{k: q.Limit}
		for i := range u.slots {
			e := &u.slots[i]
			if !e.hasDense || !f.pass(e) {
				continue
			}
			if sim := float64(dotDense(q.Vector, e.dense)); sim >= q.MinSimilarity {
				t.offer(e.id, sim)
			}
		}
		lists = append(lists, t.best())
	}
	switch len(lists) {
	case 0:
		return nil
	case 1:
		return lists[0]
	}
	fused := rrfFuse(lists...)
	return fused[:min(len(fused), q.Limit)]
}

func (x *vectorIndex) searchInverted(u *userIndex, q SearchQuery, idf []float32, f *filter, offer func(string, float64)) {
	s, _ := x.scratch.Get().(*searchScratch)
	if s == nil {
		s = &searchScratch{}
	}
	defer x.scratch.Put(s)
	n := len(u.slots)
	if cap(s.acc) < n {
		s.acc = make([]float32, n, n+n/4)
		s.mark = make([]uint32, n, n+n/4)
	}
	s.acc, s.mark = s.acc[:n], s.mark[:n]
	s.gen++
	if s.gen == 0 { // wrapped: old marks could collide
		clear(s.mark)
		s.gen = 1
	}
	s.touched = s.touched[:0]
	for i, k := range q.Lexical.idx {
		w := q.Lexical.val[i] * idf[i]
		for _, p := range u.post[k] {
			if s.mark[p.slot] != s.gen {
				s.mark[p.slot] = s.gen
				s.acc[p.slot] = 0
				s.touched = append(s.touched, p.slot)
			}
			s.acc[p.slot] += w * p.val
		}
	}
	for _, slot := range s.touched {
		if sim := float64(s.acc[slot]); sim >= q.MinLexical && sim > 0 {
			if e := &u.slots[slot]; f.pass(e) {
				offer(e.id, sim)
			}
		}
	}
}

// bySubject returns the ids of the user's live entries of a subject.
func (x *vectorIndex) bySubject(userID, subject string, now time.Time) []string {
	nowMs := now.UnixMilli()
	x.mu.RLock()
	defer x.mu.RUnlock()
	u := x.users[userID]
	if u == nil {
		return nil
	}
	var out []string
	for i := range u.slots {
		e := &u.slots[i]
		if e.id != "" && e.subject == subject && !e.expired && (e.expiresAt == 0 || e.expiresAt > nowMs) {
			out = append(out, e.id)
		}
	}
	return out
}

func hasAnyKey(have, want []string) bool {
	for _, w := range want {
		if slices.Contains(have, w) {
			return true
		}
	}
	return false
}

// dotDense is unrolled by four: the compiler keeps four independent sums in registers, which is
// about twice as fast as the plain loop on long vectors.
func dotDense(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}
