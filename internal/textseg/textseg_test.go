package textseg

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func collect(text string, o Options) []Term {
	var out []Term
	Segment(text, o, func(t Term) { out = append(out, t) })
	return out
}

func TestSegment(t *testing.T) {
	w := func(s string) Term { return Term{s, Word} }
	u := func(s string) Term { return Term{s, CJKUnigram} }
	b := func(s string) Term { return Term{s, CJKBigram} }
	tests := []struct {
		name string
		text string
		o    Options
		want []Term
	}{
		{"words lower-cased, punctuation splits", "Book a FLIGHT, to Denver!", Options{}, []Term{w("book"), w("a"), w("flight"), w("to"), w("denver")}},
		{"CJK pairs; a lone character is itself", "订川菜馆 和 茶", Options{}, []Term{b("订川"), b("川菜"), b("菜馆"), u("和"), u("茶")}},
		{"CJK unigrams in order", "川菜馆", Options{CJKUnigrams: true}, []Term{u("川"), b("川菜"), u("菜"), b("菜馆"), u("馆")}},
		{"script changes split", "iPhone15手机壳", Options{}, []Term{w("iphone15"), b("手机"), b("机壳")}},
		{"camel case, short words, stop words, stems", "getWeatherForecasts in a city", Options{SplitCamel: true, MinWordRunes: 2, Stop: map[string]bool{"in": true}, Stem: true},
			[]Term{w("get"), w("weather"), w("forecast"), w("city")}},
		{"numbers survive the length cut", "7 x", Options{MinWordRunes: 2}, []Term{w("7")}},
		{"fold: full width", "ＡＢＣ１２", Options{Fold: true}, []Term{w("abc12")}},
		{"no fold", "ＡＢＣ", Options{}, []Term{w("ａｂｃ")}},
		{"empty", " ,. ", Options{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, collect(tc.text, tc.o)); d != "" {
				t.Errorf("terms (-want +got):\n%s", d)
			}
		})
	}
}

func TestStem(t *testing.T) {
	for in, want := range map[string]string{
		"flights": "flight", "booking": "book", "booked": "book", "schedule": "schedul", "scheduled": "schedul",
		"scheduling": "schedul", "shipping": "ship", "cities": "city", "boxes": "box", "class": "class",
		"classes": "class", "status": "status", "analysis": "analysis", "bus": "bus", "go": "go",
	} {
		if got := Stem(in); got != want {
			t.Errorf("Stem(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzSegment: whatever the text, every term is non-empty valid UTF-8 drawn from the text's
// letters and digits, words hold no upper case and no CJK, CJK terms are one or two CJK
// characters, and all options together never panic.
func FuzzSegment(f *testing.F) {
	for _, s := range []string{"Book a flight", "订川菜馆", "iPhone15手机壳", "ＡＢＣ", "\xff\xfe", "a\u0301b", "ǅungla İstanbul", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, o := range []Options{{}, {Fold: true, SplitCamel: true, MinWordRunes: 2, Stem: true, CJKUnigrams: true, Stop: map[string]bool{"a": true}}} {
			Segment(text, o, func(term Term) {
				if term.Text == "" || !utf8.ValidString(term.Text) {
					t.Fatalf("bad term %q of %q", term.Text, text)
				}
				switch term.Kind {
				case Word:
					for _, r := range term.Text {
						if IsCJK(r) || !(unicode.IsLetter(r) || unicode.IsDigit(r)) {
							t.Fatalf("word %q of %q holds %q", term.Text, text, r)
						}
					}
					if !o.Fold && term.Text != strings.Map(unicode.ToLower, term.Text) {
						t.Fatalf("word %q of %q is not lower-cased", term.Text, text)
					}
				case CJKUnigram, CJKBigram:
					n := 0
					for _, r := range term.Text {
						if !IsCJK(r) {
							t.Fatalf("CJK term %q of %q holds %q", term.Text, text, r)
						}
						n++
					}
					if n != int(term.Kind) {
						t.Fatalf("CJK term %q of kind %d has %d characters", term.Text, term.Kind, n)
					}
				}
			})
		}
	})
}
