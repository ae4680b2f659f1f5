package memory

import (
	"container/heap"
	"math"
	"slices"
	"sync"
	"time"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// vectorIndex is the embedded backend's in-process vector index. Search is exact — every
// memory that can score above the threshold is scored, so nothing is lost to an approximation
// — and kept per user, because every query is scoped to one user.
//
// Sparse vectors (the lexical embedder's: a few dozen non-zero buckets out of thousands) are
// also kept in an inverted index, bucket → (slot, value) postings. Between unit vectors the
// cosine is the sum over the buckets both have, so a query with a positive threshold only
// needs the postings of its own buckets: with 100k memories that is tens of thousands of
// additions instead of millions. Dense vectors (a model embedder's), and queries with a
// threshold of zero or below (every memory qualifies then), are scored by a full scan.
// The records themselves stay in bbolt; the index holds only what filtering and scoring need.
type vectorIndex struct {
	dim int

	mu    sync.RWMutex
	users map[string]*userIndex

	scratch sync.Pool // *searchScratch
}

type userIndex struct {
	pos   map[string]int32 // id → slot
	slots []indexEntry     // a deleted slot has id "" and is on free
	free  []int32
	dense int // slots holding a dense vector
	post  map[uint16][]posting
}

type posting struct {
	slot int32
	val  float32
}

// indexEntry is one memory's filter fields and vector.
type indexEntry struct {
	id        string
	typ       memoryv1.MemoryType
	expired   bool
	updated   int64 // unix ms
	expiresAt int64 // unix ms, 0 = no TTL
	subject   string
	attrKeys  []string
	// Sparse form: idx/val; dense form: idx nil, val of length dim.
	idx []uint16
	val []float32
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
		subject:  m.GetSubject(),
		attrKeys: attrKeys(m),
	}
	if m.GetExpiresAt() != nil {
		e.expiresAt = m.GetExpiresAt().AsTime().UnixMilli()
	}
	nnz := 0
	for _, f := range vec {
		if f != 0 {
			nnz++
		}
	}
	if storedSparse(nnz, len(vec)) {
		e.idx = make([]uint16, 0, nnz)
		e.val = make([]float32, 0, nnz)
		for i, f := range vec {
			if f != 0 {
				e.idx = append(e.idx, uint16(i))
				e.val = append(e.val, f)
			}
		}
	} else {
		e.val = slices.Clone(vec)
	}
	return e
}

func (u *userIndex) unpost(slot int32) {
	e := &u.slots[slot]
	if e.idx == nil {
		u.dense--
		return
	}
	for _, k := range e.idx {
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
	if e.idx == nil {
		u.dense++
		return
	}
	for j, k := range e.idx {
		u.post[k] = append(u.post[k], posting{slot, e.val[j]})
	}
}

// storedSparse says whether a vector of n components, nnz of them non-zero, is kept as
// index/value pairs: sparse storage costs 6 bytes per non-zero against 4 per component, so
// below 2/3 density, and its indexes are uint16.
func storedSparse(nnz, n int) bool {
	return n <= 1<<16 && nnz*6 < n*4
}

func (x *vectorIndex) put(userID string, m *memoryv1.Memory, vec []float32) {
	e := makeIndexEntry(m, vec)
	x.mu.Lock()
	defer x.mu.Unlock()
	u := x.users[userID]
	if u == nil {
		u = &userIndex{pos: map[string]int32{}, post: map[uint16][]posting{}}
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

// scored is an id with its similarity.
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

// searchScratch are the per-query accumulators of the inverted path, reused across queries.
type searchScratch struct {
	acc     []float32
	mark    []uint32
	gen     uint32
	touched []int32
}

// filter holds a query's filters in the form the scan checks fastest.
type filter struct {
	nowMs, after int64
	typeMask     uint32
	keys         []string
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
	return len(f.keys) == 0 || hasAnyKey(e.attrKeys, f.keys)
}

// search returns the best q.Limit live entries of the user that pass the filters and score at
// or above q.MinSimilarity, best first.
func (x *vectorIndex) search(userID string, q SearchQuery, now time.Time) []scored {
	if q.Limit <= 0 || len(q.Vector) != x.dim {
		return nil
	}
	f := filter{nowMs: now.UnixMilli(), keys: q.AttributeKeys}
	if !q.UpdatedAfter.IsZero() {
		f.after = q.UpdatedAfter.UnixMilli()
	}
	for _, t := range q.Types {
		f.typeMask |= 1 << uint(t)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	u := x.users[userID]
	if u == nil {
		return nil
	}
	h := make(minHeap, 0, q.Limit+1)
	offer := func(id string, sim float64) {
		if sim < q.MinSimilarity {
			return
		}
		if len(h) < q.Limit {
			heap.Push(&h, scored{id, sim})
		} else if sim > h[0].sim {
			h[0] = scored{id, sim}
			heap.Fix(&h, 0)
		}
	}
	if q.MinSimilarity > 0 && u.dense == 0 {
		x.searchInverted(u, q, &f, offer)
	} else {
		qv := q.Vector
		for i := range u.slots {
			e := &u.slots[i]
			if !f.pass(e) {
				continue
			}
			var dot float32
			if e.idx != nil {
				for j, k := range e.idx {
					dot += qv[k] * e.val[j]
				}
			} else {
				dot = dotDense(qv, e.val)
			}
			offer(e.id, float64(dot))
		}
	}
	out := make([]scored, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(scored)
	}
	return out
}

func (x *vectorIndex) searchInverted(u *userIndex, q SearchQuery, f *filter, offer func(string, float64)) {
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
	for k, qv := range q.Vector {
		if qv == 0 {
			continue
		}
		for _, p := range u.post[uint16(k)] {
			if s.mark[p.slot] != s.gen {
				s.mark[p.slot] = s.gen
				s.acc[p.slot] = 0
				s.touched = append(s.touched, p.slot)
			}
			s.acc[p.slot] += qv * p.val
		}
	}
	for _, slot := range s.touched {
		if sim := float64(s.acc[slot]); sim >= q.MinSimilarity {
			if e := &u.slots[slot]; f.pass(e) {
				offer(e.id, sim)
			}
		}
	}
}

// docFreq returns how many entries the user has and, per dimension, how many of them have a
// non-zero component there: the length of its postings, plus the dense vectors that do.
func (x *vectorIndex) docFreq(userID string, dims []int) (int, []int) {
	df := make([]int, len(dims))
	x.mu.RLock()
	defer x.mu.RUnlock()
	u := x.users[userID]
	if u == nil {
		return 0, df
	}
	for i, k := range dims {
		if k >= 0 && k < x.dim && k <= math.MaxUint16 {
			df[i] = len(u.post[uint16(k)])
		}
	}
	if u.dense > 0 {
		for s := range u.slots {
			e := &u.slots[s]
			if e.id == "" || e.idx != nil {
				continue
			}
			for i, k := range dims {
				if k >= 0 && k < len(e.val) && e.val[k] != 0 {
					df[i]++
				}
			}
		}
	}
	return len(u.pos), df
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
