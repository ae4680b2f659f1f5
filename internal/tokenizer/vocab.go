package tokenizer

import (
	_ "embed"
	"sync"
)

//go:generate go run gen_vocab.go

// The o200k_base vocabulary, held compactly. The library keeps it as a map from token to rank
// built at first use: about 6.5 MB of live heap for the process's life, which the collector's
// heap goal then doubles. Here the tokens stay in the binary's read-only data (paged in from the
// file as touched) and the heap holds an open-addressing table of where each token is, 2 MB.
// Byte-pair encoding only compares ranks, and the tokens are stored in rank order, so a token's
// place in the file stands for its rank: no table of ranks' offsets (0.8 MB more, issue 25,
// stop 36). TestVocabMatchesLibrary checks the file against the library's table.

//go:embed o200k_base.tokens
var o200kTokens string

// vocab finds a byte string's token and orders tokens by rank.
type vocab struct {
	tokens string   // the tokens in rank order, each after its uvarint length
	slots  []uint32 // a token's offset in tokens +1, by hash, linear probing; 0 is empty
	mask   uint32
}

// o200kVocab is built once, at the first o200k_base tokenizer.
var o200kVocab = sync.OnceValue(func() *vocab { return newVocab(o200kTokens) })

func newVocab(tokens string) *vocab {
	v := &vocab{tokens: tokens}
	ranks := 0
	for i := 0; i < len(tokens); ranks++ {
		n, w := v.length(i)
		i += w + n
	}
	size := 1
	for size < ranks+ranks/3 { // load at most 3/4
		size <<= 1
	}
	v.slots, v.mask = make([]uint32, size), uint32(size-1)
	for off := 0; off < len(tokens); {
		tok := v.token(uint32(off))
		n, w := v.length(off)
		if tok != "" {
			i := hash(tok) & v.mask
			for v.slots[i] != 0 {
				i = (i + 1) & v.mask
			}
			v.slots[i] = uint32(off) + 1
		}
		off += w + n
	}
	return v
}

// length reads the uvarint length at tokens[i:]: the token's length and the varint's.
func (v *vocab) length(i int) (n, w int) {
	var x uint64
	for s := uint(0); i+w < len(v.tokens); s += 7 {
		b := v.tokens[i+w]
		w++
		x |= uint64(b&0x7f) << s
		if b < 0x80 {
			break
		}
	}
	return int(x), w
}

// token returns the token whose length is at tokens[off:].
func (v *vocab) token(off uint32) string {
	i := int(off)
	n, w := v.length(i)
	return v.tokens[i+w : i+w+n]
}

// rank returns where s is in tokens, which orders tokens as their ranks do (not the rank
// itself), or false when s is not a token.
func (v *vocab) rank(s string) (uint32, bool) {
	for i := hash(s) & v.mask; ; i = (i + 1) & v.mask {
		r := v.slots[i]
		if r == 0 {
			return 0, false
		}
		if v.token(r-1) == s {
			return r - 1, true
		}
	}
}

// hash is 32-bit FNV-1a.
func hash(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// noRank marks a part that does not merge with the next.
const noRank = ^uint32(0)

// count is the number of tokens byte-pair encoding makes of one pre-token, as tiktoken counts
// it: the whole pre-token when it is a token, else its bytes merged pair by pair, always the
// leftmost pair of the lowest rank first, until no adjacent pair is a token. buf is scratch
// space for the part boundaries.
func (v *vocab) count(piece string, buf []bpePart) int {
	if len(piece) <= 1 {
		return len(piece)
	}
	if _, ok := v.rank(piece); ok {
		return 1
	}
	parts := buf[:0]
	for i := range len(piece) + 1 {
		parts = append(parts, bpePart{offset: uint32(i), rank: noRank})
	}
	pairRank := func(i, skip int) uint32 {
		if i+skip+2 < len(parts) {
			if r, ok := v.rank(piece[parts[i].offset:parts[i+skip+2].offset]); ok {
				return r
			}
		}
		return noRank
	}
	for i := 0; i < len(parts)-2; i++ {
		parts[i].rank = pairRank(i, 0)
	}
	for len(parts) > 1 {
		minRank, minIndex := noRank, 0
		for i, p := range parts[:len(parts)-1] {
			if p.rank < minRank {
				minRank, minIndex = p.rank, i
			}
		}
		if minRank == noRank {
			break
		}
		parts[minIndex].rank = pairRank(minIndex, 1)
		if minIndex > 0 {
			parts[minIndex-1].rank = pairRank(minIndex-1, 1)
		}
		parts = append(parts[:minIndex+1], parts[minIndex+2:]...)
	}
	return len(parts) - 1
}

// countLong is count for long pieces, in time n log n rather than quadratic: the same merges,
// the lowest rank's leftmost pair taken from a heap of (rank, start) instead of a scan. Parts
// are a list of starts; an entry whose part has since merged or changed its rank is skipped.
func (v *vocab) countLong(piece string) int {
	if _, ok := v.rank(piece); ok || len(piece) <= 1 {
		return min(len(piece), 1)
	}
	n := int32(len(piece))
	next, prev, rank := make([]int32, n), make([]int32, n), make([]uint32, n)
	pairRank := func(i int32) uint32 {
		j := next[i]
		if j >= n {
			return noRank
		}
		if r, ok := v.rank(piece[i:next[j]]); ok {
			return r
		}
		return noRank
	}
	for i := range n {
		next[i], prev[i] = i+1, i-1
	}
	var h pairHeap
	for i := range n {
		rank[i] = pairRank(i)
		h.push(rank[i], i)
	}
	parts := int(n)
	for len(h) > 0 {
		r, i := h.pop()
		if rank[i] != r {
			continue // merged away, or its pair changed
		}
		j := next[i]
		next[i] = next[j]
		if next[j] < n {
			prev[next[j]] = i
		}
		rank[j] = noRank // no longer a part
		parts--
		rank[i] = pairRank(i)
		h.push(rank[i], i)
		if p := prev[i]; p >= 0 {
			rank[p] = pairRank(p)
			h.push(rank[p], p)
		}
	}
	return parts
}

// pairHeap is a min-heap of pairs by rank, then start: the leftmost of the lowest rank first.
type pairHeap []uint64

func (h *pairHeap) push(rank uint32, start int32) {
	if rank == noRank {
		return
	}
	*h = append(*h, uint64(rank)<<32|uint64(uint32(start)))
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *pairHeap) pop() (uint32, int32) {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(s) && s[l] < s[m] {
			m = l
		}
		if l+1 < len(s) && s[l+1] < s[m] {
			m = l + 1
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return uint32(top >> 32), int32(uint32(top))
}

// bpePart is a part's start and the rank of it merged with the next part.
type bpePart struct {
	offset, rank uint32
}
