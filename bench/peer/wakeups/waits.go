package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// turnFrame marks a stack inside a turn.
const turnFrame = "orchestrator.(*Service).RunTurn"

// handler is what handlerWaits keeps of a goroutine.
type handler struct {
	state trace.GoState
	since trace.Time
	// block is where it blocked (when waiting); inTurn says that block was inside a turn.
	block  string
	inTurn bool
	// start and turn are the current turn's start and number (for -timeline).
	start trace.Time
	turn  int
}

// handlerWaits reads the trace and writes, per turn, the time the RunTurn handlers spent
// running, runnable, and waiting by where they blocked. A turn starts when a goroutine that was
// not in a turn first blocks inside one (its run began the turn) and lasts until it blocks
// outside one again. The first timeline turns' blocking events are written as they come.
func handlerWaits(r io.Reader, w io.Writer, depth, top, timeline int) error {
	tr, err := trace.NewReader(r)
	if err != nil {
		return err
	}
	gs := map[trace.GoID]*handler{}
	waits := map[string]time.Duration{}
	waitN := map[string]int{}
	var running, runnable time.Duration
	turns := 0
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		g := gs[id]
		if g == nil {
			g = &handler{state: from, since: ev.Time()}
			gs[id] = g
		}
		if g.inTurn {
			d := time.Duration(ev.Time() - g.since)
			switch g.state {
			case trace.GoRunning:
				running += d
			case trace.GoRunnable:
				runnable += d
			case trace.GoWaiting, trace.GoSyscall:
				waits[g.block] += d
				waitN[g.block]++
			}
		}
		if g.state == trace.GoRunning && (to == trace.GoWaiting || to == trace.GoSyscall) {
			key, in := blockedAt(st.Stack, depth)
			if in && !g.inTurn {
				turns++
				g.start, g.turn = g.since, turns
			}
			if to == trace.GoSyscall {
				key = "syscall: " + key
			}
			g.block, g.inTurn = key, in
			if in && g.turn <= timeline {
				fmt.Fprintf(w, "turn %d  %8.1f µs  blocks after running %6.1f µs: %s\n",
					g.turn, micros(ev.Time()-g.start), micros(ev.Time()-g.since), key)
			}
		}
		g.state, g.since = to, ev.Time()
	}
	n := float64(max(turns, 1))
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	fmt.Fprintf(w, "\n%d turns; a turn's handler, per turn: running %.1f µs, runnable %.1f µs\n\nwaiting, by where it blocked (µs and times a turn):\n",
		turns, per(running), per(runnable))
	for _, kv := range sorted(waits, top) {
		fmt.Fprintf(w, "%8.1f  %6.2f  %s\n", per(kv.n), float64(waitN[kv.key])/n, kv.key)
	}
	return nil
}

// blockedAt names a blocking stack by its first depth frames outside the runtime and reports
// whether it is inside a turn.
func blockedAt(s trace.Stack, depth int) (string, bool) {
	var names []string
	in := false
	for f := range s.Frames() {
		in = in || strings.Contains(f.Func, turnFrame)
		if len(names) < depth && !strings.HasPrefix(f.Func, "runtime.") && !strings.HasPrefix(f.Func, "internal/") && !strings.HasPrefix(f.Func, "sync.") {
			names = append(names, shortFunc(f.Func))
		}
	}
	return strings.Join(names, " < "), in
}

func micros(t trace.Time) float64 { return float64(t) / 1e3 }
