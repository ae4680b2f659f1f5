package model

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestSchemasCountedOnce: calls that miss the same schema at once remember it once and count
// its bytes once (each counted them again, and the byte bound stopped remembering early).
func TestSchemasCountedOnce(t *testing.T) {
	var s schemas
	params := make([]json.RawMessage, 50)
	for i := range params {
		params[i] = json.RawMessage(fmt.Sprintf(`{ "n" : %d, "d" : "%s" }`, i, strings.Repeat("x ", 8<<10)))
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for _, p := range params {
				if _, err := s.appendParams(nil, p); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	want := 0
	for k, v := range s.m {
		want += len(k) + len(v)
	}
	if s.bytes != want {
		t.Errorf("%d bytes counted for %d schemas of %d bytes", s.bytes, len(s.m), want)
	}
}
