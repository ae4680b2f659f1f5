package orchestrator

import (
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/hermes-agent/hermes/internal/textseg"
)

// The rules read the user's message for one argument (a slot): what kind of value it takes
// (an address, a count, a language …, from its name, its schema and the memory's attribute),
// whether the message turns down the remembered value or the slot, and which values of the
// slot's kind the message carries. The vocabulary comes from textseg's lexicon; nothing here
// knows a domain's names.

// argSlot is what the rules know about an argument a call left out.
type argSlot struct {
	name string
	prop propertySchema
	// kinds of value the slot takes (lexicon kind names), strongest first.
	kinds []string
	// numeric: the schema asks for an integer or a number.
	numeric bool
	// words name the slot (the argument's and the attribute's name, split into words).
	words []string
	// present are the folded values of the call's other arguments: text the model already
	// placed elsewhere is not a value for this slot.
	present []string
}

// newArgSlot describes the argument name of schema prop, for a remembered value stored under
// attribute key.
func newArgSlot(name string, prop propertySchema, key string, present map[string]json.RawMessage) argSlot {
	lex := textseg.Cues()
	a := argSlot{name: name, prop: prop}
	for _, t := range prop.types() {
		if t == "integer" || t == "number" {
			a.numeric = true
		}
	}
	for _, w := range append(nameWords(name), nameWords(key)...) {
		if !slices.Contains(a.words, w) {
			a.words = append(a.words, w)
		}
	}
	kinds := make([]string, 0, len(lex.Kinds))
	for k := range lex.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		for _, c := range lex.Kinds[k].Concepts {
			if slices.Contains(a.words, c) {
				a.kinds = append(a.kinds, k)
				break
			}
		}
	}
	if len(a.kinds) == 0 {
		desc := textseg.FoldText(prop.Description)
		for _, k := range kinds {
			for _, c := range lex.Kinds[k].Concepts {
				if len(c) > 3 && textseg.Contains(desc, c) {
					a.kinds = append(a.kinds, k)
					break
				}
			}
		}
	}
	switch prop.Format {
	case "date", "date-time", "time", "duration":
		a.kinds = append([]string{"datetime"}, a.kinds...)
	}
	for k, v := range present {
		if k == name {
			continue
		}
		var s any
		if json.Unmarshal(v, &s) != nil {
			continue
		}
		switch s := s.(type) {
		case string:
			if f := textseg.FoldText(strings.TrimSpace(s)); f != "" {
				a.present = append(a.present, f)
			}
		case float64:
			a.present = append(a.present, strconv.FormatFloat(s, 'f', -1, 64))
		}
	}
	return a
}

func (a argSlot) has(kind string) bool { return slices.Contains(a.kinds, kind) }

// nameWords splits an identifier into lower-case words: "deliveryAddress", "delivery_address"
// and "delivery-address" all give delivery, address.
func nameWords(s string) []string {
	var out []string
	textseg.Segment(s, textseg.Options{Fold: true, SplitCamel: true}, func(t textseg.Term) {
		if t.Kind == textseg.Word {
			for _, w := range strings.FieldsFunc(t.Text, func(r rune) bool { return r == '_' }) {
				out = append(out, w, textseg.Stem(w))
			}
		} else {
			out = append(out, t.Text)
		}
	})
	return out
}

// reading is a user message read for the rules.
type reading struct {
	lex  *textseg.Lexicon
	orig string // NFKC form, case kept (names are capitalised)
	m    string // folded form; spans index it
	// sameOffsets: orig and m have the same byte offsets, so a span of m can be read in orig.
	sameOffsets bool
	scopes      []negScope
}

// negScope is the text a negation covers; cueSpan is the negation itself.
type negScope struct {
	cue     string
	span    textseg.Span
	cueSpan textseg.Span
}

func newReading(msg string) *reading {
	lex := textseg.Cues()
	orig := strings.NewReplacer("’", "'", "‘", "'").Replace(norm.NFKC.String(msg))
	r := &reading{lex: lex, orig: orig, m: textseg.FoldText(msg)}
	r.sameOffsets = len(r.orig) == len(r.m)
	r.scopes = r.negationScopes()
	return r
}

// scopeBudget bounds a negation's reach: about six words of Latin text or six CJK characters.
const (
	scopeBudget  = 40
	scopeCJKCost = 6
)

// negationScopes finds what each negation in the message covers: the text after it (for a
// post-negation, before it) up to the end of its clause, within scopeBudget.
func (r *reading) negationScopes() []negScope {
	var out []negScope
	taken := func(sp textseg.Span) bool {
		for _, s := range out {
			if sp.Start >= s.span.Start-len(s.cue) && sp.Start < s.span.Start {
				return true
			}
		}
		return false
	}
	for _, cue := range r.lex.Negations {
		for _, sp := range textseg.FindAll(r.m, cue) {
			if r.notNegation(sp) || taken(sp) {
				continue
			}
			out = append(out, negScope{cue: cue, span: textseg.Span{Start: sp.End, End: r.clauseEnd(sp.End)}, cueSpan: sp})
		}
	}
	for _, cue := range r.lex.PostNegations {
		for _, sp := range textseg.FindAll(r.m, cue) {
			out = append(out, negScope{cue: cue, span: textseg.Span{Start: r.clauseStart(sp.Start), End: sp.Start}, cueSpan: sp})
		}
	}
	return out
}

// notNegation: the negation word is part of a phrase that negates nothing ("不错", "no problem").
func (r *reading) notNegation(sp textseg.Span) bool {
	for _, p := range r.lex.NotNegations {
		for _, o := range textseg.FindAll(r.m, p) {
			if o.Start <= sp.Start && sp.End <= o.End {
				return true
			}
		}
	}
	return false
}

func isClausePunct(r rune) bool {
	return strings.ContainsRune(",.;!?，。；！？、\n:：()（）—–", r)
}

func (r *reading) clauseEnd(from int) int {
	budget := scopeBudget
	i := from
	for i < len(r.m) && budget > 0 {
		c, w := utf8.DecodeRuneInString(r.m[i:])
		if isClausePunct(c) && !(c == '.' && r.titleEndsAt(i+1)) {
			break
		}
		if r.breakAt(i) {
			break
		}
		if textseg.IsCJK(c) {
			budget -= scopeCJKCost
		} else {
			budget--
		}
		i += w
	}
	return i
}

func (r *reading) clauseStart(to int) int {
	budget := scopeBudget
	i := to
	for i > 0 && budget > 0 {
		c, w := utf8.DecodeLastRuneInString(r.m[:i])
		if isClausePunct(c) {
			break
		}
		if textseg.IsCJK(c) {
			budget -= scopeCJKCost
		} else {
			budget--
		}
		i -= w
	}
	return i
}

// titleEndsAt: the text before end is a title such as "dr.", whose dot ends no clause.
func (r *reading) titleEndsAt(end int) bool {
	for _, t := range r.lex.Titles {
		if strings.HasSuffix(r.m[:end], t) && boundaryBefore(r.m, end-len(t)) {
			return true
		}
	}
	return false
}

func (r *reading) breakAt(i int) bool {
	for _, b := range r.lex.ClauseBreaks {
		if strings.HasPrefix(r.m[i:], b) {
			return true
		}
	}
	return false
}

// negated returns the negation and the text it covers when it covers any of words (the negation
// counts: "不吃" negates eating, "不送" sending).
func (r *reading) negated(words []string) (string, bool) {
	for _, s := range r.scopes {
		text := r.m[min(s.span.Start, s.cueSpan.Start):max(s.span.End, s.cueSpan.End)]
		for _, w := range words {
			if w != "" && textseg.Contains(text, w) {
				return strings.TrimSpace(text), true
			}
		}
	}
	return "", false
}

// inNegation reports whether the span lies in a negation's scope, or begins inside the negation
// itself ("吃素" in "不吃素了").
func (r *reading) inNegation(sp textseg.Span) bool {
	for _, s := range r.scopes {
		start, end := min(s.span.Start, s.cueSpan.Start), max(s.span.End, s.cueSpan.End)
		if sp.Start >= start && sp.End <= end {
			return true
		}
	}
	return false
}

// positive finds phrase outside every negation's scope.
func (r *reading) positive(phrase string) (textseg.Span, bool) {
	for _, sp := range textseg.FindAll(r.m, phrase) {
		if !r.inNegation(sp) {
			return sp, true
		}
	}
	return textseg.Span{}, false
}

// firstPositive is the first phrase of list found outside negations.
func (r *reading) firstPositive(list []string) (string, bool) {
	for _, p := range list {
		if _, ok := r.positive(p); ok {
			return p, true
		}
	}
	return "", false
}

// userValue is a value of the slot found in the message.
type userValue struct {
	text string          // as the user wrote it
	json json.RawMessage // typed to the argument's schema; nil when it does not convert
	// strong: the value is tied to the slot (a unit, a marker or a closed list of the slot's
	// kind), not only a name somewhere in the message.
	strong bool
	rank   int
}

// number is a number the message carries, in digits or words.
type number struct {
	value int
	span  textseg.Span
	// people: a count of people (a unit such as "people" or "位" follows, or "party of" leads).
	people bool
	// other: a time, date, amount, address or label, not a count.
	other bool
}

// numbers finds the numbers of the message: digits, number words and quantity phrases.
func (r *reading) numbers() []number {
	var out []number
	overlaps := func(sp textseg.Span) bool {
		for _, n := range out {
			if sp.Start < n.span.End && n.span.Start < sp.End {
				return true
			}
		}
		return false
	}
	// Quantity phrases first: "the two of us" is one count, not "two" and "us".
	for _, q := range sortedKeys(r.lex.Quantities) {
		for _, sp := range textseg.FindAll(r.m, q) {
			if !overlaps(sp) {
				out = append(out, number{value: r.lex.Quantities[q], span: sp, people: true})
			}
		}
	}
	for i := 0; i < len(r.m); {
		c, w := utf8.DecodeRuneInString(r.m[i:])
		if unicode.IsDigit(c) && c < utf8.RuneSelf {
			j := i
			for j < len(r.m) && (r.m[j] >= '0' && r.m[j] <= '9' || r.m[j] == '.' && j+1 < len(r.m) && r.m[j+1] >= '0' && r.m[j+1] <= '9') {
				j++
			}
			sp := textseg.Span{Start: i, End: j}
			if v, err := strconv.Atoi(r.m[i:j]); err == nil && !overlaps(sp) {
				out = append(out, r.classify(number{value: v, span: sp}))
			} else if !overlaps(sp) {
				out = append(out, number{span: sp, other: true})
			}
			i = j
			continue
		}
		i += w
	}
	for _, word := range sortedKeys(r.lex.Numbers) {
		for _, sp := range textseg.FindAll(r.m, word) {
			if overlaps(sp) || r.partOfNumeral(sp) {
				continue
			}
			n := r.classify(number{value: r.lex.Numbers[word], span: sp})
			// "one" and "一" are as often an article or a pronoun as a count: only a unit
			// or a "party of" makes them one.
			if n.value == 1 && !n.people {
				continue
			}
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].span.Start < out[j].span.Start })
	return out
}

// partOfNumeral: a CJK numeral inside a longer one ("十" in "二十"), which the longer word
// gives, or inside a word that is not a number ("一下", "一起").
func (r *reading) partOfNumeral(sp textseg.Span) bool {
	c, _ := utf8.DecodeRuneInString(r.m[sp.Start:])
	if !textseg.IsCJK(c) {
		return false
	}
	prev, _ := utf8.DecodeLastRuneInString(r.m[:sp.Start])
	next, _ := utf8.DecodeRuneInString(r.m[sp.End:])
	isNum := func(x rune) bool { return strings.ContainsRune("一二两三四五六七八九十百千俩仨", x) }
	return isNum(prev) || isNum(next) || !r.unitAfter(sp.End) && !strings.ContainsRune("两俩仨", c) && !r.timeAfter(sp.End)
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) > len(keys[j])
		}
		return keys[i] < keys[j]
	})
	return keys
}

// classify decides whether a number counts people, is something else (a time, an amount, a
// house number), or is a bare count.
func (r *reading) classify(n number) number {
	if r.unitAfter(n.span.End) {
		n.people = true
		return n
	}
	if r.timeAfter(n.span.End) || r.timeBefore(n.span.Start) || n.value >= 1900 && n.value <= 2100 {
		n.other = true
		return n
	}
	before := strings.TrimRight(r.m[:n.span.Start], " ")
	for _, c := range r.lex.CountBefore {
		if strings.HasSuffix(before, c) && boundaryBefore(before, len(before)-len(c)) {
			n.people = true
			return n
		}
	}
	// A house number: a street word within the next few words.
	after := r.m[n.span.End:min(len(r.m), n.span.End+30)]
	for _, s := range r.lex.StreetWords {
		if textseg.Contains(after, s) {
			n.other = true
			return n
		}
	}
	return n
}

func boundaryBefore(s string, i int) bool {
	if i <= 0 {
		return true
	}
	c, _ := utf8.DecodeLastRuneInString(s[:i])
	return !(unicode.IsLetter(c) && !textseg.IsCJK(c))
}

func (r *reading) unitAfter(end int) bool {
	rest := strings.TrimLeft(r.m[end:], " ")
	for _, u := range r.lex.PeopleUnits {
		if strings.HasPrefix(rest, u) && textseg.Contains(rest[:min(len(rest), len(u)+1)], u) {
			return true
		}
	}
	return false
}

func (r *reading) timeAfter(end int) bool {
	rest := r.m[end:]
	trimmed := strings.TrimLeft(rest, " ")
	for _, u := range r.lex.TimeAfter {
		if strings.HasPrefix(rest, u) || strings.HasPrefix(trimmed, u) && textseg.Contains(trimmed[:min(len(trimmed), len(u)+1)], u) {
			return true
		}
	}
	return false
}

func (r *reading) timeBefore(start int) bool {
	before := strings.TrimRight(r.m[:start], " ")
	for _, u := range r.lex.TimeBefore {
		if strings.HasSuffix(before, u) && boundaryBefore(before, len(before)-len(u)) {
			return true
		}
	}
	return false
}

// Ranks of the values the message gives, most telling first.
const (
	rankTyped  = iota // a count with its unit, a value of a closed list, an address, a time
	rankMarked        // introduced by a marker of the slot's kind ("send it to", "送到")
	rankPlace         // a common place ("office", "公司")
	rankName          // a name anywhere in the message (capitalised, quoted, a CJK object)
)

// values finds the values of the slot's kind that the message gives, outside negations, most
// telling first. The remembered value, what the call already carries elsewhere, and the user's
// references to their own remembered value ("my home") are not values. It is long on purpose:
// one list of the detectors, each a few lines, in the order of their ranks, so what counts as a
// value for which kind reads in one place.
func (r *reading) values(a argSlot, self []string) []userValue {
	var out []userValue
	seen := map[string]bool{}
	add := func(text string, rank int) {
		text = strings.TrimSpace(strings.Trim(text, " ,.;!?\"'“”「」《》"))
		for _, art := range r.lex.Articles {
			art += " "
			if len(text) > len(art) && strings.EqualFold(text[:len(art)], art) {
				text = text[len(art):]
			}
		}
		f := textseg.FoldText(text)
		if f == "" || seen[f] || r.explained(a, f, self) {
			return
		}
		seen[f] = true
		v := userValue{text: text, strong: rank < rankName, rank: rank}
		if j, ok := a.prop.convert(text); ok {
			v.json = j
		}
		out = append(out, v)
	}
	defer func() { sort.SliceStable(out, func(i, j int) bool { return out[i].rank < out[j].rank }) }()
	if a.numeric {
		people := r.hasPeopleCount()
		for _, n := range r.numbers() {
			if n.other || r.inNegation(n.span) {
				continue
			}
			rank := rankTyped
			if a.has("count") && !n.people {
				if people {
					continue
				}
				rank = rankName
			}
			add(strconv.Itoa(n.value), rank)
		}
		return out
	}
	for _, e := range a.prop.Enum {
		var s string
		if json.Unmarshal(e, &s) == nil && s != "" {
			if _, ok := r.positive(textseg.FoldText(s)); ok {
				add(s, rankTyped)
			}
		}
	}
	for _, k := range a.kinds {
		kw := r.lex.Kinds[k]
		for _, v := range kw.Values {
			if sp, ok := r.positive(v); ok {
				add(r.text(sp), rankTyped)
			}
		}
		switch k {
		case "address":
			for _, v := range r.streetAddresses() {
				add(v, rankTyped)
			}
		case "datetime":
			for _, v := range r.timePhrases() {
				add(v, rankTyped)
			}
		}
		for _, mk := range kw.Markers {
			for _, sp := range textseg.FindAll(r.m, mk) {
				if r.inNegation(sp) {
					continue
				}
				if v := r.markedValue(sp.End, k, a.present); v != "" {
					add(v, rankMarked)
				}
			}
		}
		for _, p := range kw.Places {
			if sp, ok := r.positive(p); ok {
				add(r.text(sp), rankPlace)
			}
		}
	}
	if !a.closedKind() {
		for _, q := range r.quoted() {
			add(q, rankName)
		}
		for _, c := range r.capitalised() {
			add(c, rankName)
		}
		for _, c := range r.cjkObjects(a.present) {
			add(c, rankName)
		}
		for _, c := range r.cjkBeforeConcept(a) {
			add(c, rankMarked)
		}
	}
	return out
}

// streetAddresses finds street addresses in Latin text: a house number, then words up to a
// street word ("48 Market Avenue", "200 Pine Road").
func (r *reading) streetAddresses() []string {
	if !r.sameOffsets {
		return nil
	}
	var out []string
	words := strings.Fields(r.orig)
	for i, w := range words {
		first, _ := utf8.DecodeRuneInString(w)
		if !unicode.IsDigit(first) {
			continue
		}
		for j := i + 1; j < len(words) && j <= i+5; j++ {
			if r.streetWord(words[j]) {
				out = append(out, strings.TrimRight(strings.Join(words[i:j+1], " "), ",.;!?"))
				break
			}
			if strings.ContainsAny(words[j], ",;!?") {
				break
			}
		}
	}
	return out
}

// timePhrases finds the times and dates the message gives, each as one phrase ("Friday at
// 3pm", "周五下午三点").
func (r *reading) timePhrases() []string {
	var spans []textseg.Span
	for _, t := range r.lex.TimeWords {
		for _, sp := range textseg.FindAll(r.m, t) {
			if !r.inNegation(sp) {
				spans = append(spans, sp)
			}
		}
	}
	for _, n := range r.numbers() {
		if n.other && !r.inNegation(n.span) && (r.timeAfter(n.span.End) || r.timeBefore(n.span.Start)) {
			end := n.span.End
			for _, u := range r.lex.TimeAfter {
				rest := strings.TrimLeft(r.m[end:], " ")
				if strings.HasPrefix(rest, u) {
					end = len(r.m) - len(rest) + len(u)
					break
				}
			}
			spans = append(spans, textseg.Span{Start: n.span.Start, End: end})
		}
	}
	if len(spans) == 0 {
		return nil
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].Start < spans[j].Start })
	var out []string
	cur := spans[0]
	for _, sp := range spans[1:] {
		gap := ""
		if sp.Start > cur.End {
			gap = strings.TrimSpace(r.m[cur.End:sp.Start])
		}
		if sp.Start <= cur.End || gap == "" || slices.Contains(r.lex.Connectors, gap) {
			cur.End = max(cur.End, sp.End)
			continue
		}
		out = append(out, r.text(cur))
		cur = sp
	}
	return append(out, r.text(cur))
}

// cjkBeforeConcept finds, in CJK text, the words that qualify the slot's own nouns: "X的天气",
// "X的地址" give X.
func (r *reading) cjkBeforeConcept(a argSlot) []string {
	var out []string
	nouns := append([]string{}, a.words...)
	for _, k := range a.kinds {
		nouns = append(nouns, r.lex.Kinds[k].Concepts...)
	}
	for _, n := range nouns {
		if n == "" || !textseg.IsCJK([]rune(n)[0]) {
			continue
		}
		for _, sp := range textseg.FindAll(r.m, "的"+n) {
			end := sp.Start
			start := end
			for k := 0; k < 4 && start > 0; k++ {
				c, w := utf8.DecodeLastRuneInString(r.m[:start])
				if !textseg.IsCJK(c) || isClausePunct(c) {
					break
				}
				start -= w
			}
			// Drop the time words and the request's verbs in front ("明天深圳" gives 深圳).
			v := r.m[start:end]
			for _, t := range r.lex.TimeWords {
				if i := strings.LastIndex(v, t); i >= 0 {
					v = v[i+len(t):]
				}
			}
			possessive := false
			for _, p := range r.lex.Possessives {
				possessive = possessive || strings.HasSuffix(v+"的", p)
			}
			if utf8.RuneCountInString(v) >= 2 && !possessive && !r.notName(v) && !r.inNegation(textseg.Span{Start: start, End: end}) {
				out = append(out, v)
			}
		}
	}
	return out
}

// closedKind: every kind of the slot has a closed list of values, so names elsewhere in the
// message are not values of it.
func (a argSlot) closedKind() bool {
	if len(a.kinds) == 0 {
		return false
	}
	for _, k := range a.kinds {
		if len(textseg.Cues().Kinds[k].Values) == 0 && k != "datetime" {
			return false
		}
	}
	return true
}

func (r *reading) hasPeopleCount() bool {
	for _, n := range r.numbers() {
		if n.people && !r.inNegation(n.span) {
			return true
		}
	}
	return false
}

// text returns the message's own text at a span of its folded form (its folded text when the
// two forms do not line up).
func (r *reading) text(sp textseg.Span) string {
	if r.sameOffsets {
		return r.orig[sp.Start:sp.End]
	}
	return r.m[sp.Start:sp.End]
}

// markedValue reads the value a marker introduces (its two branches, CJK and Latin, are the two
// ways a value ends, kept side by side): for Latin text the capitalised words (or a
// house number and its street) that follow; for CJK text the run of characters that follows, up
// to a particle or a time word.
func (r *reading) markedValue(end int, kind string, present []string) string {
	rest := r.m[end:]
	trimmed := strings.TrimLeft(rest, " ")
	start := end + len(rest) - len(trimmed)
	if trimmed == "" {
		return ""
	}
	c, _ := utf8.DecodeRuneInString(trimmed)
	if textseg.IsCJK(c) {
		i := 0
		n := 0
		for i < len(trimmed) && n < 16 {
			c, w := utf8.DecodeRuneInString(trimmed[i:])
			ascii := c < utf8.RuneSelf && (unicode.IsLetter(c) || unicode.IsDigit(c))
			if !textseg.IsCJK(c) && !ascii && !unicode.IsDigit(c) || isClausePunct(c) || n >= 2 && slices.Contains(r.lex.Particles, string(c)) {
				break
			}
			if startsWithAny(trimmed[i:], present) || n >= 2 && (r.timeWordAt(start+i) || startsWithAny(trimmed[i:], r.lex.ObjectMarkers)) {
				break
			}
			i += w
			n++
		}
		v := r.text(textseg.Span{Start: start, End: start + i})
		if n < 2 || r.notName(v) || r.inNegation(textseg.Span{Start: start, End: start + i}) {
			return ""
		}
		return v
	}
	if !r.sameOffsets {
		return ""
	}
	// Latin: capitalised words, or a number then words up to the clause's end (an address).
	words := strings.Fields(r.orig[start:r.clauseEnd(start)])
	var take []string
	for i, w := range words {
		if !slices.Contains(r.lex.Titles, textseg.FoldText(w)) {
			w = strings.Trim(w, ",.;!?")
		}
		if w == "" {
			break
		}
		first, _ := utf8.DecodeRuneInString(w)
		switch {
		case unicode.IsUpper(first) && !r.stopCap(w) && !r.timeWord(w):
			take = append(take, w)
			continue
		case i == 0 && unicode.IsDigit(first) && kind == "address":
			take = append(take, w)
			continue
		case len(take) > 0 && (unicode.IsDigit(first) || kind == "address" && r.streetWord(w)):
			take = append(take, w)
			continue
		}
		break
	}
	v := strings.Join(take, " ")
	if v != "" && r.inNegation(textseg.Span{Start: start, End: min(len(r.m), start+len(v))}) {
		return ""
	}
	return v
}

func startsWithAny(s string, list []string) bool {
	for _, p := range list {
		if p != "" && strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func (r *reading) timeWordAt(i int) bool {
	for _, t := range r.lex.TimeWords {
		if strings.HasPrefix(r.m[i:], t) {
			return true
		}
	}
	return false
}

func (r *reading) timeWord(w string) bool {
	return slices.Contains(r.lex.TimeWords, textseg.FoldText(strings.Trim(w, ",.;!?'s")))
}

func (r *reading) stopCap(w string) bool {
	return slices.Contains(r.lex.StopCaps, textseg.FoldText(strings.Trim(w, ",.;!?")))
}

func (r *reading) streetWord(w string) bool {
	return slices.Contains(r.lex.StreetWords, textseg.FoldText(strings.Trim(w, ",;!?")))
}

// quoted returns the quoted phrases of the message.
func (r *reading) quoted() []string {
	var out []string
	for _, pair := range [][2]string{{`"`, `"`}, {"“", "”"}, {"「", "」"}, {"《", "》"}, {"『", "』"}} {
		s := r.orig
		for {
			i := strings.Index(s, pair[0])
			if i < 0 {
				break
			}
			s = s[i+len(pair[0]):]
			j := strings.Index(s, pair[1])
			if j < 0 {
				break
			}
			if q := strings.TrimSpace(s[:j]); q != "" && len(q) < 200 {
				out = append(out, q)
			}
			s = s[j+len(pair[1]):]
		}
	}
	return out
}

// capitalised returns runs of capitalised words that are names: not the first word of a
// sentence unless another capitalised word follows, not a day or a month, not a stop word.
func (r *reading) capitalised() []string {
	var out []string
	var run []string
	flush := func() {
		// A run that begins a sentence may begin with a common word in capitals ("Flight
		// Boston"): the lexicon's slot words are not part of a name.
		for len(run) > 1 && r.conceptWord(run[0]) && sentenceStartRun(r.orig, run[0]) {
			run = run[1:]
		}
		if len(run) == 1 && sentenceStartRun(r.orig, run[0]) && r.conceptWord(run[0]) {
			run = run[:0]
		}
		if len(run) > 0 {
			out = append(out, strings.Join(run, " "))
		}
		run = run[:0]
	}
	sentenceStart := true
	for _, f := range strings.Fields(r.orig) {
		w := strings.TrimRight(f, ",.;!?:)")
		w = strings.TrimLeft(w, "(\"'")
		first, _ := utf8.DecodeRuneInString(w)
		isName := w != "" && unicode.IsUpper(first) && !textseg.IsCJK(first) && !r.stopCap(w) && !r.timeWord(w)
		switch {
		case isName && sentenceStart:
			// A sentence's first word is capitalised anyway: a name only when another
			// capitalised word follows (handled by keeping it in the run).
			run = append(run, w)
		case isName:
			run = append(run, w)
		default:
			if len(run) == 1 && sentenceStartRun(r.orig, run[0]) {
				run = run[:0]
			}
			flush()
		}
		if slices.Contains(r.lex.Titles, textseg.FoldText(f)) {
			if isName {
				run[len(run)-1] = f // "Dr." begins a name and ends no sentence
			}
			continue
		}
		sentenceStart = strings.ContainsAny(f[len(f)-1:], ".!?")
		if w != f && strings.ContainsAny(f[len(w):], ",.;!?:") {
			if len(run) == 1 && sentenceStartRun(r.orig, run[0]) {
				run = run[:0]
			}
			flush()
		}
	}
	if len(run) == 1 && sentenceStartRun(r.orig, run[0]) {
		run = run[:0]
	}
	flush()
	return out
}

// conceptWord: the word is one of the lexicon's slot words (any kind).
func (r *reading) conceptWord(w string) bool {
	f := textseg.FoldText(w)
	for _, k := range r.lex.Kinds {
		if slices.Contains(k.Concepts, f) || slices.Contains(k.Concepts, textseg.Stem(f)) {
			return true
		}
	}
	return false
}

// sentenceStartRun: the word begins the text or a sentence.
func sentenceStartRun(text, w string) bool {
	i := strings.Index(text, w)
	if i < 0 {
		return false
	}
	before := strings.TrimRight(text[:i], " ")
	return before == "" || strings.ContainsAny(before[len(before)-1:], ".!?")
}

// explained: the value is the remembered one, a reference to the user's own remembered value,
// or text the call already carries in another argument.
func (r *reading) explained(a argSlot, f string, self []string) bool {
	for _, s := range self {
		if s != "" && (f == s || strings.Contains(f, s) || len(f) >= 3 && strings.Contains(s, f)) {
			return true
		}
	}
	for _, p := range a.present {
		if f == p || len(f) >= 2 && strings.Contains(p, f) {
			return true
		}
	}
	for _, ref := range r.lex.References {
		if strings.Contains(f, ref) {
			return true
		}
	}
	if slices.Contains(a.words, f) {
		return true
	}
	for _, k := range a.kinds {
		if slices.Contains(r.lex.Kinds[k].Concepts, f) {
			return true
		}
	}
	for _, p := range r.lex.Possessives {
		if strings.HasPrefix(f, p) {
			return true
		}
	}
	return slices.Contains(r.lex.Pronouns, f)
}

// cjkObjects returns what the object markers of a request introduce in CJK text ("去X", "订X"),
// less what names nothing (a measure word, a demonstrative, a pronoun, a generic noun).
func (r *reading) cjkObjects(present []string) []string {
	var out []string
	for _, mk := range r.lex.ObjectMarkers {
		for _, sp := range textseg.FindAll(r.m, mk) {
			if r.inNegation(sp) {
				continue
			}
			if v := r.markedValue(sp.End, "", present); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// notName: the text names nothing (it is or begins with a measure word, a demonstrative, a
// pronoun or a generic noun, or begins with a time word).
func (r *reading) notName(v string) bool {
	f := textseg.FoldText(v)
	for _, n := range r.lex.NotNames {
		if f == n || utf8.RuneCountInString(n) == 1 && strings.HasPrefix(f, n) {
			return true
		}
	}
	for _, t := range r.lex.TimeWords {
		if strings.HasPrefix(f, t) {
			return true
		}
	}
	return false
}
