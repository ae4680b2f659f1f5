package session

import "github.com/hermes-agent/hermes/internal/textseg"

// Search terms. Latin-script text is split into lower-cased words of letters and digits. CJK
// text has no spaces, so it is indexed as single characters and overlapping character pairs
// (bigrams): a query of one or more characters then matches without a dictionary, the usual
// approach of full-text engines for Chinese.
const (
	maxTermBytes     = 64
	maxTermsPerQuery = 32
	maxTermsPerText  = 512
)

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
	textseg.Segment(text, textseg.Options{CJKUnigrams: unigrams}, func(term textseg.Term) {
		t := term.Text
		if len(out) >= limit || len(t) > maxTermBytes || seen[t] {
			return
		}
		seen[t] = true
		out = append(out, t)
	})
	return out
}
