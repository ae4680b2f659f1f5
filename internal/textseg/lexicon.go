package textseg

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The lexicon is the vocabulary with which people negate, replace, refer back to and quantify
// things, one JSON file per language in lexicon/. It is data about language, not about any
// domain: code that reads messages (the orchestrator's fill decisions, memory extraction) asks
// it instead of keeping word lists of its own. All entries are folded (FoldText) when loaded.

//go:embed lexicon/*.json
var lexiconFiles embed.FS

// KindWords is the vocabulary of one kind of slot (an address, a city, a count …).
type KindWords struct {
	// Concepts name the slot or what is done with it ("address", "deliver", "地址", "送").
	Concepts []string `json:"concepts"`
	// Markers introduce a value of the slot ("send it to", "送到").
	Markers []string `json:"markers"`
	// Places are common values of a place slot that are not proper names ("office", "公司").
	Places []string `json:"places"`
	// Values is the closed list of values, where the kind has one (languages, payment methods).
	Values []string `json:"values"`
}

// ExtractionWords are the vocabulary of statements about oneself and of requests.
type ExtractionWords struct {
	// Cues, by kind (preference, habit, remember, correction, identity, family, location,
	// schedule, constraint, style), are words with which people state lasting things about
	// themselves or how they want to be answered.
	Cues map[string][]string `json:"cues"`
	// FirstPerson are the words with which the author speaks of themselves ("I", "our", "我").
	FirstPerson []string `json:"firstPerson"`
	// Phatic words say nothing about anyone ("thanks", "好的"); a clause of them only is passed over.
	Phatic []string `json:"phatic"`
	// RequestOpeners may precede a request's verb ("please", "can you", "请").
	RequestOpeners []string `json:"requestOpeners"`
	// RequestMarkers make a clause a request wherever they are ("please", "帮我").
	RequestMarkers []string `json:"requestMarkers"`
	// RequestFrames hold a first-person word that addresses the assistant and states nothing
	// about the author ("help me", "can I", "告诉我").
	RequestFrames []string `json:"requestFrames"`
	// RequestLeads ("I'd like to", "我想") directly followed by one of TaskVerbs are a frame too.
	RequestLeads []string `json:"requestLeads"`
	// TaskVerbs begin a request for a one-off task ("book", "translate", "订").
	TaskVerbs []string `json:"taskVerbs"`
	// QuestionStarts begin a question ("what", "do"); QuestionMarks make a clause a question
	// wherever they are ("吗", "多少").
	QuestionStarts []string `json:"questionStarts"`
	QuestionMarks  []string `json:"questionMarks"`
	// NotNegations hold a negation word but negate nothing here (A-not-A questions: "是不是").
	NotNegations []string `json:"notNegations"`
	// Narrative words make a clause that begins with a task verb tell what happened instead of
	// asking for it ("booked already", "来上海三年了").
	Narrative []string `json:"narrative"`
	// Finite words make a comma-separated part a clause of its own ("is", "是"); a part without
	// one continues the clause before it ("Book a table, at 7").
	Finite []string `json:"finite"`
	// DetailLeads begin a verbless part that gives a detail of the request before it ("near the
	// station", "靠近地铁站"); another verbless part may be a fact put tersely ("bad knees").
	DetailLeads []string `json:"detailLeads"`
}

// Lexicon is the merged vocabulary of every language in lexicon/.
type Lexicon struct {
	// Negations turn down what follows them; PostNegations what precedes them ("X就算了").
	Negations     []string `json:"negations"`
	PostNegations []string `json:"postNegations"`
	// NotNegations hold a negation word but negate nothing ("no problem", "不错").
	NotNegations []string `json:"notNegations"`
	// ClauseBreaks end a negation's scope ("but", "但是").
	ClauseBreaks []string `json:"clauseBreaks"`
	// Changes say that this time differs from the usual ("this time", "instead", "换").
	Changes []string `json:"changes"`
	// References point back to what the user said or did before ("the usual", "老样子").
	References []string `json:"references"`
	// Possessives make a slot word a reference to the user's own value ("my address").
	Possessives []string `json:"possessives"`
	// Numbers are number words and their values; Quantities phrases that give a count of
	// people ("just me", "我们俩"; 0 when the phrase names a group without a count).
	Numbers    map[string]int `json:"numbers"`
	Quantities map[string]int `json:"quantities"`
	// PeopleUnits follow a count of people ("people", "位"); CountBefore precede one ("party of").
	PeopleUnits []string `json:"peopleUnits"`
	CountBefore []string `json:"countBefore"`
	// TimeWords name days and times; a number followed by TimeAfter or preceded by TimeBefore
	// is a time, date, amount or label, not a count.
	TimeWords  []string `json:"timeWords"`
	TimeAfter  []string `json:"timeAfter"`
	TimeBefore []string `json:"timeBefore"`
	// StreetWords end street addresses ("street", "路").
	StreetWords []string `json:"streetWords"`
	// StopCaps are capitalised words that are not names ("I", "Please").
	StopCaps []string `json:"stopCaps"`
	// ObjectMarkers introduce the object of a request in languages without capitals ("去",
	// "订"); NotNames begin or are text after them that names nothing ("个", "那", "位子").
	ObjectMarkers []string `json:"objectMarkers"`
	NotNames      []string `json:"notNames"`
	// Durable cues state a lasting fact about the user (an allergy, a diet, a household, an
	// address, a name), which memory keeps whatever the extractor calls it.
	Durable []string `json:"durable"`
	// SafetyFacts mark a memory as an allergy, a diet or a medical or accessibility need;
	// SafetyTopics mark a request that such a fact can change (food, travel, health).
	SafetyFacts  []string `json:"safetyFacts"`
	SafetyTopics []string `json:"safetyTopics"`
	// Articles are dropped from the front of a value ("the Hilton"); Pronouns stand for a
	// value without naming it ("it", "那里"); Particles end a value in CJK text ("的", "了");
	// Connectors join the parts of one time ("Friday at 3pm"); MemoryWords say nothing about
	// what a memory is of ("user", "prefers").
	Articles    []string `json:"articles"`
	Pronouns    []string `json:"pronouns"`
	Particles   []string `json:"particles"`
	Connectors  []string `json:"connectors"`
	MemoryWords []string `json:"memoryWords"`
	// Titles are abbreviations that begin names, whose dot ends no sentence ("Dr.").
	Titles []string `json:"titles"`
	// Kinds is the vocabulary of each kind of slot, by kind name.
	Kinds map[string]KindWords `json:"kinds"`
	// Extraction tells a message that may state something lasting about its author from one
	// that only asks for something (memory extraction's pre-filter).
	Extraction ExtractionWords `json:"extraction"`
	// Languages lists the languages merged, in file order.
	Languages []string `json:"-"`
}

// Cues returns the lexicon, loaded once. The files are part of the binary, so a broken one is
// a build defect that every test reading the lexicon reports.
var Cues = sync.OnceValue(func() *Lexicon {
	lex, err := loadLexicon(lexiconFiles)
	if err != nil {
		panic(fmt.Sprintf("textseg: the embedded lexicon is broken: %v", err))
	}
	return lex
})

func loadLexicon(fsys fs.FS) (*Lexicon, error) {
	names, err := fs.Glob(fsys, "lexicon/*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := &Lexicon{Numbers: map[string]int{}, Quantities: map[string]int{}, Kinds: map[string]KindWords{},
		Extraction: ExtractionWords{Cues: map[string][]string{}}}
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		var one struct {
			Lexicon
			Language string `json:"language"`
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&one); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out.merge(&one.Lexicon)
		out.Languages = append(out.Languages, one.Language)
	}
	return out, nil
}

func (l *Lexicon) merge(o *Lexicon) {
	add := func(dst *[]string, src []string) {
		for _, s := range src {
			if s = FoldText(s); s != "" {
				*dst = append(*dst, s)
			}
		}
	}
	add(&l.Negations, o.Negations)
	add(&l.PostNegations, o.PostNegations)
	add(&l.NotNegations, o.NotNegations)
	add(&l.ClauseBreaks, o.ClauseBreaks)
	add(&l.Changes, o.Changes)
	add(&l.References, o.References)
	add(&l.Possessives, o.Possessives)
	add(&l.PeopleUnits, o.PeopleUnits)
	add(&l.CountBefore, o.CountBefore)
	add(&l.TimeWords, o.TimeWords)
	add(&l.TimeAfter, o.TimeAfter)
	add(&l.TimeBefore, o.TimeBefore)
	add(&l.StreetWords, o.StreetWords)
	add(&l.StopCaps, o.StopCaps)
	add(&l.ObjectMarkers, o.ObjectMarkers)
	add(&l.NotNames, o.NotNames)
	add(&l.Titles, o.Titles)
	add(&l.Durable, o.Durable)
	add(&l.SafetyFacts, o.SafetyFacts)
	add(&l.Articles, o.Articles)
	add(&l.Pronouns, o.Pronouns)
	add(&l.Particles, o.Particles)
	add(&l.Connectors, o.Connectors)
	add(&l.MemoryWords, o.MemoryWords)
	add(&l.SafetyTopics, o.SafetyTopics)
	for k, v := range o.Numbers {
		l.Numbers[FoldText(k)] = v
	}
	for k, v := range o.Quantities {
		l.Quantities[FoldText(k)] = v
	}
	for kind, w := range o.Kinds {
		have := l.Kinds[kind]
		add(&have.Concepts, w.Concepts)
		add(&have.Markers, w.Markers)
		add(&have.Places, w.Places)
		add(&have.Values, w.Values)
		l.Kinds[kind] = have
	}
	x, ox := &l.Extraction, &o.Extraction
	for kind, words := range ox.Cues {
		have := x.Cues[kind]
		add(&have, words)
		x.Cues[kind] = have
	}
	add(&x.FirstPerson, ox.FirstPerson)
	add(&x.Phatic, ox.Phatic)
	add(&x.RequestOpeners, ox.RequestOpeners)
	add(&x.RequestMarkers, ox.RequestMarkers)
	add(&x.RequestFrames, ox.RequestFrames)
	add(&x.RequestLeads, ox.RequestLeads)
	add(&x.TaskVerbs, ox.TaskVerbs)
	add(&x.QuestionStarts, ox.QuestionStarts)
	add(&x.QuestionMarks, ox.QuestionMarks)
	add(&x.NotNegations, ox.NotNegations)
	add(&x.Narrative, ox.Narrative)
	add(&x.Finite, ox.Finite)
	add(&x.DetailLeads, ox.DetailLeads)
	// Longer phrases first, so "do not" is found before "not" and "十二" before "十".
	for _, s := range [][]string{l.Negations, l.PostNegations, l.Changes, l.References, l.Possessives,
		l.PeopleUnits, l.CountBefore, l.ObjectMarkers, l.TimeWords, l.TimeAfter, l.TimeBefore, l.StreetWords} {
		sortLongestFirst(s)
	}
	for _, s := range [][]string{x.Phatic, x.RequestOpeners, x.RequestFrames, x.RequestLeads, x.TaskVerbs, x.NotNegations} {
		sortLongestFirst(s)
	}
	for kind, w := range l.Kinds {
		for _, s := range [][]string{w.Concepts, w.Markers, w.Places, w.Values} {
			sortLongestFirst(s)
		}
		l.Kinds[kind] = w
	}
}

func sortLongestFirst(s []string) {
	sort.SliceStable(s, func(i, j int) bool { return len(s[i]) > len(s[j]) })
}

// FoldText folds width and case (NFKC, lower case) and straightens typographic apostrophes, so
// that text typed in different forms compares equal. Byte offsets into folded text are what the
// lexicon's finders return.
func FoldText(s string) string {
	return apostrophes.Replace(strings.ToLower(norm.NFKC.String(s)))
}

// apostrophes straightens typographic apostrophes (a Replacer is immutable and safe to share;
// building one per call was most of FoldText's cost).
var apostrophes = strings.NewReplacer("’", "'", "‘", "'")

// Span is a byte range [Start, End) of folded text.
type Span struct{ Start, End int }

// FindAll returns every occurrence of phrase in folded text. A phrase that begins or ends with a
// letter or digit outside CJK matches only at word boundaries there, so "no" is not found in
// "know" nor "in" in "dinner"; CJK phrases match anywhere, as CJK has no spaces.
func FindAll(text, phrase string) []Span {
	if phrase == "" {
		return nil
	}
	var out []Span
	for off := 0; off < len(text); {
		i := strings.Index(text[off:], phrase)
		if i < 0 {
			break
		}
		i += off
		end := i + len(phrase)
		if boundaryOK(text, i, end, phrase) {
			out = append(out, Span{i, end})
		}
		_, w := utf8.DecodeRuneInString(text[i:])
		off = i + w
	}
	return out
}

// Contains reports whether folded text holds phrase, with FindAll's word boundaries.
func Contains(text, phrase string) bool { return len(FindAll(text, phrase)) > 0 }

// FirstOf returns the first phrase of list found in text, and where.
func FirstOf(text string, list []string) (string, Span, bool) {
	best, bestSpan, found := "", Span{}, false
	for _, p := range list {
		if sp := FindAll(text, p); len(sp) > 0 && (!found || sp[0].Start < bestSpan.Start) {
			best, bestSpan, found = p, sp[0], true
		}
	}
	return best, bestSpan, found
}

func boundaryOK(text string, start, end int, phrase string) bool {
	first, _ := utf8.DecodeRuneInString(phrase)
	last, _ := utf8.DecodeLastRuneInString(phrase)
	if isWordRune(first) && start > 0 {
		if r, _ := utf8.DecodeLastRuneInString(text[:start]); isWordRune(r) {
			return false
		}
	}
	if isWordRune(last) && end < len(text) {
		if r, _ := utf8.DecodeRuneInString(text[end:]); isWordRune(r) {
			return false
		}
	}
	return true
}

// isWordRune: a letter or digit of a script written with spaces between words.
func isWordRune(r rune) bool {
	return (unicode.IsLetter(r) || unicode.IsDigit(r)) && !IsCJK(r)
}
