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
	flag.Parse()
	if flag.NArg() != 1 {
		log.Fatal("usage: wakeups [-turns N] [-depth 6] [-top 40] TRACE")
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
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
				fn := fr.Func
				if i := strings.LastIndex(fn, "/"); i >= 0 {
					fn = fn[i+1:]
				}
				frames = append(frames, fn)
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

type keyCount struct {
	key string
	n   int
}

func sorted(m map[string]int, n int) []keyCount {
	out := make([]keyCount, 0, len(m))
	for k, v := range m {
		out = append(out, keyCount{k, v})
	}
	slices.SortFunc(out, func(a, b keyCount) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	return out[:min(n, len(out))]
}
