package tokenizer

import (
	"encoding/base64"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCount(t *testing.T) {
	tests := []struct {
		encoding string
		text     string
		want     int
	}{
		{"cl100k_base", "", 0},
		{"cl100k_base", "hello world", 2},
		{"o200k_base", "hello world", 2},
		{"cl100k_base", "<|endoftext|>", 7},
	}
	for _, tc := range tests {
		tok, err := New(tc.encoding)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Count(tc.text); got != tc.want {
			t.Errorf("%s Count(%q) = %d, want %d", tc.encoding, tc.text, got, tc.want)
		}
	}
	if got := mustNew(t, "o200k_base").Count("我想订一家川菜馆"); got < 3 {
		t.Errorf("Chinese text counted as %d tokens", got)
	}
}

func TestUnknownEncoding(t *testing.T) {
	if _, err := New("nope"); err == nil {
		t.Fatal("New(nope) succeeded")
	}
}

func mustNew(t *testing.T, enc string) *Tokenizer {
	t.Helper()
	tok, err := New(enc)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestCountExactForOrdinaryText: text without long runs is counted exactly as tiktoken does.
func TestCountExactForOrdinaryText(t *testing.T) {
	tok := mustNew(t, "o200k_base")
	for _, text := range []string{
		strings.Repeat("The quick brown fox jumps over the lazy dog, twice; then it rests.\n", 200),
		strings.Repeat("我对花生过敏，请帮我订一家川菜馆，明天晚上七点，两个人。", 200),
		strings.Repeat("func main() { fmt.Println(\"hello\", 42) }\n", 100),
	} {
		if got, want := tok.Count(text), tok.count(text); got != want {
			t.Errorf("Count = %d, tiktoken %d for %.40q…", got, want, text)
		}
	}
}

// TestCountLongRunsClose: runs cut into pieces are counted within 2% of tiktoken's exact count.
func TestCountLongRunsClose(t *testing.T) {
	tok := mustNew(t, "o200k_base")
	rng := rand.New(rand.NewPCG(1, 2))
	blob := make([]byte, 3000)
	for i := range blob {
		blob[i] = byte(rng.IntN(256))
	}
	for name, text := range map[string]string{
		"repeated": strings.Repeat("a", 6000),
		"base64":   base64.StdEncoding.EncodeToString(blob),
		"hex":      hex.EncodeToString(blob),
		"cjk":      strings.Repeat("我们一起去吃饭吧", 250),
	} {
		got, want := tok.Count(text), tok.count(text)
		if d := math.Abs(float64(got-want)) / float64(want); d > 0.02 {
			t.Errorf("%s: Count = %d, tiktoken %d (%.1f%% off)", name, got, want, 100*d)
		}
	}
}

// FuzzPieces: the pieces are the text, in order, and none holds a run of one class longer than
// maxRun bytes — the property that keeps counting linear.
func FuzzPieces(f *testing.F) {
	f.Add(strings.Repeat("a", 1000))
	f.Add(strings.Repeat("我", 500) + " x")
	f.Add(strings.Repeat("=", 300) + "abc")
	f.Add("hello world")
	f.Fuzz(func(t *testing.T, text string) {
		var b strings.Builder
		pieces(text, func(p string) {
			run, class := 0, classBreak
			for i := 0; i < len(p); {
				r, size := utf8.DecodeRuneInString(p[i:])
				i += size
				c := runClass(r)
				if c == classBreak || c != class {
					run = 0
				}
				class = c
				if c != classBreak {
					if run += size; run > maxRun {
						t.Fatalf("a piece holds a run of %d bytes", run)
					}
				}
			}
			b.WriteString(p)
		})
		if b.String() != text {
			t.Fatal("the pieces are not the text")
		}
	})
}

// BenchmarkCount measures counting per MB of text of each shape (b.SetBytes: MB/s).
func BenchmarkCount(b *testing.B) {
	tok, err := New("o200k_base")
	if err != nil {
		b.Fatal(err)
	}
	const size = 1 << 20
	rng := rand.New(rand.NewPCG(3, 4))
	blob := make([]byte, size*3/4)
	for i := range blob {
		blob[i] = byte(rng.IntN(256))
	}
	fill := func(unit string) string { return strings.Repeat(unit, size/len(unit)+1)[:size] }
	for _, tc := range []struct{ name, text string }{
		{"prose", fill("The quick brown fox jumps over the lazy dog, twice; then it rests. ")},
		{"cjk", fill("我对花生过敏，请帮我订一家川菜馆，明天晚上七点，两个人。")},
		{"base64", base64.StdEncoding.EncodeToString(blob)[:size]},
		{"repeated", fill("a")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.text)))
			for b.Loop() {
				tok.Count(tc.text)
			}
		})
	}
}
