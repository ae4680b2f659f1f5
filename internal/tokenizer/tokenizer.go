// Package tokenizer counts tokens the way OpenAI-compatible models do, with tiktoken encodings
// compiled into the binary (no download at run time).
package tokenizer

import (
	"fmt"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

// MessageOverhead is the tokens the chat format adds around each message (role and separators),
// as OpenAI documents for its chat models.
const MessageOverhead = 4

// Encodings lists the supported encoding names.
var Encodings = []string{"o200k_base", "cl100k_base", "p50k_base", "r50k_base"}

// tiktoken-go keeps its BPE loader in a package variable; set the offline one once, before any
// encoding is loaded.
var setLoader sync.Once

var (
	cacheMu sync.Mutex
	cache   = map[string]*Tokenizer{}
)

// Tokenizer counts tokens with one encoding. It is safe for concurrent use.
type Tokenizer struct {
	name string
	enc  *tiktoken.Tiktoken
}

// New returns the tokenizer for an encoding name such as "o200k_base". Loading an encoding takes
// a few hundred milliseconds, so tokenizers are shared per encoding.
func New(encoding string) (*Tokenizer, error) {
	setLoader.Do(func() { tiktoken.SetBpeLoader(loader.NewOfflineLoader()) })
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if t, ok := cache[encoding]; ok {
		return t, nil
	}
	enc, err := tiktoken.GetEncoding(encoding)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: encoding %q: %w (supported: %v)", encoding, err, Encodings)
	}
	t := &Tokenizer{name: encoding, enc: enc}
	cache[encoding] = t
	return t, nil
}

// Name is the encoding's name.
func (t *Tokenizer) Name() string { return t.name }

// Count returns the number of tokens of text, with special tokens counted as text.
func (t *Tokenizer) Count(text string) int {
	if text == "" {
		return 0
	}
	return len(t.enc.EncodeOrdinary(text))
}

// CountMessage returns the tokens a chat message of this content costs, including its overhead.
func (t *Tokenizer) CountMessage(content string) int {
	return t.Count(content) + MessageOverhead
}
