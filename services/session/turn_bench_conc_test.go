package session

import (
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkBoltMonolithTurnConcurrent is BenchmarkBoltMonolithTurn with 64 sessions' turns at
// once (their commits grouped), each session 30 turns long at the start. It reports the
// process's CPU a turn (cpu-µs/turn) beside the wall time a turn (ns/op).
func BenchmarkBoltMonolithTurnConcurrent(b *testing.B) {
	const sessions = 64
	s := openBolt(b, filepath.Join(b.TempDir(), "s.db"), flushOptions{delay: defaultFlushDelay, postings: defaultFlushPostings})
	defer s.Close()
	sids := make([]string, sessions)
	for j := range sids {
		sids[j] = newSession(b, s, fmt.Sprintf("user%d", j%8), time.Now()).GetId()
	}
	run := func(turns int, base int) {
		var wg sync.WaitGroup
		for j, sid := range sids {
			n := turns / sessions
			if j < turns%sessions {
				n++
			}
			wg.Go(func() {
				for i := range n {
					monolithTurn(b, s, sid, base+i*sessions+j)
				}
			})
		}
		wg.Wait()
	}
	run(30*sessions, 0)
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	run(b.N, 1<<20)
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/turn")
}
