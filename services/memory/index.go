package memory

import (
	"container/heap"
	"slices"
	"sync"
	"time"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// vectorIndex is the embedded backend's in-process vector index: exact search (every live
// memory of the user is scored, so there is no recall loss to an approximation), kept per user
// because every query is scoped to one user. Vectors are unit length; a sparse vector (the
// lexical embedder's, with a few dozen non-zero buckets) is stored as index/value pairs and
// scored against the dense query in O(non-zeros), a dense one (a model embedder's) as is. The
// records themselves stay in bbolt; the index holds only what filtering needs.
type vectorIndex struct {
	dim int

	mu    sync.RWMutex
	users map[string]*userIndex
}

type userIndex struct {
	pos     map[string]int
	entries []indexEntry
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
	// Sparse storage costs 6 bytes per non-zero against 4 per bucket: use it below 2/3 density.
	if len(vec) <= 1<<16 && nnz*6 < len(vec)*4 {
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

func (x *vectorIndex) put(userID string, m *memoryv1.Memory, vec []float32) {
	e := makeIndexEntry(m, vec)
	x.mu.Lock()
	defer x.mu.Unlock()
	u := x.users[userID]
	if u == nil {
		u = &userIndex{pos: map[string]int{}}
		x.users[userID] = u
	}
	if i, ok := u.pos[e.id]; ok {
		u.entries[i] = e
		return
	}
	u.pos[e.id] = len(u.entries)
	u.entries = append(u.entries, e)
}

func (x *vectorIndex) remove(userID, id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	u := x.users[userID]
	if u == nil {
		return
	}
	i, ok := u.pos[id]
	if !ok {
		return
	}
	last := len(u.entries) - 1
	if i != last {
		u.entries[i] = u.entries[last]
		u.pos[u.entries[i].id] = i
	}
	u.entries[last] = indexEntry{}
	u.entries = u.entries[:last]
	delete(u.pos, id)
	if len(u.entries) == 0 {
		delete(x.users, userID)
	}
}

func (x *vectorIndex) removeUser(userID string) {
	x.mu.Lock()
	delete(x.users, userID)
	x.mu.Unlock()
}

// touch renews an entry's TTL deadline after a recall.
func (x *vectorIndex) setExpiry(userID, id string, expiresAt int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if u := x.users[userID]; u != nil {
		if i, ok := u.pos[id]; ok {
			u.entries[i].expiresAt = expiresAt
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

// search scores every live entry of the user that passes the filters and returns the best
// q.Limit at or above q.MinSimilarity, best first.
func (x *vectorIndex) search(userID string, q SearchQuery, now time.Time) []scored {
	if q.Limit <= 0 || len(q.Vector) != x.dim {
		return nil
	}
	nowMs := now.UnixMilli()
	var after int64
	if !q.UpdatedAfter.IsZero() {
		after = q.UpdatedAfter.UnixMilli()
	}
	var typeMask uint32
	for _, t := range q.Types {
		typeMask |= 1 << uint(t)
	}
	qv := q.Vector
	x.mu.RLock()
	defer x.mu.RUnlock()
	u := x.users[userID]
	if u == nil {
		return nil
	}
	h := make(minHeap, 0, q.Limit+1)
	for i := range u.entries {
		e := &u.entries[i]
		if e.expired || (e.expiresAt != 0 && e.expiresAt <= nowMs) {
			continue
		}
		if typeMask != 0 && typeMask&(1<<uint(e.typ)) == 0 {
			continue
		}
		if after != 0 && e.updated < after && e.typ != memoryv1.MemoryType_MEMORY_TYPE_FACT {
			continue
		}
		if len(q.AttributeKeys) > 0 && !hasAnyKey(e.attrKeys, q.AttributeKeys) {
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
		sim := float64(dot)
		if sim < q.MinSimilarity {
			continue
		}
		if len(h) < q.Limit {
			heap.Push(&h, scored{e.id, sim})
		} else if sim > h[0].sim {
			h[0] = scored{e.id, sim}
			heap.Fix(&h, 0)
		}
	}
	out := make([]scored, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(scored)
	}
	return out
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
	for i := range u.entries {
		e := &u.entries[i]
		if e.subject == subject && !e.expired && (e.expiresAt == 0 || e.expiresAt > nowMs) {
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
