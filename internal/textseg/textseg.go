// Package textseg splits text into search terms, the one segmentation of session search, tool
// selection and memory retrieval. Latin-script (and any non-CJK) text becomes lower-cased words
// of letters and digits; CJK text, which has no spaces, becomes overlapping character pairs
// (bigrams) and, where a use wants them, single characters: without a dictionary, pairs are how
// full-text engines index Chinese (most words are two characters), and single characters let a
// one-character word match. Each use picks its options; the splitting rules are the same for all.
package textseg

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Kind is what a term is.
type Kind uint8

// Kinds of terms.
const (
	// Word is a lower-cased run of letters and digits outside CJK.
	Word Kind = iota
	// CJKUnigram is one CJK character.
	CJKUnigram
	// CJKBigram is two adjacent CJK characters.
	CJKBigram
)

// Term is one search term and its kind.
type Term struct {
	Text string
	Kind Kind
}

// Options choose what Segment emits. The zero value gives words and CJK bigrams (a lone CJK
// character as itself), nothing dropped, nothing stemmed.
type Options struct {
	// Fold applies Unicode NFKC first, so full-width letters and digits meet their ASCII forms.
	Fold bool
	// SplitCamel ends a word where a lower-case letter is followed by an upper-case one
	// ("getWeather" gives get, weather).
	SplitCamel bool
	// MinWordRunes drops words shorter than this, except numbers.
	MinWordRunes int
	// Stop drops these words (matched lower-cased, before stemming).
	Stop map[string]bool
	// Stem reduces each word with Stem.
	Stem bool
	// CJKUnigrams also emits every character of a CJK run of two or more.
	CJKUnigrams bool
}

// IsCJK reports whether r is a Han, Hiragana, Katakana or Hangul character.
func IsCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// Segment calls emit for each term of text, in text order. Within a CJK run of two or more
// characters the order is character i (with CJKUnigrams), then the pair i, i+1.
func Segment(text string, o Options, emit func(Term)) {
	if o.Fold {
		text = norm.NFKC.String(text)
	}
	var word []rune
	var cjk []rune
	flushWord := func() {
		if len(word) == 0 {
			return
		}
		w := string(word)
		word = word[:0]
		if o.MinWordRunes > 1 && utf8.RuneCountInString(w) < o.MinWordRunes && !isDigits(w) {
			return
		}
		if o.Stop[w] {
			return
		}
		if o.Stem {
			w = Stem(w)
		}
		emit(Term{w, Word})
	}
	flushCJK := func() {
		switch len(cjk) {
		case 0:
		case 1:
			emit(Term{string(cjk), CJKUnigram})
		default:
			for i := range cjk {
				if o.CJKUnigrams {
					emit(Term{string(cjk[i]), CJKUnigram})
				}
				if i+1 < len(cjk) {
					emit(Term{string(cjk[i : i+2]), CJKBigram})
				}
			}
		}
		cjk = cjk[:0]
	}
	var prev rune
	for _, r := range text {
		switch {
		case IsCJK(r):
			flushWord()
			cjk = append(cjk, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			flushCJK()
			if o.SplitCamel && unicode.IsUpper(r) && unicode.IsLower(prev) {
				flushWord()
			}
			word = append(word, unicode.ToLower(r))
		default:
			flushWord()
			flushCJK()
		}
		prev = r
	}
	flushWord()
	flushCJK()
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// Stem strips common English inflections so "flights", "booking" and "booked" meet "flight" and
// "book", and "schedule", "scheduled" and "scheduling" meet one another. It is light on purpose:
// it only removes inflections, so it never merges words of different meaning the way an
// aggressive stemmer can ("university" and "universe").
func Stem(w string) string {
	w = stripSuffix(w)
	if len(w) > 4 && w[len(w)-1] == 'e' {
		w = w[:len(w)-1]
	}
	return w
}

func stripSuffix(w string) string {
	n := len(w)
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		return w[:n-3] + "y"
	case strings.HasSuffix(w, "sses"):
		return w[:n-2]
	case n > 4 && (strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes") || strings.HasSuffix(w, "zes")):
		return w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return w[:n-1]
	case n > 5 && strings.HasSuffix(w, "ing"):
		return undouble(w[:n-3])
	case n > 4 && strings.HasSuffix(w, "ed"):
		return undouble(w[:n-2])
	}
	return w
}

// undouble turns "shipp" (from "shipping") into "ship".
func undouble(w string) string {
	n := len(w)
	if n >= 3 && w[n-1] == w[n-2] && !strings.ContainsRune("aeiouls", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}
