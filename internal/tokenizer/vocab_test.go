package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	tiktoken "github.com/tiktoken-go/tokenizer"
)

// TestVocabMatchesLibrary: o200k_base.tokens holds the library's vocabulary, rank for rank, and
// finds every token, with a key (rank) that orders tokens as their ranks do.
func TestVocabMatchesLibrary(t *testing.T) {
	enc, err := tiktoken.Get(tiktoken.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	v := o200kVocab()
	id, prev := 0, int64(-1)
	for off := 0; off < len(v.tokens); id++ {
		want, err := enc.Decode([]uint{uint(id)})
		if err != nil {
			want = ""
		}
		if got := v.token(uint32(off)); got != want {
			t.Fatalf("rank %d: %q, library %q", id, got, want)
		}
		n, w := v.length(off)
		if want != "" {
			r, ok := v.rank(want)
			if !ok || r != uint32(off) {
				t.Fatalf("rank(%q) = %d, %v; want %d (rank %d)", want, r, ok, off, id)
			}
			if int64(r) <= prev {
				t.Fatalf("rank(%q) = %d (rank %d), not above the previous token's %d", want, r, id, prev)
			}
			prev = int64(r)
		}
		off += w + n
	}
	for end := id + 100; id < end; id++ {
		if want, err := enc.Decode([]uint{uint(id)}); err == nil && want != "" {
			t.Fatalf("the library has rank %d (%q) past the file's tokens", id, want)
		}
	}
	if _, ok := v.rank("not a token at all, surely"); ok {
		t.Error("rank of a non-token found")
	}
}

// TestCountAllocatesNothing: counting remembered pre-tokens allocates nothing.
func TestCountAllocatesNothing(t *testing.T) {
	tok := mustNew(t, "o200k_base")
	text := "The quick brown fox jumps over the lazy dog; 我对花生过敏，请帮我订一家川菜馆。"
	tok.Count(text)
	if n := testing.AllocsPerRun(100, func() { tok.Count(text) }); n != 0 {
		t.Errorf("Count allocates %.1f times; want 0", n)
	}
}

// TestCountLongRunsLinear: pre-tokens that pieces does not cut (white space, line breaks after
// punctuation) are counted as the library counts them, in time linear in their length. The
// budget is generous: quadratic merges of these take minutes.
func TestCountLongRunsLinear(t *testing.T) {
	tok := mustNew(t, "o200k_base")
	cases := []struct{ name, text string }{
		{"spaces", strings.Repeat(" ", 400_000)},
		{"line breaks", strings.Repeat("\r\n", 200_000)},
		{"space and tab", strings.Repeat(" \t", 200_000)},
		{"ideographic spaces", strings.Repeat("\u3000", 100_000)},
		{"punctuation then line breaks", "!" + strings.Repeat("\n", 400_000)},
		{"spaces before a word", strings.Repeat(" ", 400_000) + "word"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan int, 1)
			go func() { done <- tok.Count(c.text) }()
			select {
			case got := <-done:
				if want := tok.count(c.text); got != want {
					t.Errorf("Count = %d, library %d", got, want)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("Count of %d bytes took over 30 s", len(c.text))
			}
		})
	}
}

// TestCountLongMatchesCount: the heap's merges (countLong) count as the scan's (count) for long
// pieces of random bytes drawn from a few alphabets (white space, letters, CJK, mixed).
func TestCountLongMatchesCount(t *testing.T) {
	v := o200kVocab()
	rng := rand.New(rand.NewPCG(3, 4))
	alphabets := []string{" \t\n\r", " \n", "abcdefghij ", "的一是不了人我在有他这 ", "aA1 !\n\t.,é中🙂", "=-_*#"}
	for i := range 300 {
		runes := []rune(alphabets[i%len(alphabets)])
		var sb strings.Builder
		for n := 257 + rng.IntN(1500); sb.Len() < n; {
			sb.WriteRune(runes[rng.IntN(len(runes))])
		}
		p := sb.String()
		if got, want := v.countLong(p), v.count(p, nil); got != want {
			t.Fatalf("countLong = %d, count %d for %q", got, want, p)
		}
	}
	for _, p := range []string{"", "a", "ab", "the", strings.Repeat(" ", 300), strings.Repeat("ab", 200)} {
		if got, want := v.countLong(p), v.count(p, nil); got != want {
			t.Errorf("countLong = %d, count %d for %q", got, want, p)
		}
	}
}
