package tokenizer

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// The o200k_base pre-tokenizer, by hand. The library finds pre-tokens with a regular
// expression engine that works on runes: every count converts the text to runes, and every
// pre-token allocates a match and a string, which made counting a turn's messages a few percent
// of its CPU and its largest source of small allocations. preTokens finds the same pre-tokens
// in the string itself, encodes each with the compact vocabulary (vocab.go), and remembers each
// short pre-token's count: words recur, so most are looked up, not encoded. FuzzPreTokens and
// TestPreTokensRandom check that the counts are the library's.
//
// The expression, in the order its alternatives are tried:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	\p{N}{1,3}
//	 ?[^\s\p{L}\p{N}]+[\r\n/]*
//	\s*[\r\n]+
//	\s+(?!\S)
//	\s+
//
// \s is unicode.IsSpace, as in the library's matcher.

// handTokenized reports whether preTokens takes s: valid UTF-8 (the library counts invalid
// bytes as U+FFFD) without DEL (0x7f), which the library's matcher leaves out of its classes
// and drops from the text.
func handTokenized(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0x7f) < 0
}

func isUpperish(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

func isLowerish(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z'
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

// isPrefix is [^\r\n\p{L}\p{N}].
func isPrefix(r rune) bool { return r != '\r' && r != '\n' && !isLetter(r) && !isNumber(r) }

// isSymbol is [^\s\p{L}\p{N}].
func isSymbol(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

func isLineBreak(r rune) bool { return r == '\r' || r == '\n' }

func isBreakOrSlash(r rune) bool { return r == '\r' || r == '\n' || r == '/' }

// at returns the rune at byte offset i and its size, or (-1, 0) at the end.
func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// span returns the end of the run of runes in class from i.
func span(s string, i int, in func(rune) bool) int {
	for {
		r, n := at(s, i)
		if n == 0 || !in(r) {
			return i
		}
		i += n
	}
}

// contraction returns the end of an optional (?i:'s|'t|'re|'ve|'m|'ll|'d) at i (case folding
// makes the long s, ſ, an s).
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return i
	}
	r, n := at(s, i+1)
	switch r {
	case 's', 'S', 't', 'T', 'm', 'M', 'd', 'D', 'ſ':
		return i + 1 + n
	case 'r', 'R', 'v', 'V':
		if r2, _ := at(s, i+2); r2 == 'e' || r2 == 'E' {
			return i + 3
		}
	case 'l', 'L':
		if r2, _ := at(s, i+2); r2 == 'l' || r2 == 'L' {
			return i + 3
		}
	}
	return i
}

// upperThenLower is [U]*[L]+ from j: the end of the match, or -1. The greedy [U]* gives back
// runes until one that [L] takes (Lm, Lo and M are in both).
func upperThenLower(s string, j int) int {
	// The offsets of the [U] run, to give back from its end.
	u := span(s, j, isUpperish)
	if r, n := at(s, u); n > 0 && isLowerish(r) {
		return span(s, u, isLowerish)
	}
	for k := u; k > j; {
		r, n := utf8.DecodeLastRuneInString(s[:k])
		k -= n
		if isLowerish(r) {
			return span(s, k, isLowerish)
		}
	}
	return -1
}

// preToken returns the end of the pre-token that starts at i < len(s).
func preToken(s string, i int) int {
	r, n := at(s, i)
	starts := [2]int{i, i}
	if isPrefix(r) {
		starts[0] = i + n // with the optional prefix first, then without
	}
	for _, j := range starts {
		if end := upperThenLower(s, j); end > 0 {
			return contraction(s, end)
		}
	}
	for _, j := range starts {
		if u := span(s, j, isUpperish); u > j {
			return contraction(s, span(s, u, isLowerish))
		}
	}
	if isNumber(r) {
		end := i
		for range 3 {
			r, n := at(s, end)
			if n == 0 || !isNumber(r) {
				break
			}
			end += n
		}
		return end
	}
	j := i
	if r == ' ' {
		j++
	}
	if r2, n2 := at(s, j); n2 > 0 && isSymbol(r2) {
		return span(s, span(s, j, isSymbol), isBreakOrSlash)
	}
	// r is a space.
	end := span(s, i, isSpace)
	// \s*[\r\n]+ as the library's matcher takes it: the spaces up to the run's first line
	// break and the line breaks right after it ("\n \n" is two pre-tokens, "\n" and " \n").
	if k := strings.IndexAny(s[i:end], "\r\n"); k >= 0 {
		return span(s, i+k, isLineBreak)
	}
	if end < len(s) {
		// \s+(?!\S): the last space goes with what follows, if one is left.
		if _, n := utf8.DecodeLastRuneInString(s[:end]); end-n > i {
			return end - n
		}
	}
	return end
}

// preTokens calls fn with the pre-tokens of s (handTokenized).
func preTokens(s string, fn func(string)) {
	for i := 0; i < len(s); {
		end := preToken(s, i)
		if end <= i { // not reached: every rune starts a pre-token
			end = len(s)
		}
		fn(s[i:end])
		i = end
	}
}

// pieceCounts remembers the token counts of short pre-tokens, at most about maxCounted of them
// (then it starts afresh): a bounded memory of a few hundred KB. A sync.Map: lookups, nearly all
// of its use, share no lock between the turns counting at once.
type pieceCounts struct {
	m sync.Map // string → int32
	n atomic.Int64
}

const (
	maxCounted      = 8192
	maxCountedBytes = 32
)

func (p *pieceCounts) get(s string) (int32, bool) {
	v, ok := p.m.Load(s)
	if !ok {
		return 0, false
	}
	return v.(int32), true
}

func (p *pieceCounts) put(s string, n int32) {
	if p.n.Add(1) > maxCounted {
		p.m.Clear()
		p.n.Store(1)
	}
	p.m.Store(strings.Clone(s), n)
}

// countByPreToken is count, pre-token by pre-token (handTokenized text).
func (t *Tokenizer) countByPreToken(text string) int {
	n := 0
	preTokens(text, func(p string) {
		if len(p) > maxCountedBytes {
			n += t.encode(p)
			return
		}
		c, ok := t.pieces.get(p)
		if !ok {
			c = int32(t.encode(p))
			t.pieces.put(p, c)
		}
		n += int(c)
	})
	return n
}

// encode is the token count of one pre-token, with the parts of pre-tokens up to a cut run (and
// a prefix) long on the stack. Longer ones are merged with a heap (countLong): vocab.count's
// merges take time quadratic in the pre-token's length, and runs of white space (or line breaks
// after punctuation) are one pre-token however long, since pieces cuts only letter and
// punctuation runs.
func (t *Tokenizer) encode(p string) int {
	var buf [2*maxRun + 1]bpePart
	if len(p) >= len(buf) {
		return t.vocab.countLong(p)
	}
	return t.vocab.count(p, buf[:])
}
