package session

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Search terms. Latin-script text is split into lower-cased words of letters and digits. CJK
// text has no spaces, so it is indexed as single characters and overlapping character pairs
// (bigrams): a query of one or more characters then matches without a dictionary, the usual
// approach of full-text engines for Chinese.
const (
	maxTermBytes     = 64
	maxTermsPerQuery = 32
	maxTermsPerText  = 512
)

// isCJK reports whether r is a Han, Hiragana, Katakana or Hangul character.
func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// textTerms returns the distinct index terms of a text, at most maxTermsPerText.
func textTerms(text string) []string {
	return terms(text, true, maxTermsPerText)
}

// queryTerms returns the distinct terms a query requires. A CJK run of two or more characters
// requires its bigrams; a single character requires itself.
func queryTerms(query string) []string {
	return terms(query, false, maxTermsPerQuery)
}

func terms(text string, unigrams bool, limit int) []string {
	seen := map[string]bool{}
	var out []string
	add := func(t string) {
		if len(out) >= limit || t == "" || len(t) > maxTermBytes || seen[t] {
			return
		}
		seen[t] = true
		out = append(out, t)
	}
	var word strings.Builder
	var cjk []rune
	flushWord := func() {
		add(word.String())
		word.Reset()
	}
	flushCJK := func() {
		switch {
		case len(cjk) == 1:
			add(string(cjk))
		case len(cjk) > 1:
			for i := range cjk {
				if unigrams {
					add(string(cjk[i]))
				}
				if i+1 < len(cjk) {
					add(string(cjk[i : i+2]))
				}
			}
		}
		cjk = cjk[:0]
	}
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		switch {
		case isCJK(r):
			flushWord()
			cjk = append(cjk, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			flushCJK()
			word.WriteRune(unicode.ToLower(r))
		default:
			flushWord()
			flushCJK()
		}
	}
	flushWord()
	flushCJK()
	return out
}
