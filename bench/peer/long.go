package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The long phase: whether a turn's cost stays flat as a session grows. longSessions sessions
// each run longTurns turns, round-robin (turn t of every session before turn t+1), and the CPU
// of the system's processes is read per window of longWindow turns of every session, after the
// window's work (memory extraction) has settled. One session is what the issue measures; more
// sessions give a window enough turns to profile.

// window is one window of the long phase.
type window struct {
	from, to int // turn numbers in every session, 1-based, inclusive
	turns    int
	failed   int
	cpu      time.Duration // the system's own processes, the window and its settle
	reqBytes int64         // the bodies of the window's assistant requests to the model
	// allocBytes and gcs are the Go runtime's bytes allocated and GC cycles in the window
	// (Hermes monolithic: go_memstats_alloc_bytes_total and go_gc_duration_seconds_count of its
	// /metrics); -1 where not read.
	allocBytes, gcs float64
	lat             []time.Duration
}

func (w window) cpuPerTurn() float64 { return msf(w.cpu) / float64(max(w.turns, 1)) }

// profiler fetches Go profiles from a Hermes process's --pprof-listen around chosen windows.
type profiler struct {
	addr    string // host:port of /debug/pprof/
	dir     string
	seconds int // length of a window's CPU profile
}

// get saves /debug/pprof/<what> to file.
func (p *profiler) get(ctx context.Context, what, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof %s: %s", what, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// runLong runs the long phase on sys. With prof set, the first and the last window are
// profiled: allocations as two snapshots of /debug/pprof/allocs (compare with `go tool pprof
// -base`), CPU as one profile of prof.seconds started with the window (the window should end
// within it; the idle rest adds next to nothing).
func runLong(ctx context.Context, c config, sys system, tag string, calls *modelCalls, prof *profiler, log io.Writer) ([]window, error) {
	users := make([]string, c.longSessions)
	sessions := make([]string, c.longSessions)
	for i := range users {
		users[i] = fmt.Sprintf("peer-%s-long-%d", tag, i)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := sys.newSession(sctx, users[i])
		cancel()
		if err != nil {
			return nil, err
		}
		sessions[i] = s
	}
	ps := sys.procs()
	nwin := (c.longTurns + c.longWindow - 1) / c.longWindow
	var out []window
	for wi := range nwin {
		w := window{from: wi*c.longWindow + 1, to: min((wi+1)*c.longWindow, c.longTurns)}
		profiled := prof != nil && (wi == 0 || wi == nwin-1)
		var cpuProf sync.WaitGroup
		var cpuErr error
		base := ""
		if profiled {
			base = filepath.Join(prof.dir, fmt.Sprintf("%s-turns%03d-%03d", tag, w.from, w.to))
			if err := prof.get(ctx, "allocs", base+"-allocs0.pb.gz"); err != nil {
				return nil, err
			}
			cpuProf.Go(func() {
				cpuErr = prof.get(ctx, fmt.Sprintf("profile?seconds=%d", prof.seconds), base+"-cpu.pb.gz")
			})
			// The profile starts when the request arrives: give it a moment.
			time.Sleep(100 * time.Millisecond)
		}
		alloc0, gc0 := runtimeCounters(ctx, sys)
		cpu0, bytes0 := cpuSnapshot(ps), calls.assistantBytes.Load()
		start := time.Now()
		for t := w.from - 1; t < w.to; t++ {
			for s := range sessions {
				t0 := time.Now()
				tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				err := sys.turn(tctx, users[s], sessions[s], turnText(s+2, t+3, t))
				cancel()
				w.turns++
				if err != nil {
					w.failed++
					fmt.Fprintf(log, "  long: turn %d of session %d failed: %v\n", t+1, s, err)
					continue
				}
				w.lat = append(w.lat, time.Since(t0))
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		took := time.Since(start)
		settle(ctx, calls, c.settle)
		cpu1 := cpuSnapshot(ps)
		w.reqBytes = calls.assistantBytes.Load() - bytes0
		w.allocBytes, w.gcs = -1, -1
		if alloc1, gc1 := runtimeCounters(ctx, sys); alloc0 >= 0 && alloc1 >= 0 {
			w.allocBytes, w.gcs = alloc1-alloc0, gc1-gc0
		}
		for _, p := range ps {
			if !p.shared {
				w.cpu += cpu1[p.name] - cpu0[p.name]
			}
		}
		if profiled {
			if err := prof.get(ctx, "allocs", base+"-allocs1.pb.gz"); err != nil {
				return nil, err
			}
			cpuProf.Wait()
			if cpuErr != nil {
				return nil, cpuErr
			}
			if took > time.Duration(prof.seconds)*time.Second {
				fmt.Fprintf(log, "  long: window %d–%d took %s, longer than its %d s CPU profile\n", w.from, w.to, took.Round(time.Millisecond), prof.seconds)
			}
		}
		out = append(out, w)
	}
	return out, nil
}

// reportLong prints each system's CPU per turn and p50 by window, medians over the repeats, and
// the last window against the first.
func reportLong(out io.Writer, c config, runs map[string][]*run) {
	fmt.Fprintf(out, "\n### Long sessions: %d sessions × %d turns, round-robin; per window of %d turns, medians of the repeats\n\n", c.longSessions, c.longTurns, c.longWindow)
	var head []string
	var nwin int
	for _, s := range c.systems {
		for _, r := range runs[s] {
			nwin = max(nwin, len(r.long))
		}
	}
	for wi := range nwin {
		head = append(head, fmt.Sprintf("%d–%d", wi*c.longWindow+1, min((wi+1)*c.longWindow, c.longTurns)))
	}
	if nwin == 0 {
		return
	}
	fmt.Fprintf(out, "| system | figure | %s | last / first |\n|---|---|%s---|\n", strings.Join(head, " | "), strings.Repeat("---|", nwin))
	perTurn := func(w window, v float64) float64 { return v / float64(max(w.turns, 1)) }
	figures := []struct {
		name string
		get  func(w window) (float64, bool)
	}{
		{"CPU per turn ms", func(w window) (float64, bool) { return w.cpuPerTurn(), true }},
		{"p50 ms", func(w window) (float64, bool) { return msf(pct(w.lat, 50)), len(w.lat) > 0 }},
		{"model request KB per turn", func(w window) (float64, bool) { return perTurn(w, float64(w.reqBytes)/1024), true }},
		{"KB allocated per turn", func(w window) (float64, bool) { return perTurn(w, w.allocBytes/1024), w.allocBytes >= 0 }},
		{"GC cycles per 100 turns", func(w window) (float64, bool) { return perTurn(w, 100*w.gcs), w.gcs >= 0 }},
	}
	for _, s := range c.systems {
		for _, f := range figures {
			var cells []string
			var first, last float64
			for wi := range nwin {
				var vs []float64
				for _, r := range runs[s] {
					if wi < len(r.long) {
						if v, ok := f.get(r.long[wi]); ok {
							vs = append(vs, v)
						}
					}
				}
				if len(vs) == 0 {
					break
				}
				m := median(vs)
				if wi == 0 {
					first = m
				}
				last = m
				cells = append(cells, fmt.Sprintf("%.2f", m))
			}
			if len(cells) != nwin {
				continue
			}
			r := "—"
			if first > 0 {
				r = fmt.Sprintf("%.2f", last/first)
			}
			fmt.Fprintf(out, "| %s | %s | %s | %s |\n", s, f.name, strings.Join(cells, " | "), r)
		}
	}
	reportLongRatios(out, c, runs, nwin)
}

// reportLongRatios prints Hermes monolithic against adk-go in memory per window and over the
// whole long phase: CPU per turn and p50 of each, the ratio of their medians over the repeats.
// adk-go sends a session's whole history with every turn; Hermes a bounded context.
func reportLongRatios(out io.Writer, c config, runs map[string][]*run, nwin int) {
	a, b := runs[hermesMono], runs[adkMemory]
	if len(a) == 0 || len(b) == 0 {
		return
	}
	// at is the median over the repeats of a figure of the windows [from, to) of each; a repeat
	// with fewer windows is left out.
	at := func(rs []*run, from, to int, f func([]window) float64) float64 {
		var vs []float64
		for _, r := range rs {
			if to <= len(r.long) {
				vs = append(vs, f(r.long[from:to]))
			}
		}
		return median(vs)
	}
	cpu := func(ws []window) float64 {
		var d time.Duration
		n := 0
		for _, w := range ws {
			d, n = d+w.cpu, n+w.turns
		}
		return msf(d) / float64(max(n, 1))
	}
	p50 := func(ws []window) float64 {
		var lat []time.Duration
		for _, w := range ws {
			lat = append(lat, w.lat...)
		}
		return msf(pct(lat, 50))
	}
	fmt.Fprintf(out, "\nHermes monolithic / adk-go in memory, per window and over the whole phase:\n\n| figure |")
	for wi := range nwin {
		fmt.Fprintf(out, " %d–%d |", wi*c.longWindow+1, min((wi+1)*c.longWindow, c.longTurns))
	}
	fmt.Fprintf(out, " all |\n|---|%s---|\n", strings.Repeat("---|", nwin))
	for _, f := range []struct {
		name string
		get  func([]window) float64
	}{{"CPU per turn", cpu}, {"p50", p50}} {
		fmt.Fprintf(out, "| %s |", f.name)
		cell := func(from, to int) {
			if x, y := at(a, from, to, f.get), at(b, from, to, f.get); y > 0 {
				fmt.Fprintf(out, " %.2f |", x/y)
			} else {
				fmt.Fprintf(out, " — |")
			}
		}
		for wi := range nwin {
			cell(wi, wi+1)
		}
		cell(0, nwin) // the whole phase
		fmt.Fprintln(out)
	}
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// runtimeCounters reads the Go runtime's allocation and GC counters from a Hermes monolith's
// /metrics; -1, -1 for other systems or when they cannot be read.
func runtimeCounters(ctx context.Context, sys system) (alloc, gcs float64) {
	h, ok := sys.(*hermes)
	if !ok || h.metrics == "" {
		return -1, -1
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.metrics+"/metrics", nil)
	if err != nil {
		return -1, -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1, -1
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1, -1
	}
	alloc, gcs = -1, -1
	for _, line := range strings.Split(string(body), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_alloc_bytes_total":
			alloc = v
		case "go_gc_duration_seconds_count":
			gcs = v
		}
	}
	if alloc < 0 || gcs < 0 {
		return -1, -1
	}
	return alloc, gcs
}
