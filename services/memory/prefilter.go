package memory

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/hermes-agent/hermes/internal/textseg"
)

// The extraction pre-filter spares the extraction model the turns whose user words state nothing
// about the user: a calculation, a booking, a translation, a question about the world, thanks.
// It reads the words, not the domain: a clause goes to extraction when it carries a cue of a
// lasting fact (a preference, habit, allergy, diet, family, home, schedule, correction, "remember
// that…"), a first-person word outside a request frame ("help me", "can I", "帮我"), or a negation,
// or when it is a statement at all — only a request, a question, small talk, a number, or a
// fragment continuing a request or question is passed over. When unsure, it extracts. The
// vocabulary is textseg's lexicon (its "extraction" section and durable cues), per language.

// prefilterMaxBytes: longer user text always goes to the model. A long message is seldom only a
// request, and reading it would cost more than the filter is worth.
const prefilterMaxBytes = 4000

// worthExtracting reports whether a turn's material may hold a memory, and why (or why not).
func worthExtracting(m material, rememberRequested bool) (bool, string) {
	if rememberRequested {
		return true, "the user asked to remember a tool's result"
	}
	if len(m.user) == 0 {
		return len(m.tools) > 0, "no user text"
	}
	text := strings.Join(m.user, "\n")
	if len(text) > prefilterMaxBytes {
		return true, "a long message"
	}
	folded := textseg.FoldText(text)
	lex := textseg.Cues()
	if c, ok := anyIn(folded, lex.Durable); ok {
		return true, fmt.Sprintf("durable cue %q", c)
	}
	for _, sent := range sentences(folded) {
		prev := clauseOther
		for _, part := range clauseParts(sent) {
			kind, why := judgeClause(lex, part, prev)
			if kind == clauseStatement {
				return true, fmt.Sprintf("%s in %q", why, strings.TrimSpace(part))
			}
			prev = kind
		}
	}
	return false, "only requests, questions and small talk"
}

// clauseKind is what a clause was read as.
type clauseKind int

const (
	clauseOther     clauseKind = iota // nothing (no words, small talk)
	clauseRequest                     // a request for a one-off task
	clauseQuestion                    // a question
	clauseStatement                   // may state something about the user: extract
)

// judgeClause reads one comma-separated part of a sentence. prev is what the part before it in
// the same sentence was read as.
func judgeClause(lex *textseg.Lexicon, part string, prev clauseKind) (clauseKind, string) {
	x := &lex.Extraction
	p := strings.TrimFunc(part, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if !hasLetter(p) {
		return clauseOther, "" // a number, an expression, punctuation
	}
	bare := removeFrames(x, p)
	for _, kind := range cueKinds() {
		if c, ok := anyIn(bare, x.Cues[kind]); ok {
			return clauseStatement, fmt.Sprintf("%s cue %q", kind, c)
		}
	}
	if isPhatic(x.Phatic, p) {
		return clauseOther, ""
	}
	if w, ok := anyIn(bare, x.FirstPerson); ok {
		return clauseStatement, fmt.Sprintf("first person %q", w)
	}
	rest, request := requestBody(x, p, bare)
	if n, ok := negation(lex, rest); ok {
		return clauseStatement, fmt.Sprintf("negation %q", n)
	}
	// A question is known by its words, not by a question mark alone: in a language the
	// lexicon does not cover, "¿…?" may well state something, and goes to extraction.
	if isQuestion(x, p) {
		return clauseQuestion, ""
	}
	if request {
		return clauseRequest, ""
	}
	if prev == clauseRequest || prev == clauseQuestion {
		// "Book a table, at 7, near the station": a part without a verb of its own that gives a
		// number, a time or a detail continues the request before it. Any other verbless part
		// may be a fact put tersely ("…, bad knees", "…，老人晕车"): when unsure, extract.
		_, finite := anyIn(p, x.Finite)
		_, when := anyIn(p, lex.TimeWords)
		_, detail := startsWithAny(p, x.DetailLeads)
		if !finite && (when || detail || strings.ContainsFunc(p, unicode.IsDigit)) {
			return prev, ""
		}
	}
	return clauseStatement, "a statement"
}

// removeFrames blanks the request frames of folded text: the phrases with a first-person word
// that address the assistant ("help me", "can I"), a lead ("I'd like to", "我想") directly
// followed by a task verb, and the negation words that negate nothing ("是不是").
func removeFrames(x *textseg.ExtractionWords, text string) string {
	for _, lead := range x.RequestLeads {
		if !strings.Contains(text, lead) {
			continue
		}
		for _, sp := range textseg.FindAll(text, lead) {
			if _, ok := startsWithAny(strings.TrimLeft(text[sp.End:], " "), x.TaskVerbs); ok {
				text = blank(text, sp)
			}
		}
	}
	// A-not-A questions ("能不能", "可不可以") hold no constraint.
	for _, f := range slices.Concat(x.RequestFrames, x.NotNegations) {
		if !strings.Contains(text, f) {
			continue
		}
		for _, sp := range textseg.FindAll(text, f) {
			text = blank(text, sp)
		}
	}
	return text
}

// blank replaces a span with spaces, keeping the text's length (so other spans stay valid) and
// separating the words on either side.
func blank(text string, sp textseg.Span) string {
	return text[:sp.Start] + strings.Repeat(" ", sp.End-sp.Start) + text[sp.End:]
}

// requestBody strips a clause's openers ("please", "can you", "请") and reports whether what
// follows begins with a task verb (and tells no past: "来上海三年了" is not a request) or the
// clause holds a request marker; rest is the clause after the task verb (a verb like "cancel"
// or "stop" is the request, not a negation).
func requestBody(x *textseg.ExtractionWords, p, bare string) (rest string, request bool) {
	// The verb may be the first word of a frame ("show me …") or follow one ("I'd like to
	// book"). Frames are blanked in place, so an offset into p is one into bare.
	for _, src := range []string{p, bare} {
		s := stripOpeners(x, src)
		if v, ok := startsWithAny(s, x.TaskVerbs); ok {
			if _, told := anyIn(s[len(v):], x.Narrative); !told {
				return bare[len(src)-len(s)+len(v):], true
			}
		}
	}
	_, marked := anyIn(bare, x.RequestMarkers)
	return bare, marked
}

// stripOpeners strips the openers at the start of s ("please", "can you", "请"), and only
// there, so what it returns is a suffix of s.
func stripOpeners(x *textseg.ExtractionWords, s string) string {
	for {
		s = strings.TrimLeft(s, " ,")
		o, ok := startsWithAny(s, x.RequestOpeners)
		if !ok {
			return s
		}
		s = s[len(o):]
	}
}

// negation finds a negation word that negates something ("no onions", "别放辣", "not before
// 9"), leaving out those that do not ("no problem", "是不是").
func negation(lex *textseg.Lexicon, text string) (string, bool) {
	for _, list := range [][]string{lex.NotNegations, lex.Extraction.NotNegations} {
		for _, nn := range list {
			if !strings.Contains(text, nn) {
				continue
			}
			for _, sp := range textseg.FindAll(text, nn) {
				text = blank(text, sp)
			}
		}
	}
	n, ok := anyIn(text, lex.Negations)
	return n, ok
}

// anyIn returns a phrase of list that folded text holds, with textseg's word boundaries. Phrases
// of a script the text does not use are passed over (most of the lexicon, for a message in one
// language).
func anyIn(text string, list []string) (string, bool) {
	ascii, other := false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		ascii = ascii || c >= 'a' && c <= 'z'
		other = other || c >= utf8.RuneSelf
	}
	for _, p := range list {
		if p == "" || (p[0] < utf8.RuneSelf && !ascii) || (p[0] >= utf8.RuneSelf && !other) {
			continue
		}
		if strings.Contains(text, p) && textseg.Contains(text, p) {
			return p, true
		}
	}
	return "", false
}

func isQuestion(x *textseg.ExtractionWords, p string) bool {
	if _, ok := startsWithAny(p, x.QuestionStarts); ok {
		return true
	}
	_, ok := anyIn(p, x.QuestionMarks)
	return ok
}

// isPhatic reports whether a clause is made of phatic phrases only ("ok great, thanks", "好的谢谢").
func isPhatic(phatic []string, p string) bool {
	s := strings.TrimSpace(p)
	for s != "" {
		w, ok := startsWithAny(s, phatic)
		if !ok {
			return false
		}
		s = strings.TrimLeftFunc(s[len(w):], func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	}
	return true
}

// startsWithAny returns the first (longest, as the lexicon sorts them) phrase of list that text
// begins with, ending at a word boundary where the phrase ends with a letter outside CJK.
func startsWithAny(text string, list []string) (string, bool) {
	for _, w := range list {
		if !strings.HasPrefix(text, w) {
			continue
		}
		last, _ := utf8.DecodeLastRuneInString(w)
		if next, _ := utf8.DecodeRuneInString(text[len(w):]); len(text) > len(w) && wordRune(last) && wordRune(next) {
			continue
		}
		return w, true
	}
	return "", false
}

// wordRune: a letter or digit of a script written with spaces between words.
func wordRune(r rune) bool {
	return (unicode.IsLetter(r) || unicode.IsDigit(r)) && !textseg.IsCJK(r)
}

func hasLetter(s string) bool {
	return strings.IndexFunc(s, unicode.IsLetter) >= 0
}

// sentences splits folded text at sentence ends: a line break, "。", "!", "?", ";", "…", and a
// full stop followed by a space or the end (not the one in "3.5").
func sentences(text string) []string {
	var out []string
	start := 0
	emit := func(end int) {
		if s := strings.TrimSpace(text[start:end]); s != "" {
			out = append(out, s)
		}
	}
	for i, r := range text {
		switch r {
		case '\n', '。', '!', '?', ';', '…':
		case '.':
			if i+1 < len(text) && text[i+1] != ' ' && text[i+1] != '\n' {
				continue
			}
		default:
			continue
		}
		emit(i)
		start = i + utf8.RuneLen(r)
	}
	emit(len(text))
	return out
}

// clauseParts splits a sentence at commas (not those between digits, "1,000"), colons and the
// lexicon's clause breaks ("but", "但是").
func clauseParts(s string) []string {
	var parts []string
	start := 0
	for i, r := range s {
		if r != ',' && r != ':' {
			continue
		}
		if r == ',' && i > 0 && i+1 < len(s) && isDigitByte(s[i-1]) && isDigitByte(s[i+1]) {
			continue
		}
		parts = append(parts, s[start:i])
		start = i + 1
	}
	parts = append(parts, s[start:])
	var out []string
	for _, p := range parts {
		out = append(out, splitBreaks(p, textseg.Cues().ClauseBreaks)...)
	}
	return out
}

func splitBreaks(p string, breaks []string) []string {
	for _, b := range breaks {
		if i := strings.Index(p, b); i >= 0 {
			return append(splitBreaks(p[:i], breaks), splitBreaks(p[i+len(b):], breaks)...)
		}
	}
	return []string{p}
}

// cueKinds are the lexicon's kinds of cue in a fixed order, so a turn's reason is the same every
// time.
var cueKinds = sync.OnceValue(func() []string {
	return slices.Sorted(maps.Keys(textseg.Cues().Extraction.Cues))
})

func isDigitByte(b byte) bool { return b >= '0' && b <= '9' }
