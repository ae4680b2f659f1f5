package memory

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// LexicalEmbedder is the embedded default: a hashing embedder over character n-grams. It is
// lexical — two texts are similar when they share characters and words, not when they mean the
// same thing — so it has its own calibrated thresholds (memory.lexical-*). Han, kana and hangul
// runs give character unigrams and bigrams (Chinese has no spaces; most words are two
// characters); other scripts give words (with a light English suffix strip) and their character
// trigrams, which tolerate inflection and typos. Features are hashed with a sign bit into
// Dimension buckets (so collisions cancel out on average) with a sublinear term frequency, and
// the vector is L2-normalised.
type LexicalEmbedder struct {
	dim int
}

// NewLexicalEmbedder returns a lexical hashing embedder with dim buckets (at least 64).
func NewLexicalEmbedder(dim int) *LexicalEmbedder {
	if dim < 64 {
		dim = 64
	}
	return &LexicalEmbedder{dim: dim}
}

// Name implements Embedder.
func (e *LexicalEmbedder) Name() string { return fmt.Sprintf("lexical-hash-%d", e.dim) }

// Dimension implements Embedder.
func (e *LexicalEmbedder) Dimension() int { return e.dim }

// Lexical implements Embedder.
func (e *LexicalEmbedder) Lexical() bool { return true }

// Embed implements Embedder.
func (e *LexicalEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = e.vector(t)
	}
	return out, nil
}

// Feature weights: CJK bigrams and whole words carry meaning, single CJK characters and
// trigrams only hint at it.
const (
	wCJKBigram  = 1.0
	wCJKUnigram = 0.35
	wWord       = 1.0
	wTrigram    = 0.25
)

// vector is the stored form. Its term weighting, 1 + ln(summed feature weight), is kept as first
// released so that stored vectors keep their meaning (it makes a feature of weight below 1/e
// seen once count slightly negative); the vectors only find candidates and near duplicates, and
// recall scores the candidates exactly with lexicalProfile's weights.
func (e *LexicalEmbedder) vector(text string) []float32 {
	feats := map[string]float64{}
	lexicalFeatures(text, func(f string, w float64) { feats[f] += w })
	v := make([]float32, e.dim)
	for f, w := range feats {
		idx, sign := e.bucket(f)
		// Sublinear term frequency: a word repeated five times is not five times the evidence.
		v[idx] += float32(sign) * float32(1+math.Log(w))
	}
	return normalize(v)
}

// bucket is the vector component a feature is hashed to, with its sign.
func (e *LexicalEmbedder) bucket(f string) (int, float64) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(f))
	x := h.Sum64()
	if x>>63 == 1 {
		return int(x % uint64(e.dim)), -1
	}
	return int(x % uint64(e.dim)), 1
}

// lexicalProfile is a text's features, unhashed, each with its weight — the feature type's
// weight × (1 + ln count) — and the vector component it hashes to, whose document frequency
// stands for the feature's.
type lexicalProfile struct {
	feats map[string]lexFeature
	norm  float64 // Euclidean norm of the weights
}

type lexFeature struct {
	w      float64
	bucket int
}

func (e *LexicalEmbedder) profile(text string) lexicalProfile {
	type acc struct{ n, w float64 }
	counts := map[string]acc{}
	lexicalFeatures(text, func(f string, w float64) {
		a := counts[f]
		counts[f] = acc{a.n + 1, w}
	})
	p := lexicalProfile{feats: make(map[string]lexFeature, len(counts))}
	var sq float64
	for f, a := range counts {
		w := a.w * (1 + math.Log(a.n))
		idx, _ := e.bucket(f)
		p.feats[f] = lexFeature{w: w, bucket: idx}
		sq += w * w
	}
	p.norm = math.Sqrt(sq)
	return p
}

// lexicalIDF weighs a feature by how few of the user's memories have it (BM25's inverse
// document frequency over n memories). A feature none of them has counts as one seen once:
// an unknown word is not more telling than a rare one, and with a handful of memories every
// feature weighs the same, which is plain cosine similarity.
func lexicalIDF(n, df int) float64 {
	d := float64(max(df, 1))
	return math.Log(1 + max(float64(n)-d+0.5, 0.5)/(d+0.5))
}

// lexicalQuery is a query's profile with the IDF weights of the user's memories.
type lexicalQuery struct {
	p         lexicalProfile
	idf2      map[string]float64 // feature → IDF²
	idf2ByDim map[int]float64    // vector component → IDF² of the features hashed there
	norm      float64            // norm of weight × IDF²
}

// weighted is the query's vector with each component multiplied by its IDF², unit length: the
// candidate search ranks by the same weighting as lexicalSimilarity.
func (q lexicalQuery) weighted(vec []float32) []float32 {
	out := make([]float32, len(vec))
	for k, w := range q.idf2ByDim {
		if k < len(vec) {
			out[k] = vec[k] * float32(w)
		}
	}
	return normalize(out)
}

// lexicalSimilarity is the cosine between the query's IDF²-weighted features and a memory's
// features. Weighting only the query by IDF² gives the same ranking as IDF on both sides
// while a memory's own weights stay fixed, so its stored vector needs no corpus statistics.
// It is in [0, 1]: weights are positive.
func lexicalSimilarity(q lexicalQuery, d lexicalProfile) float64 {
	if q.norm == 0 || d.norm == 0 {
		return 0
	}
	var dot float64
	for f, qf := range q.p.feats {
		if df, ok := d.feats[f]; ok {
			dot += qf.w * q.idf2[f] * df.w
		}
	}
	return dot / (q.norm * d.norm)
}

// lexicalFeatures calls emit for every feature of text with its weight.
func lexicalFeatures(text string, emit func(string, float64)) {
	text = normalizeText(text)
	var run []rune
	inCJK := false
	flush := func() {
		if len(run) == 0 {
			return
		}
		if inCJK {
			cjkFeatures(run, emit)
		} else {
			wordFeatures(string(run), emit)
		}
		run = run[:0]
	}
	for _, r := range text {
		switch {
		case isCJK(r):
			if !inCJK {
				flush()
				inCJK = true
			}
			run = append(run, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if inCJK {
				flush()
				inCJK = false
			}
			run = append(run, r)
		default:
			flush()
		}
	}
	flush()
}

func isCJK(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)
}

// cjkStop are characters and pairs that occur in almost every sentence (particles, pronouns,
// and "用户", which every extracted memory starts with) and so say nothing about relevance.
var cjkStop = map[string]bool{
	"的": true, "了": true, "是": true, "我": true, "你": true, "他": true, "她": true, "它": true,
	"们": true, "在": true, "和": true, "与": true, "也": true, "就": true, "都": true, "吗": true,
	"呢": true, "吧": true, "啊": true, "把": true, "被": true, "给": true, "让": true, "这": true,
	"那": true, "个": true, "一": true, "些": true, "有": true, "要": true, "会": true, "很": true,
	"用户": true, "用": true, "户": true, "我的": true, "一下": true, "帮我": true, "请": true, "下": true,
	"上": true, "不": true, "没": true,
}

// cjkBoundary are particles and pronouns that almost never start or end a word; a pair with
// one of them is dropped. (Characters like 上, 下, 不 and 有 are stop words alone but begin
// words — 上海, 下午, 不吃 — so they are not here.)
var cjkBoundary = map[rune]bool{
	'的': true, '了': true, '是': true, '我': true, '你': true, '他': true, '她': true, '它': true,
	'们': true, '吗': true, '呢': true, '吧': true, '啊': true, '把': true, '被': true, '给': true,
	'这': true, '那': true, '个': true, '些': true, '很': true, '请': true, '在': true, '和': true,
}

func cjkFeatures(run []rune, emit func(string, float64)) {
	for i, r := range run {
		u := string(r)
		if !cjkStop[u] {
			emit("c1:"+u, wCJKUnigram)
		}
		// A pair with a particle or pronoun in it ("的那", "我订") spans a word boundary more
		// often than it forms a word; leaving those out is most of what keeps a long request
		// from drowning the few pairs it shares with a short memory.
		if i+1 < len(run) && !cjkBoundary[r] && !cjkBoundary[run[i+1]] {
			b := string(run[i : i+2])
			if !cjkStop[b] {
				emit("c2:"+b, wCJKBigram)
			}
		}
	}
}

// englishStop are function words; content words are what a query and a memory share.
var englishStop = map[string]bool{
	"a": true, "an": true, "the": true, "and": true, "or": true, "of": true, "to": true, "in": true,
	"on": true, "at": true, "for": true, "with": true, "is": true, "are": true, "was": true,
	"were": true, "be": true, "been": true, "it": true, "its": true, "this": true, "that": true,
	"i": true, "me": true, "my": true, "you": true, "your": true, "he": true, "she": true,
	"his": true, "her": true, "we": true, "our": true, "they": true, "their": true, "user": true,
	"users": true, "do": true, "does": true, "did": true, "can": true, "could": true, "would": true,
	"should": true, "will": true, "please": true, "what": true, "which": true, "who": true,
	"how": true, "some": true, "any": true, "from": true, "by": true, "as": true, "so": true,
	"about": true, "has": true, "have": true, "had": true, "there": true, "here": true, "s": true,
}

func wordFeatures(word string, emit func(string, float64)) {
	if englishStop[word] {
		return
	}
	stem := stemEnglish(word)
	emit("w:"+stem, wWord)
	rs := []rune("^" + stem + "$")
	if len(rs) < 5 { // short words: the word itself is enough
		return
	}
	for i := 0; i+3 <= len(rs); i++ {
		emit("t:"+string(rs[i:i+3]), wTrigram)
	}
}

// stemEnglish strips the commonest inflections so "likes", "liked" and "liking" meet "like".
func stemEnglish(w string) string {
	if len(w) <= 4 || !isASCII(w) {
		return w
	}
	for _, suf := range []string{"ing", "ies", "ed", "es", "s"} {
		if strings.HasSuffix(w, suf) && len(w)-len(suf) >= 3 {
			base := strings.TrimSuffix(w, suf)
			if suf == "ies" {
				base += "y"
			}
			if suf == "s" && strings.HasSuffix(w, "ss") {
				return w
			}
			return base
		}
	}
	return w
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
