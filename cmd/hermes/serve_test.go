package main

import "testing"

func TestMemProfileRate(t *testing.T) {
	for _, tc := range []struct {
		name        string
		pprofListen string
		rate, want  int
	}{
		{"no profiler: sampling stops", "", 512 << 10, 0},
		{"profiler: the rate stays", "127.0.0.1:6060", 512 << 10, 512 << 10},
		{"profiler: a rate the operator chose (GODEBUG=memprofilerate) stays", "127.0.0.1:6060", 4096, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := memProfileRate(tc.pprofListen, tc.rate); got != tc.want {
				t.Errorf("memProfileRate(%q, %d) = %d, want %d", tc.pprofListen, tc.rate, got, tc.want)
			}
		})
	}
}
