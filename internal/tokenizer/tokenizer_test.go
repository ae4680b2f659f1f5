package tokenizer

import "testing"

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
