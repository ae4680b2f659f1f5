package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMachineTicks: /proc/stat's first line parses, and its steal time is part of its total.
func TestMachineTicks(t *testing.T) {
	total, steal := machineTicks()
	if total == 0 || steal > total {
		t.Fatalf("machineTicks() = %d total, %d steal", total, steal)
	}
}

// TestShortRun runs every system through every phase on a few turns, with the strace run, and
// checks that each produced the figures the report is made of: no failed turn, latencies, CPU
// and memory of its processes, and the model calls its turns imply.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds hermes and adkpeer, starts eight processes")
	}
	c := config{
		systems: allSystems, repeats: 1,
		seqSess: 2, seqTurns: 3, concSess: 3, concTurns: 2, roundRobin: true,
		warmup: 1, fsyncTurns: 3, settle: 300 * time.Millisecond,
		redisURL: "redis://127.0.0.1:6379/0", natsURL: "nats://127.0.0.1:4222",
		dir: t.TempDir(),
	}
	var out, progress bytes.Buffer
	res, err := runAll(context.Background(), c, &out, &progress)
	t.Log(progress.String())
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range allSystems {
		runs := res.runs[s]
		if len(runs) != 1 {
			t.Fatalf("%s: %d runs, want 1", s, len(runs))
		}
		r := runs[0]
		turns := 0
		for _, name := range []string{phaseSeq, phaseRR, phaseConc} {
			p := r.phases[name]
			if p == nil {
				t.Fatalf("%s: no %s phase", s, name)
			}
			if p.failed > 0 {
				t.Errorf("%s %s: %d turns failed, the first: %v", s, name, p.failed, p.err)
			}
			if p.steal < 0 || p.steal > 1 {
				t.Errorf("%s %s: steal time %.3f of the machine's CPU time", s, name, p.steal)
			}
			if len(p.lat) == 0 || pct(p.lat, 50) <= 0 || p.wall <= 0 {
				t.Errorf("%s %s: no latencies (%d) or wall time (%s)", s, name, len(p.lat), p.wall)
			}
			turns += p.turns
		}
		if want := c.seqSess*c.seqTurns*2 + c.concSess*c.concTurns; turns != want {
			t.Errorf("%s: %d turns, want %d", s, turns, want)
		}
		// Each turn asks the model twice: for the tool call, then for the answer.
		if got, want := r.calls["assistant"], int64(2*(turns+c.warmup)); got != want {
			t.Errorf("%s: %d assistant model calls, want %d", s, got, want)
		}
		if v, _ := allCPU(r); v <= 0 {
			t.Errorf("%s: no CPU per turn measured", s)
		}
		if r.rss <= 0 || r.hwm < r.rss || r.anon <= 0 || r.anon > r.rss {
			t.Errorf("%s: RSS %d, peak %d, anonymous %d", s, r.rss, r.hwm, r.anon)
		}
	}
	if strings.Count(out.String(), "| Hermes monolithic") < 3 {
		t.Errorf("the report lacks Hermes monolithic's rows:\n%s", out.String())
	}
	if err := straceAvailable(); err != nil {
		t.Logf("no strace run: %v", err)
		return
	}
	if len(res.probes) != 2 {
		t.Fatalf("%d strace runs, want 2 (Hermes monolithic, adk-go SQLite)", len(res.probes))
	}
	for _, r := range res.probes {
		// Both store every turn durably, so each turn syncs at least once.
		if r.syncs == nil || r.syncs.calls < r.phases[phaseSeq].turns {
			t.Errorf("%s under strace: %+v sync calls for %d turns", r.system, r.syncs, r.phases[phaseSeq].turns)
		}
	}
}

// TestLongPhase runs Hermes monolithic through the long phase only, profiled, and checks its
// windows, their figures and the profiles.
func TestLongPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds hermes and starts it")
	}
	prof := t.TempDir()
	c := config{
		systems: []string{hermesMono}, repeats: 1,
		seqSess: 1, seqTurns: 1, concSess: 1, concTurns: 1,
		warmup: 1, settle: 300 * time.Millisecond,
		longTurns: 4, longSessions: 2, longWindow: 2, longOnly: true,
		pprofDir: prof, pprofSeconds: 1,
		dir: t.TempDir(),
	}
	var out, progress bytes.Buffer
	res, err := runAll(context.Background(), c, &out, &progress)
	t.Log(progress.String())
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	r := res.runs[hermesMono][0]
	if len(r.phases) != 0 {
		t.Errorf("-long-only ran %d other phases", len(r.phases))
	}
	if len(r.long) != 2 {
		t.Fatalf("%d windows, want 2", len(r.long))
	}
	for i, w := range r.long {
		if w.turns != 4 || w.failed != 0 || len(w.lat) != 4 {
			t.Errorf("window %d: %d turns, %d failed, %d latencies; want 4, 0, 4", i, w.turns, w.failed, len(w.lat))
		}
		if w.reqBytes <= 0 || w.allocBytes <= 0 || w.gcs < 0 {
			t.Errorf("window %d: %d request bytes, %.0f bytes allocated, %.0f GCs", i, w.reqBytes, w.allocBytes, w.gcs)
		}
	}
	files, err := filepath.Glob(filepath.Join(prof, "*.pb.gz"))
	if err != nil || len(files) != 6 {
		t.Errorf("%d profiles (%v), want 6: CPU and two allocation snapshots of each of 2 windows", len(files), err)
	}
	if !strings.Contains(out.String(), "| hermes-mono | KB allocated per turn |") {
		t.Errorf("the report lacks the allocation row:\n%s", out.String())
	}
}
