package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// config is the harness's settings (flags).
type config struct {
	systems    []string
	repeats    int
	seqSess    int // sequential phase: sessions, one after another
	seqTurns   int // turns per session
	concSess   int // concurrent phase: sessions at once
	concTurns  int // turns per concurrent session
	roundRobin bool
	warmup     int
	fsyncTurns int
	hermesBin  string
	baseline   string
	// hermesEnv and baselineEnv are added to the environment of Hermes (-hermes) and of the
	// baseline (-baseline): the same binary with two settings is an A/B too.
	hermesEnv, baselineEnv []string
	adkBin                 string
	redisURL               string
	natsURL                string
	dir                    string
	settle                 time.Duration
	// The long phase (long.go): longSessions sessions of longTurns turns, CPU read per window of
	// longWindow turns; longOnly skips the other phases; pprofDir, when set, profiles Hermes
	// monolithic's first and last window.
	longTurns, longSessions, longWindow int
	longOnly                            bool
	pprofDir                            string
	pprofSeconds                        int
	// traceSeconds, with pprofDir, adds an execution trace of the concurrent phase's start.
	traceSeconds int
}

// The phases of one system run.
const (
	phaseSeq  = "sequential"  // seqSess sessions × seqTurns turns, one session after another: back to back on one session
	phaseRR   = "round-robin" // the same turns, one at a time, spread: turn t of every session before turn t+1
	phaseConc = "concurrent"  // concSess sessions at once, each concTurns turns back to back
)

// phase is what one phase measured.
type phase struct {
	turns  int
	failed int
	err    error // the first failure
	lat    []time.Duration
	wall   time.Duration            // first turn sent to last answer received
	start  time.Time                // the first turn sent
	end    time.Time                // the work after the turns settled
	cpu    map[string]time.Duration // per process, from the first turn to the end of the settle
	self   time.Duration            // the harness's CPU over the same window
	steal  float64                  // the machine's steal time over the same window, a fraction of its CPU time
	shared map[string]bool
	names  []string // the processes, in the system's order
}

// run is one system's run in one repeat.
type run struct {
	system string
	phases map[string]*phase
	rss    int64 // summed VmRSS of the server processes at the end
	hwm    int64 // summed VmHWM (peak RSS)
	anon   int64 // summed RssAnon at the end (the private part of rss)
	calls  map[string]int64
	// syncs is set on the fsync probe's runs.
	syncs *syncStats
	// long is the long phase's windows, when it ran.
	long []window
}

// lane is a list of (session, turn) to run one after another; a phase's lanes run at once.
type lane [][2]int

func plan(name string, c config) (sessions int, lanes []lane) {
	switch name {
	case phaseSeq:
		var l lane
		for s := range c.seqSess {
			for t := range c.seqTurns {
				l = append(l, [2]int{s, t})
			}
		}
		return c.seqSess, []lane{l}
	case phaseRR:
		var l lane
		for t := range c.seqTurns {
			for s := range c.seqSess {
				l = append(l, [2]int{s, t})
			}
		}
		return c.seqSess, []lane{l}
	default:
		for s := range c.concSess {
			var l lane
			for t := range c.concTurns {
				l = append(l, [2]int{s, t})
			}
			lanes = append(lanes, l)
		}
		return c.concSess, lanes
	}
}

// runSystem starts one system on a fresh directory and its own instant model, runs the warm-up
// and the phases, and stops it.
func runSystem(ctx context.Context, c config, kind string, repeat int, strace bool, log io.Writer) (*run, error) {
	var calls modelCalls
	model, err := scripted.New(instantModel(&calls))
	if err != nil {
		return nil, err
	}
	defer model.Close()
	dir := filepath.Join(c.dir, fmt.Sprintf("%s-%d", kind, repeat))
	if strace {
		dir += "-strace"
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	e := env{hermesBin: c.hermesBin, baselineBin: c.baseline, adkBin: c.adkBin, modelURL: model.URL(), dir: dir, redisURL: c.redisURL, natsURL: c.natsURL}
	switch kind {
	case hermesMono, hermesMicro:
		e.env = append(e.env, c.hermesEnv...)
	case baseMono, baseMicro:
		e.env = append(e.env, c.baselineEnv...)
	}
	if strace {
		e.strace = filepath.Join(dir, "strace.txt")
	}
	var prof *profiler
	if c.pprofDir != "" && !strace && (kind == hermesMono || kind == baseMono) {
		addr, err := cluster.FreeAddr()
		if err != nil {
			return nil, err
		}
		// The contention profiles too: blocking sampled once per 100 µs blocked, one contended
		// mutex in 10 (a binary without these flags ignores the variables).
		e.env = append(e.env, "HERMES_PPROF_LISTEN="+addr, "HERMES_PPROF_BLOCK_RATE=100000", "HERMES_PPROF_MUTEX_FRACTION=10")
		prof = &profiler{addr: addr, dir: c.pprofDir, seconds: c.pprofSeconds}
	}
	sys, err := startSystem(ctx, kind, e)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	defer sys.close()

	tag := fmt.Sprintf("%s-%d-%s", kind, repeat, strconv.FormatInt(time.Now().UnixNano(), 36))
	if c.warmup > 0 {
		w := c
		w.seqSess, w.seqTurns = 1, c.warmup
		if _, err := runPhase(ctx, w, sys, phaseSeq, tag+"-warm", &calls); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", kind, err)
		}
		settle(ctx, &calls, c.settle)
	}
	r := &run{system: kind, phases: map[string]*phase{}}
	names := []string{phaseSeq, phaseRR, phaseConc}
	if repeat%2 == 1 {
		// The phase that runs first after the start pays the processes' first minutes (heaps
		// growing, pools filling): alternate which of the two compared phases that is.
		names = []string{phaseRR, phaseSeq, phaseConc}
	}
	if !c.roundRobin {
		names = []string{phaseSeq, phaseConc}
	}
	if c.longOnly {
		names = nil
	}
	if strace {
		names = []string{phaseSeq}
	}
	for _, name := range names {
		// With -pprof, the concurrent phase is profiled too (CPU, from its start for
		// -pprof-seconds; allocations as two snapshots around it).
		var cpuProf sync.WaitGroup
		var cpuErr error
		base := ""
		if prof != nil && name == phaseConc {
			base = filepath.Join(prof.dir, fmt.Sprintf("%s-conc%d", tag, c.concSess))
			if err := prof.get(ctx, "allocs", base+"-allocs0.pb.gz"); err != nil {
				return nil, err
			}
			cpuProf.Go(func() {
				cpuErr = prof.get(ctx, fmt.Sprintf("profile?seconds=%d", prof.seconds), base+"-cpu.pb.gz")
			})
			// An execution trace, for the goroutine wake-ups of a turn (bench/peer/wakeups). It
			// slows the process: take CPU figures from a run without it.
			if c.traceSeconds > 0 {
				cpuProf.Go(func() {
					if err := prof.get(ctx, fmt.Sprintf("trace?seconds=%d", c.traceSeconds), base+"-trace.out"); err != nil {
						fmt.Fprintf(log, "  trace: %v\n", err)
					}
				})
			}
			// Where goroutines wait (off CPU), over the same window; empty where the rates are off.
			for _, what := range []string{"block", "mutex"} {
				cpuProf.Go(func() {
					if err := prof.get(ctx, fmt.Sprintf("%s?seconds=%d", what, prof.seconds), base+"-"+what+".pb.gz"); err != nil {
						fmt.Fprintf(log, "  %s profile: %v\n", what, err)
					}
				})
			}
		}
		p, err := runPhase(ctx, c, sys, name, tag, &calls)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		if base != "" {
			if err := prof.get(ctx, "allocs", base+"-allocs1.pb.gz"); err != nil {
				return nil, err
			}
			cpuProf.Wait()
			if cpuErr != nil {
				return nil, cpuErr
			}
		}
		r.phases[name] = p
		cpu := fmt.Sprintf("CPU/turn %5.1f ms", msf(p.serverCPU()/time.Duration(max(p.turns, 1))))
		if strace {
			cpu = "(under strace)"
		}
		fmt.Fprintf(log, "  %-12s %-11s %4d turns  p50 %6.1f ms  p99 %6.1f ms  %6.1f turns/s  %s\n",
			kind, name, p.turns, msf(pct(p.lat, 50)), msf(pct(p.lat, 99)), p.rate(), cpu)
		if p.failed > 0 {
			fmt.Fprintf(log, "  %-12s %-11s %d turns FAILED, the first: %v\n", kind, name, p.failed, p.err)
		}
	}
	if c.longTurns > 0 && !strace {
		if r.long, err = runLong(ctx, c, sys, tag, &calls, prof, log); err != nil {
			return nil, fmt.Errorf("%s long: %w", kind, err)
		}
		first, last := r.long[0], r.long[len(r.long)-1]
		fmt.Fprintf(log, "  %-12s %-11s turns %d–%d CPU/turn %5.2f ms p50 %5.2f ms; turns %d–%d CPU/turn %5.2f ms p50 %5.2f ms\n",
			kind, "long", first.from, first.to, first.cpuPerTurn(), msf(pct(first.lat, 50)), last.from, last.to, last.cpuPerTurn(), msf(pct(last.lat, 50)))
	}
	if strace {
		p := r.phases[phaseSeq]
		st, err := parseSyncs(e.strace, dir, p.start, p.end)
		if err != nil {
			return nil, err
		}
		r.syncs = &st
	}
	for _, p := range sys.procs() {
		if p.shared {
			continue
		}
		if m, err := procMem(p.pid); err == nil {
			r.rss += m.rss
			r.hwm += m.hwm
			r.anon += m.anon
		}
	}
	r.calls = map[string]int64{
		"assistant": calls.assistant.Load(), "extraction": calls.extraction.Load(),
		"summary": calls.summary.Load(), "other": calls.other.Load(),
	}
	return r, nil
}

// runPhase creates the phase's sessions (not timed), then runs its lanes and waits for the
// system's work after the turns (memory extraction) to settle before reading the CPU.
func runPhase(ctx context.Context, c config, sys system, name, tag string, calls *modelCalls) (*phase, error) {
	n, lanes := plan(name, c)
	users := make([]string, n)
	sessions := make([]string, n)
	for i := range n {
		users[i] = fmt.Sprintf("peer-%s-%s-%d", tag, name, i)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := sys.newSession(sctx, users[i])
		cancel()
		if err != nil {
			return nil, err
		}
		sessions[i] = s
	}
	ps := sys.procs()
	p := &phase{shared: map[string]bool{}}
	for _, pr := range ps {
		p.shared[pr.name] = pr.shared
		p.names = append(p.names, pr.name)
	}
	cpu0, self0 := cpuSnapshot(ps), selfCPU()
	total0, steal0 := machineTicks()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for li, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, st := range l {
				s, t := st[0], st[1]
				text := turnText(s+li+2, t+3, t)
				t0 := time.Now()
				tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				err := sys.turn(tctx, users[s], sessions[s], text)
				cancel()
				d := time.Since(t0)
				mu.Lock()
				p.turns++
				if err != nil {
					p.failed++
					if p.err == nil {
						p.err = err
					}
				} else {
					p.lat = append(p.lat, d)
				}
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	p.start, p.wall = start, time.Since(start)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	settle(ctx, calls, c.settle)
	cpu1, self1 := cpuSnapshot(ps), selfCPU()
	if total1, steal1 := machineTicks(); total1 > total0 {
		p.steal = float64(steal1-steal0) / float64(total1-total0)
	}
	p.end = time.Now()
	p.cpu = map[string]time.Duration{}
	for k, v := range cpu1 {
		if b, ok := cpu0[k]; ok {
			p.cpu[k] = v - b
		}
	}
	p.self = self1 - self0
	if p.failed == p.turns {
		return nil, fmt.Errorf("every turn failed, the first: %w", p.err)
	}
	return p, nil
}

// settle waits until the model has had no request for the settle period (at most 20 periods),
// so the work a system does after its turns — Hermes extracts memories from each finished
// turn — is counted in the phase that caused it.
func settle(ctx context.Context, calls *modelCalls, quiet time.Duration) {
	if quiet <= 0 {
		return
	}
	total := func() int64 {
		return calls.assistant.Load() + calls.extraction.Load() + calls.summary.Load() + calls.other.Load()
	}
	last := total()
	for range 20 {
		t := time.NewTimer(quiet)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now := total()
		if now == last {
			return
		}
		last = now
	}
}

// serverCPU is the CPU of the system's own processes (not the shared Redis/NATS servers).
func (p *phase) serverCPU() time.Duration {
	var d time.Duration
	for k, v := range p.cpu {
		if !p.shared[k] {
			d += v
		}
	}
	return d
}

// sharedCPU is the CPU of the shared backend servers in the window (other work included).
func (p *phase) sharedCPU() time.Duration {
	var d time.Duration
	for k, v := range p.cpu {
		if p.shared[k] {
			d += v
		}
	}
	return d
}

func (p *phase) rate() float64 {
	if p.wall <= 0 {
		return 0
	}
	return float64(len(p.lat)) / p.wall.Seconds()
}
