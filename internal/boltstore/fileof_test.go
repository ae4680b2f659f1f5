package boltstore

import (
	"fmt"
	"testing"
)

// TestFileOf pins the file of some keys: the sessions of a data directory stay where FileOf put
// them, so a change to it would lose them. It also checks that keys spread evenly.
func TestFileOf(t *testing.T) {
	for _, tc := range []struct {
		key  string
		n    int
		want int
	}{
		{"s0", 3, 1}, {"s1", 3, 0}, {"s3", 3, 2}, {"s7", 3, 1},
		{"01KJMA0FNH7E4TABZ21HF1EH2D", 1, 0}, {"anything", 0, 0}, {"anything", -2, 0},
	} {
		if got := FileOf(tc.key, tc.n); got != tc.want {
			t.Errorf("FileOf(%q, %d) = %d, want %d", tc.key, tc.n, got, tc.want)
		}
	}
	for _, n := range []int{2, 3, 8} {
		counts := make([]int, n)
		const keys = 24000
		for i := range keys {
			counts[FileOf(fmt.Sprintf("01KJMA%020d", i*7919), n)]++
		}
		for f, c := range counts {
			if c < keys/n*9/10 || c > keys/n*11/10 {
				t.Errorf("%d files: file %d holds %d of %d keys: %v", n, f, c, keys, counts)
			}
		}
	}
}
