package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// preTokenCases take each alternative of the expression and its backtracking: contractions
// (with the long s), a prefix rune before letters, upper-case runs, letters that are both upper
// and lower (CJK, modifier letters, marks), digit runs cut at three, symbols with a leading
// space and trailing newlines or slashes, space runs before a newline, before a word and at the
// end, Unicode spaces and numbers, and control bytes.
var preTokenCases = []string{
	"",
	"hello world",
	"Hello World HELLO wORLD HeLLo",
	"I'm sure you'd've said it's John's; THEY'LL, we'RE, 'S 'x 'ſ",
	"12345678 + 9 = 1234567887, 3.14159, -42, 1e10",
	"  leading, trailing  \n\n  \r\n\tTabs\t\tand  double  spaces   ",
	"a\nb\r\nc\n\n\nd \n e",
	"func main() { fmt.Println(\"hello\", 42) }\n// comment /* x */\npath/to/file.go:12\n",
	"<|endoftext|> <|endofprompt|>",
	"请帮我算一下 123*456+789。结果是 56088。",
	"我对花生过敏，请帮我订一家川菜馆，明天晚上七点，两个人。",
	"Ǆemal ǅemal ǆ ʰello ˆx Straße ΣΑΣ σας café naïve e\u0301 \u0301a \u0301",
	"١٢٣٤ ⅣⅫ ½ ²³ x²",
	"no\u00a0break\u2003em\u3000ideographic\u0085nel\u2028line",
	"\x00\x01\x1c\x1d\x1e\x1fA\x0bc\x0cd",
	"😀 emoji 👍🏽 ok",
	// Adversarial: multi-byte runes in every position (prefixes, marks alone or after digits and
	// spaces, 4-byte letters and digits), format characters, emoji sequences, lone \r and space
	// runs at the ends.
	"€abc —Word «ÉCOLE» ¿Qué? ‘quoted’ “A”",
	"\u0301\u0301\u0301 1\u0301 \u0301x x\u0301'S a\u0301\u0302\u0303'LL",
	"𝐀𝐁𝐂𝐚𝐛𝐜 𝟎𝟏𝟐𝟑𝟒 １２３４５ ⅫⅫⅫⅫ ٠١٢٣",
	"❤️ 👨‍👩‍👧‍👦 🇩🇪🇫🇷 🏳️‍🌈 \U000e0067\U000e0062 a\u200db \ufeffBOM soft\u00adhyphen",
	"한국어 텍스트 हिन्दी क्षत्रिय ภาษาไทย العَرَبِيَّة עִבְרִית",
	"\r \r\r\n \n  \v\f \u2029\u2028 x   ",
	" ", "'", "'S", "'ll", "x'LL x'Ll x'lL x'\u017f x'", "a'", "\t\t", "\n", "1", "\u0301",
	"ʰʰʰ ˆˆ ǅǅǅ ǄǅǆABCdef ABC'S abcDEF",
}

// TestPreTokenCounts: counting by pre-token gives the library's counts.
func TestPreTokenCounts(t *testing.T) {
	tok := mustNew(t, "o200k_base")
	for _, text := range preTokenCases {
		if !handTokenized(text) {
			t.Fatalf("%q is not taken by hand", text)
		}
		for range 2 { // the second count reads remembered pieces
			if got, want := tok.countByPreToken(text), tok.count(text); got != want {
				t.Errorf("countByPreToken = %d, library %d for %q", got, want, text)
			}
		}
	}
}

// TestPreTokensRandom: random texts over a small alphabet that mixes the classes count as the
// library counts them.
func TestPreTokensRandom(t *testing.T) {
	tok := mustNew(t, "o200k_base")
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []rune("aAbZsStTlLdDrReEvVmM09 '\"\n\r\t\v/.-,!?{}()~\x00ſǅʰ\u0301\u20dd我。，１²Ⅳ\u00a0\u3000\u0085😀ÄäßΣ𝐀𝐚𝟎€\u200d\ufe0f\u2028\u0e31\u093e")
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		text := b.String()
		if got, want := tok.countByPreToken(text), tok.count(text); got != want {
			t.Fatalf("countByPreToken = %d, library %d for %q", got, want, text)
		}
	}
}

// TestPreTokensAnyRune: random texts of any valid runes, weighted to ASCII, the first planes
// and then the whole range (so every category, plane and encoded length turns up next to every
// other), count as the library counts them.
func TestPreTokensAnyRune(t *testing.T) {
	tok := mustNew(t, "o200k_base")
	rng := rand.New(rand.NewPCG(7, 8))
	limits := []int{0x80, 0x3000, 0x10000, utf8.MaxRune + 1}
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(24) {
			if r := rune(rng.IntN(limits[rng.IntN(len(limits))])); utf8.ValidRune(r) {
				b.WriteRune(r)
			}
		}
		text := b.String()
		if !handTokenized(text) {
			continue
		}
		if got, want := tok.countByPreToken(text), tok.count(text); got != want {
			t.Fatalf("countByPreToken = %d, library %d for %q", got, want, text)
		}
	}
}

// TestPieceCountsBounded: the remembered counts stay at most maxCounted however many distinct
// pre-tokens pass, and a count is right after the memory started afresh.
func TestPieceCountsBounded(t *testing.T) {
	tok := mustNew(t, "o200k_base")
	var b strings.Builder
	for i := range 3 * maxCounted {
		fmt.Fprintf(&b, " w%x", i)
	}
	text := b.String()
	if got, want := tok.countByPreToken(text), tok.count(text); got != want {
		t.Errorf("countByPreToken = %d, library %d", got, want)
	}
	n := 0
	tok.pieces.m.Range(func(any, any) bool { n++; return true })
	if n > maxCounted {
		t.Errorf("%d counts remembered, want at most %d", n, maxCounted)
	}
}

// FuzzPreTokens: for any text taken by hand the count is the library's.
func FuzzPreTokens(f *testing.F) {
	for _, c := range preTokenCases {
		f.Add(c)
	}
	// Pre-tokens past the BPE scratch space (countLong): runs that pieces does not cut.
	f.Add(strings.Repeat(" \t", 150) + "x")
	f.Add("!" + strings.Repeat("\r\n", 150))
	tok, err := New("o200k_base")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if !handTokenized(text) {
			return // counted by the library
		}
		if got, want := tok.countByPreToken(text), tok.count(text); got != want {
			t.Fatalf("countByPreToken = %d, library %d for %q", got, want, text)
		}
	})
}

// BenchmarkCountMessage counts a turn's short messages, Chinese and English, by the library
// and by pre-token (remembered counts warm, as in a running process).
func BenchmarkCountMessage(b *testing.B) {
	tok, err := New("o200k_base")
	if err != nil {
		b.Fatal(err)
	}
	msgs := []string{
		"请帮我算一下 123*456+789。", `{"expression":"123*456+789"}`, `{"result":56877}`, "结果是 56877。",
		"What is 12345 * 6789? And remind me what we said about dinner on Friday.",
		"12345 * 6789 = 83810205. You wanted Sichuan food near the office on Friday at 7pm.",
	}
	for _, tc := range []struct {
		name  string
		count func(string) int
	}{{"library", tok.count}, {"by-pre-token", tok.Count}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, m := range msgs {
					tc.count(m)
				}
			}
		})
	}
}

// BenchmarkCountFresh counts text of pre-tokens not remembered (random words, the memory cleared
// each time): the cost of encoding them, with the compact vocabulary.
func BenchmarkCountFresh(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	for range 20000 {
		for range 3 + rng.IntN(8) {
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
		sb.WriteByte(' ')
	}
	text := sb.String()
	tok, err := New("o200k_base")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.pieces.m.Clear()
		tok.Count(text)
	}
}
