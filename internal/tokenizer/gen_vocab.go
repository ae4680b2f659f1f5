//go:build ignore

// gen_vocab writes o200k_base.tokens, the o200k_base vocabulary in rank order (each token's
// length as a uvarint, then its bytes; length 0 for a rank without a token), from the
// tiktoken library's table. Run it with `go generate ./internal/tokenizer/` after updating the
// library; TestVocabMatchesLibrary checks the file against the library.
package main

import (
	"encoding/binary"
	"log"
	"os"

	tiktoken "github.com/tiktoken-go/tokenizer"
)

// lastRank is o200k_base's highest ordinary token id; the special tokens above it are counted
// as text.
const lastRank = 199997

func main() {
	enc, err := tiktoken.Get(tiktoken.O200kBase)
	if err != nil {
		log.Fatal(err)
	}
	var out []byte
	for id := uint(0); id <= lastRank; id++ {
		tok, err := enc.Decode([]uint{id})
		if err != nil {
			tok = ""
		}
		out = binary.AppendUvarint(out, uint64(len(tok)))
		out = append(out, tok...)
	}
	if err := os.WriteFile("o200k_base.tokens", out, 0o644); err != nil {
		log.Fatal(err)
	}
}
