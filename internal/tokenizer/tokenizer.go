// Package tokenizer counts tokens the way OpenAI-compatible models do, with tiktoken encodings
// compiled into the binary (no download at run time).
package tokenizer

import (
	"fmt"
	"sync"
	"unicode"
	"unicode/utf8"

	tiktoken "github.com/tiktoken-go/tokenizer"
)

// MessageOverhead is the tokens the chat format adds around each message (role and separators),
// as OpenAI documents for its chat models.
const MessageOverhead = 4

// encodings lists the supported encoding names.
var encodings = []string{"o200k_base", "cl100k_base", "p50k_base", "r50k_base"}

var (
	// cacheMu guards cache and is held while an encoding loads, so each loads once.
	cacheMu sync.Mutex
	cache   = map[string]*Tokenizer{}
)

// Tokenizer counts tokens with one encoding. It is safe for concurrent use.
type Tokenizer struct {
	name string
	// lib is the library's codec. For o200k_base it is loaded only for text preTokens does not
	// take (invalid UTF-8, DEL), which keeps the library's vocabulary map off the heap.
	lib func() (tiktoken.Codec, error)
	// vocab, when set (o200k_base), finds the pre-tokens here (pretoken.go) and encodes them
	// with its own table (vocab.go), their counts remembered in pieces.
	vocab  *vocab
	pieces pieceCounts
}

// New returns the tokenizer for an encoding name such as "o200k_base". Loading an encoding takes
// a few hundred milliseconds, so tokenizers are shared per encoding.
func New(encoding string) (*Tokenizer, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if t, ok := cache[encoding]; ok {
		return t, nil
	}
	t := &Tokenizer{name: encoding}
	if encoding == "o200k_base" {
		t.vocab = o200kVocab()
		t.lib = sync.OnceValues(func() (tiktoken.Codec, error) { return tiktoken.Get(tiktoken.O200kBase) })
	} else {
		enc, err := tiktoken.Get(tiktoken.Encoding(encoding))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: encoding %q: %w (supported: %v)", encoding, err, encodings)
		}
		t.lib = func() (tiktoken.Codec, error) { return enc, nil }
	}
	cache[encoding] = t
	return t, nil
}

// Name is the encoding's name.
func (t *Tokenizer) Name() string { return t.name }

// maxRun is the longest run of one character class (letters, or punctuation and symbols)
// encoded in one piece. tiktoken's pre-tokenizer makes such a run one pre-token and BPE merges
// can take time quadratic in the pre-token's length (with the library used before, 64,000 bytes
// of one repeated character took 3.7 s; the current one merges long pieces with a heap, but the
// bound should not depend on a library's internals), so a longer run — a repeated character, a long word-like blob, CJK text without
// punctuation, a line of "=====" — is cut into pieces at rune boundaries and each piece is
// encoded on its own: the text is split before BPE, not estimated. Counting is then linear in
// the text's length whatever its shape; it is exact for text without such runs (no ordinary
// pre-token is that long) and off by about one token per cut inside them.
const maxRun = 128

// Count returns the number of tokens of text, with special tokens counted as text.
func (t *Tokenizer) Count(text string) int {
	n := 0
	pieces(text, func(p string) {
		if t.vocab != nil && handTokenized(p) {
			n += t.countByPreToken(p)
			return
		}
		n += t.count(p)
	})
	return n
}

// count is the library's count of text, special tokens counted as text. Its error is only for
// text it cannot encode, which does not happen for the tiktoken encodings (every byte has a
// token); such text counts as its length in bytes, an upper bound.
func (t *Tokenizer) count(text string) int {
	enc, err := t.lib()
	if err != nil {
		return len(text)
	}
	n, err := enc.Count(text)
	if err != nil {
		return len(text)
	}
	return n
}

// Run classes: the pre-tokenizer keeps letters (with marks) together and punctuation and
// symbols together; blanks, digits (at most three to a pre-token) and control characters end a
// run.
const (
	classBreak = iota
	classLetter
	classPunct
)

func runClass(r rune) int {
	switch {
	case r < utf8.RuneSelf && (r == ' ' || r < 0x20 || r >= '0' && r <= '9'):
		return classBreak
	case unicode.IsLetter(r) || unicode.IsMark(r):
		return classLetter
	case unicode.IsSpace(r) || unicode.IsNumber(r) || unicode.IsControl(r):
		return classBreak
	}
	return classPunct
}

// pieces calls fn with consecutive pieces of text that together are text, cutting only inside
// runs of one class longer than maxRun bytes, at rune boundaries.
func pieces(text string, fn func(string)) {
	if text == "" {
		return
	}
	start, run, class := 0, 0, classBreak
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		c := runClass(r)
		switch {
		case c == classBreak:
			run = 0
		case c != class:
			run = size
		case run+size > maxRun:
			fn(text[start:i])
			start, run = i, size
		default:
			run += size
		}
		class = c
		i += size
	}
	fn(text[start:])
}

// CountMessage returns the tokens a chat message of this content costs, including its overhead.
func (t *Tokenizer) CountMessage(content string) int {
	return t.Count(content) + MessageOverhead
}

// CountStored returns the tokens of a stored message as a chat request carries it: its content
// and the name of the tool it calls or answers (empty for other messages). The session service
// stores this count with each message; the orchestrator counts a step the same way before the
// step is stored.
func (t *Tokenizer) CountStored(toolName, content string) int {
	return t.CountMessage(content) + t.Count(toolName)
}
