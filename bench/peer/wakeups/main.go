// Command wakeups reads a Go execution trace (hermes serve's /debug/pprof/trace, or the
// harness' -trace-seconds) and counts goroutine wake-ups, each a goroutine made runnable after
// it waited, by the stack of the goroutine that woke it. On a few shared cores each wake-up costs
// a hand-off between threads, often a futex call, and the scheduler's search for work: the part
// of a turn's CPU that profiles file under "scheduler".
//
//	wakeups [-turns N] [-depth 6] [-top 40] TRACE
//
// With -turns (the turns inside the trace's window) the counts are also given per turn. The
// groups put each wake-up under the first of its frames that names a part of the process (NATS,
// the model's HTTP client, gRPC, the work pool, bbolt), else "other".
//
//	wakeups -waits [-timeline N] [-depth 4] [-top 40] TRACE
//
// With -waits it accounts instead for the time of the goroutines that serve RunTurn, from each
// turn's start to its end: running, runnable, and waiting by the stack where they blocked (a
// model call, a commit's fdatasync, a hand-off), per turn. That is a sequential turn's latency
// as its handler lives it; -timeline prints each blocking event of the first N turns.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strings"

	"golang.org/x/exp/trace"
)

// groups name the parts of the process a waking stack may belong to, first match wins.
var groups = []struct{ name, frame string }{
	{"NATS (client and embedded server)", "nats-io/"},
	{"model HTTP client (net/http)", "net/http."},
	{"gRPC transport", "google.golang.org/grpc"},
	{"work pool hand-offs", "internal/workpool."},
	{"bbolt group commit", "internal/boltstore."},
}

func main() {
	turns := flag.Int("turns", 0, "turns inside the trace's window (0: no per-turn column)")
	depth := flag.Int("depth", 6, "frames of the waking stack to show")
	top := flag.Int("top", 40, "stacks to list")
	waits := flag.Bool("waits", false, "account for the RunTurn handlers' time instead (see the package comment)")
	timeline := flag.Int("timeline", 0, "with -waits: print the blocking events of the first N turns")
	flag.Parse()
	if flag.NArg() != 1 {
		log.Fatal("usage: wakeups [-turns N] [-depth 6] [-top 40] TRACE, or wakeups -waits [-timeline N] [-depth 4] [-top 40] TRACE")
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if *waits {
		d := *depth
		if !isSet("depth") {
			d = 4
		}
		if err := handlerWaits(f, os.Stdout, d, *top, *timeline); err != nil {
			log.Fatal(err)
		}
		return
	}
	byStack, byGroup, total, err := count(f, *depth)
	if err != nil {
		log.Fatal(err)
	}
	per := func(n int) string {
		if *turns <= 0 {
			return ""
		}
		return fmt.Sprintf("%7.1f a turn", float64(n)/float64(*turns))
	}
	fmt.Printf("%d wake-ups %s\n\nby part:\n", total, per(total))
	for _, kv := range sorted(byGroup, len(byGroup)) {
		fmt.Printf("%7d %5.1f%% %s  %s\n", kv.n, 100*float64(kv.n)/float64(max(total, 1)), per(kv.n), kv.key)
	}
	fmt.Printf("\nby waking stack (innermost first):\n")
	for _, kv := range sorted(byStack, *top) {
		fmt.Printf("%7d %s  %s\n", kv.n, per(kv.n), kv.key)
	}
}

// count reads the trace and counts wake-ups by the waking stack (depth frames) and by group.
func count(r io.Reader, depth int) (byStack, byGroup map[string]int, total int, err error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, nil, 0, err
	}
	byStack, byGroup = map[string]int{}, map[string]int{}
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			return byStack, byGroup, total, nil
		}
		if err != nil {
			return nil, nil, 0, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		if from, to := st.Goroutine(); from != trace.GoWaiting || to != trace.GoRunnable {
			continue
		}
		total++
		var frames []string
		group := "other"
		for fr := range ev.Stack().Frames() {
			if group == "other" {
				for _, g := range groups {
					if strings.Contains(fr.Func, g.frame) {
						group = g.name
						break
					}
				}
			}
			if len(frames) < depth {
				frames = append(frames, shortFunc(fr.Func))
			}
		}
		key := strings.Join(frames, " < ")
		if key == "" {
			key = "(no stack: the network poller or a timer)"
			group = "network poller and timers"
		}
		byStack[key]++
		byGroup[group]++
	}
}

type keyCount[N cmp.Ordered] struct {
	key string
	n   N
}

// sorted returns m's n largest entries, largest first.
func sorted[N cmp.Ordered](m map[string]N, n int) []keyCount[N] {
	out := make([]keyCount[N], 0, len(m))
	for k, v := range m {
		out = append(out, keyCount[N]{k, v})
	}
	slices.SortFunc(out, func(a, b keyCount[N]) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	return out[:min(n, len(out))]
}

// shortFunc is a function's name without its package path.
func shortFunc(fn string) string {
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		return fn[i+1:]
	}
	return fn
}

// isSet reports whether the flag was given.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
