package memory

import (
	"context"
	"hash/fnv"
	"math"
	"slices"
	"sort"

	"github.com/hermes-agent/hermes/internal/textseg"
)

// Lexical retrieval is BM25 over the memories' terms, the same on every backend: a memory's
// text (embedText) becomes a sparse vector of BM25 term weights, a query a sparse vector of its
// distinct terms, and the score of a memory is Σ query weight × IDF × memory weight over the
// terms they share. That is the layout Qdrant scores natively (a sparse vector with the IDF
// modifier), and the embedded index and the Redis tier compute the same sum themselves.
//
// Terms come from internal/textseg: lower-cased, NFKC-folded words (English stop words
// dropped, lightly stemmed) and CJK character pairs and single characters (particles and
// pronouns dropped). Each term is identified by a 32-bit hash of its text (Qdrant's sparse
// indices are 32-bit): statistics are kept per term, not per bucket of a small hash space.
// A query term no memory has adds nothing to any score, so unknown names or dates in a question
// do not lower the scores of the memories that match its other words.

// BM25 parameters. The length normalisation uses a fixed average length, as a sparse vector
// stored in Qdrant must carry its weight without corpus statistics; memories are one sentence,
// about this many weighted terms.
const (
	bm25K1     = 1.2
	bm25B      = 0.5
	bm25AvgLen = 14.0
)

// Term weights by kind: a CJK pair or a word carries meaning; a single CJK character only
// hints at it (it lets one-character words such as 茶 or 猫 match).
const (
	wWord       = 1.0
	wCJKBigram  = 1.0
	wCJKUnigram = 0.3
)

// sparseVec is a sparse vector, indices ascending.
type sparseVec struct {
	idx []uint32
	val []float32
}

func (v sparseVec) empty() bool { return len(v.idx) == 0 }

// lexTermID is the sparse index of a term.
func lexTermID(term string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(term))
	return h.Sum32()
}

// lexOptions segment memory and query text.
var lexOptions = textseg.Options{Fold: true, Stop: englishStop, Stem: true, CJKUnigrams: true}

// lexTerms calls emit for each term of text with its kind's weight.
func lexTerms(text string, emit func(term string, w float64)) {
	textseg.Segment(text, lexOptions, func(t textseg.Term) {
		switch t.Kind {
		case textseg.Word:
			emit(t.Text, wWord)
		case textseg.CJKUnigram:
			if !cjkStop[t.Text] {
				emit(t.Text, wCJKUnigram)
			}
		case textseg.CJKBigram:
			// A pair with a particle or pronoun in it ("的那", "我订") spans a word boundary more
			// often than it forms a word.
			r := []rune(t.Text)
			if !cjkBoundary[r[0]] && !cjkBoundary[r[1]] && !cjkStop[t.Text] {
				emit(t.Text, wCJKBigram)
			}
		}
	})
}

// lexDoc is a memory text's sparse vector: per term, BM25's saturating term frequency with
// length normalisation, times the kind weight.
func lexDoc(text string) sparseVec {
	tf := map[uint32]float64{}
	kw := map[uint32]float64{}
	var length float64
	lexTerms(text, func(term string, w float64) {
		id := lexTermID(term)
		tf[id]++
		kw[id] = w
		length += w
	})
	norm := bm25K1 * (1 - bm25B + bm25B*length/bm25AvgLen)
	return sparseOf(tf, func(id uint32, f float64) float32 { return float32(kw[id] * f * (bm25K1 + 1) / (f + norm)) })
}

// sparseOf is the sparse vector of the ids of m, ascending, each valued by val.
func sparseOf(m map[uint32]float64, val func(id uint32, v float64) float32) sparseVec {
	v := sparseVec{idx: make([]uint32, 0, len(m))}
	for id := range m {
		v.idx = append(v.idx, id)
	}
	slices.Sort(v.idx)
	v.val = make([]float32, len(v.idx))
	for i, id := range v.idx {
		v.val[i] = val(id, m[id])
	}
	return v
}

// lexQuery is a query's sparse vector: each distinct term once, with its kind's weight.
func lexQuery(text string) sparseVec {
	w := map[uint32]float64{}
	lexTerms(text, func(term string, kw float64) { w[lexTermID(term)] = kw })
	return sparseOf(w, func(_ uint32, v float64) float32 { return float32(v) })
}

// bm25IDF is the inverse document frequency of a term in df of n memories, in the form Qdrant's
// IDF modifier uses: ln(1 + (n − df + 0.5) / (df + 0.5)), positive for every df ≤ n.
func bm25IDF(n, df int) float32 {
	return float32(math.Log(1 + (float64(n)-float64(df)+0.5)/(float64(df)+0.5)))
}

// lexicalFloor is the threshold a lexical search applies among n memories: min, but never
// more than 0.85 × the IDF of a term only one of them has (at a memory's usual length), so a
// user with a handful of memories, whose words all weigh little, still gets the ones that share
// a word no other memory has. An attribute lookup's threshold (0) stays 0.
func lexicalFloor(min float64, n int) float64 {
	if min <= 0 {
		return min
	}
	return math.Min(min, 0.85*float64(bm25IDF(n, 1)))
}

// sparseDot is Σ q·idf·d over the indices both vectors have.
func sparseDot(q sparseVec, idf []float32, d sparseVec) float32 {
	var s float32
	i, j := 0, 0
	for i < len(q.idx) && j < len(d.idx) {
		switch {
		case q.idx[i] < d.idx[j]:
			i++
		case q.idx[i] > d.idx[j]:
			j++
		default:
			s += q.val[i] * idf[i] * d.val[j]
			i++
			j++
		}
	}
	return s
}

// rrfK is the constant of reciprocal rank fusion, sent to Qdrant explicitly so that both
// backends fuse alike.
const rrfK = 60

// rrfFuse fuses ranked lists (best first) as Qdrant's RRF does: a memory scores Σ 1/(k + its
// position), positions counted from 0, over the lists it is in.
func rrfFuse(lists ...[]scored) []scored {
	sum := map[string]float64{}
	var order []string
	for _, l := range lists {
		for pos, s := range l {
			if _, ok := sum[s.id]; !ok {
				order = append(order, s.id)
			}
			sum[s.id] += 1 / float64(rrfK+pos)
		}
	}
	out := make([]scored, len(order))
	for i, id := range order {
		out[i] = scored{id: id, sim: sum[id]}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].sim > out[j].sim })
	return out
}

// contentSimilarity is the cosine of two texts' term-frequency vectors (kind weights, no IDF):
// how much of the wording they share, for near-duplicate checks.
func contentSimilarity(a, b string) float64 {
	count := func(s string) map[string]float64 {
		m := map[string]float64{}
		lexTerms(s, func(t string, w float64) { m[t] += w })
		return m
	}
	ca, cb := count(a), count(b)
	var dot, na, nb float64
	for t, x := range ca {
		na += x * x
		dot += x * cb[t]
	}
	for _, y := range cb {
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// LexicalEmbedder stands for "no embedding model": memories are found by BM25 alone. Its
// vectors are empty; the stores compute each memory's lexical vector from its text.
type LexicalEmbedder struct{}

// NewLexicalEmbedder returns the lexical-only embedder. The dimension argument is ignored (it
// sized the hashed vectors of an earlier version).
func NewLexicalEmbedder(int) *LexicalEmbedder { return &LexicalEmbedder{} }

// Name implements Embedder.
func (*LexicalEmbedder) Name() string { return "lexical-bm25" }

// Dimension implements Embedder: no dense vectors.
func (*LexicalEmbedder) Dimension() int { return 0 }

// Lexical implements Embedder.
func (*LexicalEmbedder) Lexical() bool { return true }

// Embed implements Embedder with empty vectors.
func (*LexicalEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	return make([][]float32, len(texts)), nil
}

// cjkStop are characters and pairs that occur in almost every sentence (particles, pronouns,
// question words, and "用户", which every extracted memory starts with).
var cjkStop = map[string]bool{
	"的": true, "了": true, "是": true, "我": true, "你": true, "他": true, "她": true, "它": true,
	"们": true, "在": true, "和": true, "与": true, "也": true, "就": true, "都": true, "吗": true,
	"呢": true, "吧": true, "啊": true, "把": true, "被": true, "给": true, "让": true, "这": true,
	"那": true, "个": true, "一": true, "些": true, "有": true, "要": true, "会": true, "很": true,
	"用户": true, "用": true, "户": true, "我的": true, "一下": true, "帮我": true, "请": true, "下": true,
	"上": true, "不": true, "没": true, "什么": true, "怎么": true, "么": true, "哪": true, "吗？": true,
	"还": true, "又": true, "到": true, "说": true, "过": true, "着": true, "得": true, "地": true,
	"之": true, "其": true, "已": true, "可": true, "以": true, "对": true, "为": true, "从": true,
	"么样": true, "怎样": true, "样": true,
}

// cjkBoundary are particles and pronouns that almost never start or end a word; a pair with one
// of them is dropped. (Characters like 上, 下, 不 and 有 are stop words alone but begin words —
// 上海, 下午, 不吃 — so they are not here.)
var cjkBoundary = map[rune]bool{
	'的': true, '了': true, '是': true, '我': true, '你': true, '他': true, '她': true, '它': true,
	'们': true, '吗': true, '呢': true, '吧': true, '啊': true, '把': true, '被': true, '给': true,
	'这': true, '那': true, '个': true, '些': true, '很': true, '请': true, '在': true, '和': true,
}

// englishStop are function words, question words and pleasantries: what a query and a memory
// share when they share nothing of substance.
var englishStop = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range []string{
		"a", "an", "the", "and", "or", "but", "if", "of", "to", "in", "on", "at", "for", "with", "by", "from", "as",
		"into", "onto", "about", "over", "under", "than", "then", "so", "too", "very", "just", "also", "only",
		"is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "done", "doing", "have",
		"has", "had", "having", "will", "would", "shall", "should", "can", "could", "may", "might", "must",
		"i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "you", "your", "yours", "he", "him", "his",
		"she", "her", "hers", "it", "its", "they", "them", "their", "theirs", "this", "that", "these", "those",
		"there", "here", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "all", "any",
		"some", "each", "every", "no", "not", "nor", "s", "t", "d", "ll", "m", "re", "ve", "don", "didn", "doesn",
		"isn", "aren", "wasn", "weren", "won", "can't", "user", "users", "please", "thanks", "thank", "hi",
		"hello", "hey", "ok", "okay", "yes", "yeah", "oh", "well", "really", "again", "other", "such", "own",
		"same", "both", "more", "most", "up", "down", "out", "off", "let", "get", "got", "go", "going", "know",
		"like", "one", "tell", "said", "say",
	} {
		m[w] = true
	}
	return m
}()
