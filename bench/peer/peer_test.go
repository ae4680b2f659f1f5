package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestIssue25Targets: each target of issue 25 is judged on the phase at the concurrency it names
// (CPU at 1 on the sequential phase, at 8 and above on the concurrent one), not on every phase's
// CPU together, and the turns/s target only at 64.
func TestIssue25Targets(t *testing.T) {
	// mk is a run whose sequential phase costs seq ms of CPU a turn at a p50 of p50 ms, and whose
	// concurrent phase costs conc ms a turn at rate turns/s.
	mk := func(system string, p50, seq, conc, rate float64, rssMiB int64) *run {
		ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
		lat := []time.Duration{ms(p50)}
		return &run{system: system, hwm: rssMiB << 20, phases: map[string]*phase{
			phaseSeq:  {turns: 10, lat: lat, wall: time.Second, cpu: map[string]time.Duration{"s": 10 * ms(seq)}},
			phaseConc: {turns: 100, lat: make([]time.Duration, int(rate)), wall: time.Second, cpu: map[string]time.Duration{"s": 100 * ms(conc)}},
		}}
	}
	tests := []struct {
		name      string
		concSess  int
		mono, mem *run
		want      []string
	}{
		{
			name: "met at 64", concSess: 64,
			mono: mk(hermesMono, 3.5, 4.7, 2.4, 900, 60), mem: mk(adkMemory, 3.0, 4.0, 2.4, 950, 50),
			want: []string{
				"- yes: issue 25: Hermes monolithic p50 at 1 at most 1.2× adk-go in-memory: 3.50 / 3.00 = 1.17",
				"- yes: issue 25: Hermes monolithic CPU per turn at 1 at most 1.2× adk-go in-memory: 4.70 / 4.00 = 1.18",
				"- yes: issue 25: Hermes monolithic CPU per turn at 64 at most 1.0× adk-go in-memory: 2.40 / 2.40 = 1.00",
				"- yes: issue 25: Hermes monolithic peak RSS over all phases at most 1.5× adk-go in-memory: 60.00 / 50.00 = 1.20",
				"- yes: issue 25: Hermes monolithic turns/s at 64 at least 0.9× adk-go in-memory: 900 / 950 = 0.95",
			},
		},
		{
			// The sequential phase's CPU is dearer than the concurrent one's: over all phases
			// the ratio would be 1.12, which is neither target's figure.
			name: "missed at 32", concSess: 32,
			mono: mk(hermesMono, 7, 6.4, 2.5, 460, 90), mem: mk(adkMemory, 4, 4.0, 2.4, 580, 55),
			want: []string{
				"- no: issue 25: Hermes monolithic p50 at 1 at most 1.2× adk-go in-memory: 7.00 / 4.00 = 1.75",
				"- no: issue 25: Hermes monolithic CPU per turn at 1 at most 1.2× adk-go in-memory: 6.40 / 4.00 = 1.60",
				"- no: issue 25: Hermes monolithic CPU per turn at 32 at most 1.0× adk-go in-memory: 2.50 / 2.40 = 1.04",
				"- no: issue 25: Hermes monolithic peak RSS over all phases at most 1.5× adk-go in-memory: 90.00 / 55.00 = 1.64",
				"- measured: issue 25: Hermes monolithic turns/s at 32 against adk-go in-memory: 0.79 (the target, at least 0.9×, applies at 64)",
			},
		},
		{
			name: "at 4, CPU only measured", concSess: 4,
			mono: mk(hermesMono, 3, 4, 2, 100, 50), mem: mk(adkMemory, 3, 4, 2, 100, 50),
			want: []string{
				"- yes: issue 25: Hermes monolithic p50 at 1 at most 1.2× adk-go in-memory: 3.00 / 3.00 = 1.00",
				"- yes: issue 25: Hermes monolithic CPU per turn at 1 at most 1.2× adk-go in-memory: 4.00 / 4.00 = 1.00",
				"- measured: issue 25: Hermes monolithic CPU per turn at 4 against adk-go in-memory: 1.00 (the target applies at 8 and above)",
				"- yes: issue 25: Hermes monolithic peak RSS over all phases at most 1.5× adk-go in-memory: 50.00 / 50.00 = 1.00",
				"- measured: issue 25: Hermes monolithic turns/s at 4 against adk-go in-memory: 1.00 (the target, at least 0.9×, applies at 64)",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l checklist
			issue25(&l, config{concSess: tc.concSess}, []*run{tc.mono}, []*run{tc.mem})
			if diff := cmp.Diff(tc.want, l.lines); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLongRatios: the long phase's ratios are per window and over the whole phase, the whole
// phase's CPU per turn being all its CPU over all its turns (not a mean of the windows').
func TestLongRatios(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	// win is a window of n turns at cpu ms a turn, each taking lat ms.
	win := func(n int, cpu, lat float64) window {
		w := window{turns: n, cpu: time.Duration(n) * ms(cpu)}
		for range n {
			w.lat = append(w.lat, ms(lat))
		}
		return w
	}
	runs := map[string][]*run{
		hermesMono: {{long: []window{win(10, 5, 5), win(12, 5, 5)}}},
		adkMemory:  {{long: []window{win(10, 2.5, 2), win(12, 7.5, 8)}}},
	}
	var out strings.Builder
	reportLongRatios(&out, config{longTurns: 20, longWindow: 10}, runs, 2)
	want := `
Hermes monolithic / adk-go in memory, per window and over the whole phase:

| figure | 1–10 | 11–20 | all |
|---|---|---|---|
| CPU per turn | 2.00 | 0.67 | 0.96 |
| p50 | 2.50 | 0.62 | 0.62 |
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}
