// Command peer runs one benchmark turn — user message, a calculator tool call, the tool, the
// answer — through Hermes (monolithic and microservices) and through Google's adk-go
// (runner + llmagent + a function tool, in-memory and SQLite sessions) against one instant
// OpenAI-compatible model (the scripted model, in this process), interleaved, and prints
// latency, throughput, CPU per turn and RSS of every process as Markdown tables with the
// Hermes / adk-go ratios.
//
// It is a module of its own, so adk-go stays out of Hermes' go.mod. Run it from its directory:
//
//	cd bench/peer && go run . [-hermes /path/to/hermes] [-repeats 4]
//
// Without -hermes it builds ./cmd/hermes of the repository it sits in. adk-go runs in a child
// process, the adkpeer command (./adkpeer, a module of its own, built the same way unless -adk
// names a binary), so that its CPU and RSS are read from /proc like Hermes' and neither side's
// dependencies are linked into the other's process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

func main() {
	var c config
	var systems string
	var keep bool
	flag.StringVar(&systems, "systems", strings.Join(allSystems, ","), "systems to run, comma-separated: "+strings.Join(allSystems, ", "))
	flag.IntVar(&c.repeats, "repeats", 4, "repeats; the systems run interleaved in each, in a rotated order; an even number, so that the sequential and round-robin phases each run first equally often")
	flag.IntVar(&c.seqSess, "seq-sessions", 10, "sequential phase: sessions, one after another")
	flag.IntVar(&c.seqTurns, "seq-turns", 50, "sequential and round-robin phases: turns per session")
	flag.IntVar(&c.concSess, "conc-sessions", 8, "concurrent phase: sessions at once")
	flag.IntVar(&c.concTurns, "conc-turns", 25, "concurrent phase: turns per session, back to back")
	flag.BoolVar(&c.roundRobin, "round-robin", true, "run the round-robin phase (the sequential phase's turns spread across its sessions)")
	flag.IntVar(&c.warmup, "warmup", 20, "warm-up turns on a session of their own before the phases (not measured)")
	flag.IntVar(&c.fsyncTurns, "fsync-turns", 100, "turns of the strace run that counts sync calls of Hermes monolithic and adk-go SQLite (0: no such run)")
	flag.DurationVar(&c.settle, "settle", 300*time.Millisecond, "after a phase, wait until the model has been idle this long (Hermes extracts memories after each turn) before reading CPU")
	flag.StringVar(&c.hermesBin, "hermes", "", "hermes binary; empty builds ./cmd/hermes of this repository")
	flag.StringVar(&c.baseline, "baseline", "", "a second hermes binary (another build), run as the systems base-mono and base-micro, which -systems then includes by default; the report gives new / baseline ratios")
	flag.Func("env", "KEY=VALUE added to the environment of Hermes (hermes-mono, hermes-micro); repeatable", envFlag(&c.hermesEnv))
	flag.Func("baseline-env", "KEY=VALUE added to the environment of the baseline (base-mono, base-micro); repeatable", envFlag(&c.baselineEnv))
	flag.StringVar(&c.adkBin, "adk", "", "adkpeer binary; empty builds ./adkpeer")
	flag.StringVar(&c.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "microservices: Redis (keys under a random prefix, removed afterwards)")
	flag.StringVar(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "microservices: NATS with JetStream (a random namespace, removed afterwards)")
	flag.IntVar(&c.longTurns, "long-turns", 0, "long phase: turns per session (0: no long phase); reports CPU per turn and p50 per window, to show whether a turn's cost grows with its session")
	flag.IntVar(&c.longSessions, "long-sessions", 1, "long phase: sessions, run round-robin")
	flag.IntVar(&c.longWindow, "long-window", 25, "long phase: turns per session in one measured window")
	flag.BoolVar(&c.longOnly, "long-only", false, "run only the warm-up and the long phase")
	flag.StringVar(&c.pprofDir, "pprof", "", "directory for CPU and allocation profiles of Hermes monolithic's concurrent phase (block and mutex profiles too) and its first and last long-phase windows (hermes serve --pprof-listen)")
	flag.IntVar(&c.pprofSeconds, "pprof-seconds", 10, "length of a profiled window's CPU profile; the window should end within it")
	flag.IntVar(&c.traceSeconds, "trace-seconds", 0, "with -pprof: also an execution trace of this many seconds from the concurrent phase's start (read it with ./wakeups); 0: none")
	flag.BoolVar(&keep, "keep", false, "keep the temporary directory (logs, data, strace output)")
	selfProfile := flag.String("self-pprof", "", "file for a CPU profile of this harness (its gRPC and HTTP clients and the scripted model) over the whole run")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("peer: ")
	c.systems = strings.Split(systems, ",")
	if c.baseline != "" && !flagSet("systems") {
		c.systems = append(c.systems, baseMono, baseMicro)
	}

	dir, err := os.MkdirTemp("", "hermes-peer-")
	if err != nil {
		log.Fatal(err)
	}
	c.dir = dir
	var profile *os.File
	if *selfProfile != "" {
		if profile, err = os.Create(*selfProfile); err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(profile); err != nil {
			log.Fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	_, err = runAll(ctx, c, os.Stdout, os.Stderr)
	stop()
	if profile != nil {
		pprof.StopCPUProfile()
		if cerr := profile.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if keep {
		fmt.Fprintf(os.Stderr, "data and logs kept in %s\n", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// results are the runs of each system and the strace runs.
type results struct {
	runs   map[string][]*run
	probes []*run
}

// runAll builds Hermes if needed, runs the repeats and the strace run, prints the report and
// returns the runs.
func runAll(ctx context.Context, c config, out, progress io.Writer) (*results, error) {
	for _, s := range c.systems {
		if (s == baseMono || s == baseMicro) && c.baseline == "" {
			return nil, fmt.Errorf("-systems: %s needs -baseline", s)
		}
		if systemTitle[s] == "" {
			return nil, fmt.Errorf("-systems: unknown %q, want some of %s", s, strings.Join(allSystems, ", "))
		}
	}
	if c.longTurns > 0 && (c.longSessions < 1 || c.longWindow < 1) {
		return nil, errors.New("-long-sessions and -long-window must be positive")
	}
	if c.longOnly && c.longTurns < 1 {
		return nil, errors.New("-long-only needs -long-turns")
	}
	if c.pprofDir != "" {
		if err := os.MkdirAll(c.pprofDir, 0o750); err != nil {
			return nil, err
		}
	}
	if c.repeats < 1 || c.seqSess < 1 || c.seqTurns < 1 || c.concSess < 1 || c.concTurns < 1 {
		return nil, errors.New("-repeats, -seq-sessions, -seq-turns, -conc-sessions and -conc-turns must be positive")
	}
	if c.hermesBin == "" {
		fmt.Fprintln(progress, "building ./cmd/hermes …")
		root, err := hermesRoot()
		if err != nil {
			return nil, err
		}
		if c.hermesBin, err = build(ctx, root, "./cmd/hermes", filepath.Join(c.dir, "hermes")); err != nil {
			return nil, err
		}
	}
	if c.adkBin == "" && (contains(c.systems, adkMemory) || contains(c.systems, adkSQLite)) {
		fmt.Fprintln(progress, "building ./adkpeer …")
		root, err := hermesRoot()
		if err != nil {
			return nil, err
		}
		if c.adkBin, err = build(ctx, filepath.Join(root, "bench", "peer", "adkpeer"), ".", filepath.Join(c.dir, "adkpeer")); err != nil {
			return nil, err
		}
	}
	if err := evictPageCache(c.hermesBin, c.baseline, c.adkBin); err != nil {
		return nil, fmt.Errorf("dropping the binaries' page cache: %w", err)
	}
	start := time.Now()
	runs := map[string][]*run{}
	for rep := range c.repeats {
		fmt.Fprintf(progress, "repeat %d of %d\n", rep+1, c.repeats)
		for i := range c.systems {
			s := c.systems[(i+rep)%len(c.systems)]
			r, err := runSystem(ctx, c, s, rep, false, progress)
			if err != nil {
				return nil, err
			}
			runs[s] = append(runs[s], r)
		}
	}
	var probes []*run
	if c.fsyncTurns > 0 && !c.longOnly {
		if err := straceAvailable(); err != nil {
			fmt.Fprintf(progress, "no sync-call count: %v\n", err)
		} else {
			p := c
			p.seqSess = max(1, c.fsyncTurns/c.seqTurns)
			p.seqTurns = min(c.seqTurns, c.fsyncTurns)
			p.fsyncTurns = p.seqSess * p.seqTurns
			c.fsyncTurns = p.fsyncTurns
			fmt.Fprintf(progress, "sync calls under strace\n")
			for _, s := range []string{hermesMono, adkSQLite} {
				if !contains(c.systems, s) {
					continue
				}
				r, err := runSystem(ctx, p, s, 0, true, progress)
				if err != nil {
					return nil, err
				}
				probes = append(probes, r)
			}
		}
	}
	fmt.Fprintf(out, "\nhermes binary %s; %d CPUs; %s; took %s\n", c.hermesBin, runtime.NumCPU(), runtime.Version(), time.Since(start).Round(time.Second))
	if !c.longOnly {
		report(out, c, runs, probes)
	}
	if c.longTurns > 0 {
		reportLong(out, c, runs)
	}
	return &results{runs: runs, probes: probes}, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// build compiles pkg of the module in dir into bin.
func build(ctx context.Context, dir, pkg, bin string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, out)
	}
	return bin, nil
}

// hermesRoot finds the Hermes module's directory: the nearest directory above the working
// directory whose go.mod declares github.com/hermes-agent/hermes (this module's own go.mod
// declares .../bench/peer).
func hermesRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module github.com/hermes-agent/hermes\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no Hermes go.mod above the working directory: run from bench/peer, or pass -hermes")
		}
		dir = parent
	}
}

// flagSet reports whether the flag was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// envFlag appends a KEY=VALUE argument to list.
func envFlag(list *[]string) func(string) error {
	return func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", v)
		}
		*list = append(*list, v)
		return nil
	}
}
