package session

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/boltstore"
)

// BenchmarkBoltMonolithTurnConcurrent is BenchmarkBoltMonolithTurn with 64 sessions' turns at
// once (their commits grouped), each session 30 turns long at the start, in one file and spread
// over two and four (OpenBoltFiles). It reports the process's CPU a turn (cpu-µs/turn) and the
// time the files' writers were busy a turn, all of them together (writer-µs/turn), and the pages
// the files' commits wrote a turn (pages/turn), beside the wall time a turn (ns/op).
func BenchmarkBoltMonolithTurnConcurrent(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) { benchTurnConcurrent(b, n) })
	}
}

func benchTurnConcurrent(b *testing.B, n int) {
	const sessions = 64
	files, err := OpenBoltFiles(b.TempDir(), n)
	if err != nil {
		b.Fatal(err)
	}
	all := NewFiles(files)
	defer func() { _ = all.Close() }()
	sids := make([]string, sessions)
	for j := range sids {
		sids[j] = newSession(b, all, fmt.Sprintf("user%d", j%8), time.Now()).GetId()
	}
	busy := func() time.Duration {
		var d time.Duration
		for _, f := range files {
			d += f.group.Busy()
		}
		return d
	}
	pages := func() int64 {
		var n int64
		for _, f := range files {
			st := f.db.Stats()
			n += st.TxStats.GetWrite()
		}
		return n
	}
	run := func(turns int, base int) {
		var wg sync.WaitGroup
		for j, sid := range sids {
			n := turns / sessions
			if j < turns%sessions {
				n++
			}
			file := files[boltstore.FileOf(sid, len(files))]
			wg.Go(func() {
				for i := range n {
					monolithTurn(b, file, sid, base+i*sessions+j)
				}
			})
		}
		wg.Wait()
	}
	run(30*sessions, 0)
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	busyBefore, pagesBefore := busy(), pages()
	b.ResetTimer()
	run(b.N, 1<<20)
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/turn")
	b.ReportMetric(float64((busy()-busyBefore).Microseconds())/float64(b.N), "writer-µs/turn")
	b.ReportMetric(float64(pages()-pagesBefore)/float64(b.N), "pages/turn")
}
