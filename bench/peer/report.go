package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

func pct(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// metric is one figure of a run; ok is false where the run has no such figure.
type metric func(r *run) (v float64, ok bool)

func phaseMetric(name string, f func(p *phase) float64) metric {
	return func(r *run) (float64, bool) {
		p := r.phases[name]
		if p == nil || len(p.lat) == 0 {
			return 0, false
		}
		return f(p), true
	}
}

var (
	p50      = phaseMetric(phaseSeq, func(p *phase) float64 { return msf(pct(p.lat, 50)) })
	p99      = phaseMetric(phaseSeq, func(p *phase) float64 { return msf(pct(p.lat, 99)) })
	rrP50    = phaseMetric(phaseRR, func(p *phase) float64 { return msf(pct(p.lat, 50)) })
	rrP99    = phaseMetric(phaseRR, func(p *phase) float64 { return msf(pct(p.lat, 99)) })
	concRate = phaseMetric(phaseConc, func(p *phase) float64 { return p.rate() })
	concP50  = phaseMetric(phaseConc, func(p *phase) float64 { return msf(pct(p.lat, 50)) })
	concP99  = phaseMetric(phaseConc, func(p *phase) float64 { return msf(pct(p.lat, 99)) })
	seqCPU   = phaseMetric(phaseSeq, func(p *phase) float64 { return msf(p.serverCPU()) / float64(p.turns) })
	rrCPU    = phaseMetric(phaseRR, func(p *phase) float64 { return msf(p.serverCPU()) / float64(p.turns) })
	concCPU  = phaseMetric(phaseConc, func(p *phase) float64 { return msf(p.serverCPU()) / float64(p.turns) })
	seqSteal = phaseMetric(phaseSeq, func(p *phase) float64 { return 100 * p.steal })
)

// allCPU is the server CPU per turn over every phase of the run.
func allCPU(r *run) (float64, bool) { return sumPhases(r, (*phase).serverCPU) }

// sharedCPU is the shared Redis and NATS servers' CPU per turn (other work included).
func sharedCPU(r *run) (float64, bool) { return sumPhases(r, (*phase).sharedCPU) }

// harnessCPU is the harness's CPU per turn: the client side and the instant model.
func harnessCPU(r *run) (float64, bool) {
	return sumPhases(r, func(p *phase) time.Duration { return p.self })
}

// processCPU is one process's CPU per turn over every phase.
func processCPU(name string) metric {
	return func(r *run) (float64, bool) {
		for _, p := range r.phases {
			if _, ok := p.cpu[name]; !ok {
				return 0, false
			}
		}
		return sumPhases(r, func(p *phase) time.Duration { return p.cpu[name] })
	}
}

// processNames are the measured processes of a system's runs, in the order first seen.
func processNames(runs []*run) []string {
	var names []string
	for _, r := range runs {
		for _, p := range r.phases {
			for _, n := range p.names {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	return names
}

func sumPhases(r *run, f func(*phase) time.Duration) (float64, bool) {
	var d time.Duration
	n := 0
	for _, p := range r.phases {
		d += f(p)
		n += p.turns
	}
	if n == 0 {
		return 0, false
	}
	return msf(d) / float64(n), true
}

// failed is the number of failed turns over every phase.
func failed(r *run) (float64, bool) {
	n := 0
	for _, p := range r.phases {
		n += p.failed
	}
	return float64(n), true
}

func peakRSS(r *run) (float64, bool) { return float64(r.hwm) / (1 << 20), r.hwm > 0 }
func endRSS(r *run) (float64, bool)  { return float64(r.rss) / (1 << 20), r.rss > 0 }
func anonRSS(r *run) (float64, bool) { return float64(r.anon) / (1 << 20), r.anon > 0 }

// stat is the median and range of a metric over the repeats.
type stat struct {
	med, lo, hi float64
	n           int
}

func over(runs []*run, m metric) stat {
	var vs []float64
	for _, r := range runs {
		if v, ok := m(r); ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return stat{}
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return stat{med: med, lo: vs[0], hi: vs[len(vs)-1], n: len(vs)}
}

func (s stat) String() string { return s.format("%.1f") }

func (s stat) format(f string) string {
	if s.n == 0 {
		return "—"
	}
	out := fmt.Sprintf(f, s.med)
	if s.n > 1 && s.lo != s.hi {
		out += fmt.Sprintf(" ("+f+"–"+f+")", s.lo, s.hi)
	}
	return out
}

func ratio(a, b stat) string {
	if a.n == 0 || b.n == 0 || b.med == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a.med/b.med)
}

// report prints the Markdown tables: medians over the repeats (and their range).
func report(out io.Writer, c config, runs map[string][]*run, probes []*run) {
	fmt.Fprintf(out, "\n### Side by side: medians of %d repeats (range in brackets)\n\n", c.repeats)
	fmt.Fprintf(out, "Latency: the sequential phase (%d sessions × %d turns, one turn at a time). Turns/s: %d sessions at once, %d turns each. CPU per turn: the system's own processes over all phases (Redis/NATS not included). RSS: peak (VmHWM) summed over the system's processes.\n\n",
		c.seqSess, c.seqTurns, c.concSess, c.concTurns)
	fmt.Fprintf(out, "| system | p50 ms | p99 ms | turns/s, %d sessions at once | CPU per turn (server) ms | RSS MiB |\n|---|---|---|---|---|---|\n", c.concSess)
	for _, s := range c.systems {
		rs := runs[s]
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", systemTitle[s], over(rs, p50), over(rs, p99), over(rs, concRate), over(rs, allCPU), over(rs, peakRSS).format("%.0f"))
	}

	fmt.Fprintf(out, "\n| system | CPU/turn sequential | round-robin | concurrent | Redis+NATS (shared) per turn | harness (client + model) per turn | p50 at %d at once | RSS at the end MiB | of it anonymous MiB | failed turns | model calls (assistant / extraction / summary), last repeat | machine's steal time, sequential phase, %% |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", c.concSess)
	for _, s := range c.systems {
		rs := runs[s]
		calls := "—"
		if len(rs) > 0 {
			m := rs[len(rs)-1].calls
			calls = fmt.Sprintf("%d / %d / %d", m["assistant"], m["extraction"], m["summary"])
		}
		shared := "—"
		if s == hermesMicro || s == baseMicro {
			shared = over(rs, sharedCPU).String()
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", systemTitle[s], over(rs, seqCPU), over(rs, rrCPU), over(rs, concCPU), shared, over(rs, harnessCPU), over(rs, concP50), over(rs, endRSS).format("%.0f"), over(rs, anonRSS).format("%.0f"), over(rs, failed).format("%.0f"), calls, over(rs, seqSteal))
	}

	fmt.Fprintf(out, "\nCPU per turn of each process, ms (all phases; Redis and NATS are the machine's shared servers, other work included):\n\n| system | processes |\n|---|---|\n")
	for _, s := range c.systems {
		var parts []string
		for _, n := range processNames(runs[s]) {
			parts = append(parts, fmt.Sprintf("%s %s", n, over(runs[s], processCPU(n))))
		}
		fmt.Fprintf(out, "| %s | %s |\n", systemTitle[s], strings.Join(parts, " · "))
	}

	type pair struct{ a, b string }
	var pairs []pair
	for _, h := range []string{hermesMono, hermesMicro} {
		for _, a := range []string{adkMemory, adkSQLite} {
			pairs = append(pairs, pair{h, a})
		}
	}
	pairs = append(pairs, pair{hermesMicro, hermesMono}, pair{baseMicro, baseMono}, pair{hermesMono, baseMono}, pair{hermesMicro, baseMicro})
	fmt.Fprintf(out, "\nRatios of the medians (below 1 is better for the first system, except turns/s). At 1: the sequential phase; at %[1]d: the concurrent phase, %[1]d sessions at once; all: every phase's CPU over every phase's turns:\n\n| ratio | p50 at 1 | p99 at 1 | p50 at %[1]d | p99 at %[1]d | turns/s at %[1]d | CPU per turn at 1 | CPU per turn at %[1]d | CPU per turn, all | RSS | anonymous RSS at the end |\n|---|---|---|---|---|---|---|---|---|---|---|\n", c.concSess)
	for _, p := range pairs {
		ra, rb := runs[p.a], runs[p.b]
		if len(ra) == 0 || len(rb) == 0 {
			continue
		}
		fmt.Fprintf(out, "| %s / %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.a, p.b,
			ratio(over(ra, p50), over(rb, p50)), ratio(over(ra, p99), over(rb, p99)), ratio(over(ra, concP50), over(rb, concP50)), ratio(over(ra, concP99), over(rb, concP99)),
			ratio(over(ra, concRate), over(rb, concRate)), ratio(over(ra, seqCPU), over(rb, seqCPU)), ratio(over(ra, concCPU), over(rb, concCPU)),
			ratio(over(ra, allCPU), over(rb, allCPU)), ratio(over(ra, peakRSS), over(rb, peakRSS)), ratio(over(ra, anonRSS), over(rb, anonRSS)))
	}

	if c.roundRobin {
		fmt.Fprintf(out, "\nBack to back (the next turn on the same session as soon as the answer arrives) against round-robin (the same turns spread: turn t of every session before turn t+1):\n\n| system | p50 back to back | p50 round-robin | ratio | p99 back to back | p99 round-robin | CPU/turn back to back | round-robin |\n|---|---|---|---|---|---|---|---|\n")
		for _, s := range c.systems {
			rs := runs[s]
			fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", systemTitle[s], over(rs, p50), over(rs, rrP50), ratio(over(rs, p50), over(rs, rrP50)), over(rs, p99), over(rs, rrP99), over(rs, seqCPU), over(rs, rrCPU))
		}
	}

	if len(probes) > 0 {
		fmt.Fprintf(out, "\nSync calls (strace, a separate run of %d sequential turns under `strace -f --seccomp-bpf -T`; %s):\n\n| system | sync calls per turn | by call | time in them per turn ms | mean per call ms | p50 under strace ms |\n|---|---|---|---|---|---|\n", c.fsyncTurns, syncCalls)
		var files []string
		for _, r := range probes {
			st := r.syncs
			p := r.phases[phaseSeq]
			n := float64(max(p.turns, 1))
			var by []string
			for k, v := range st.byName {
				by = append(by, fmt.Sprintf("%s %.2f", k, float64(v)/n))
			}
			slices.Sort(by)
			mean := 0.0
			if st.calls > 0 {
				mean = msf(st.time) / float64(st.calls)
			}
			fmt.Fprintf(out, "| %s | %.2f | %s | %.2f | %.2f | %.1f |\n", systemTitle[r.system], float64(st.calls)/n, strings.Join(by, ", "), msf(st.time)/n, mean, msf(pct(p.lat, 50)))
			var fs []string
			for k, v := range st.byFile {
				fs = append(fs, fmt.Sprintf("`%s` %.2f", k, float64(v)/n))
			}
			slices.Sort(fs)
			files = append(files, fmt.Sprintf("- %s: %s", systemTitle[r.system], strings.Join(fs, " · ")))
		}
		fmt.Fprintf(out, "\nSync calls per turn by file (below the run's data directory):\n\n%s\n", strings.Join(files, "\n"))
	}
	targets(out, c, runs)
}

// checklist collects the report's target lines: each met or not, or only measured.
type checklist struct{ lines []string }

func (l *checklist) check(ok bool, format string, args ...any) {
	mark := "no"
	if ok {
		mark = "yes"
	}
	l.lines = append(l.lines, fmt.Sprintf("- %s: %s", mark, fmt.Sprintf(format, args...)))
}

func (l *checklist) info(format string, args ...any) {
	l.lines = append(l.lines, "- measured: "+fmt.Sprintf(format, args...))
}

// targets checks issue 13's and issue 25's targets on the medians.
func targets(out io.Writer, c config, runs map[string][]*run) {
	mono, micro, mem, sql := runs[hermesMono], runs[hermesMicro], runs[adkMemory], runs[adkSQLite]
	var l checklist
	check, info := l.check, l.info
	if len(mono) > 0 && len(sql) > 0 {
		for _, m := range []struct {
			name   string
			f      metric
			higher bool
		}{{"p50 at 1", p50, false}, {"p99 at 1", p99, false}, {fmt.Sprintf("p50 at %d", c.concSess), concP50, false}, {fmt.Sprintf("p99 at %d", c.concSess), concP99, false},
			{fmt.Sprintf("turns/s at %d", c.concSess), concRate, true}, {"CPU per turn at 1", seqCPU, false}, {fmt.Sprintf("CPU per turn at %d", c.concSess), concCPU, false}, {"CPU per turn, all phases", allCPU, false}} {
			a, b := over(mono, m.f), over(sql, m.f)
			ok := a.med < b.med
			if m.higher {
				ok = a.med > b.med
			}
			check(ok, "Hermes monolithic ahead of adk-go SQLite in %s: %.1f vs %.1f", m.name, a.med, b.med)
		}
	}
	if len(mono) > 0 && len(mem) > 0 {
		a, b := over(mono, allCPU), over(mem, allCPU)
		check(a.med <= 2*b.med, "Hermes monolithic CPU per turn at most 2× adk-go in-memory: %.1f / %.1f = %s", a.med, b.med, ratio(a, b))
		info("Hermes monolithic p50 against adk-go in-memory (as close as durability allows; see the sync calls): %s×", ratio(over(mono, p50), over(mem, p50)))
		issue25(&l, c, mono, mem)
	}
	if len(mono) > 0 && len(micro) > 0 {
		a, b := over(micro, p50), over(mono, p50)
		check(a.med <= 1.5*b.med, "microservices within 1.5× of monolithic at p50: %s", ratio(a, b))
	}
	if c.roundRobin {
		for _, s := range []string{hermesMono, hermesMicro, baseMono, baseMicro} {
			if rs := runs[s]; len(rs) > 0 {
				a, b := over(rs, p50), over(rs, rrP50)
				check(a.med <= b.med, "%s: back-to-back turns on one session no dearer than spread (p50 %.1f vs %.1f)", s, a.med, b.med)
			}
		}
	}
	if len(l.lines) > 0 {
		fmt.Fprintf(out, "\nTargets of issues 13 and 25 on these medians:\n\n%s\n", strings.Join(l.lines, "\n"))
	}
}

// issue25 checks issue 25's targets against adk-go in memory, each at the concurrency it names:
// concurrency 1 is the sequential phase, the others the concurrent phase (-conc-sessions).
func issue25(l *checklist, c config, mono, mem []*run) {
	check, info := l.check, l.info
	type target struct {
		name  string
		f     metric
		limit float64
		at    string
		// applies says whether the run's concurrent phase is one the target names.
		applies bool
	}
	n := c.concSess
	for _, t := range []target{
		{"p50", p50, 1.2, "at 1", true},
		{"CPU per turn", seqCPU, 1.2, "at 1", true},
		{"CPU per turn", concCPU, 1.0, "at " + strconv.Itoa(n), n >= 8},
		{"peak RSS", peakRSS, 1.5, "over all phases", true},
	} {
		a, b := over(mono, t.f), over(mem, t.f)
		if a.n == 0 || b.n == 0 {
			continue
		}
		if !t.applies {
			info("issue 25: Hermes monolithic %s %s against adk-go in-memory: %s (the target applies at 8 and above)", t.name, t.at, ratio(a, b))
			continue
		}
		check(a.med <= t.limit*b.med, "issue 25: Hermes monolithic %s %s at most %.1f× adk-go in-memory: %.2f / %.2f = %s", t.name, t.at, t.limit, a.med, b.med, ratio(a, b))
	}
	a, b := over(mono, concRate), over(mem, concRate)
	if a.n == 0 || b.n == 0 {
		return
	}
	if n < 64 {
		info("issue 25: Hermes monolithic turns/s at %d against adk-go in-memory: %s (the target, at least 0.9×, applies at 64)", n, ratio(a, b))
		return
	}
	check(a.med >= 0.9*b.med, "issue 25: Hermes monolithic turns/s at %d at least 0.9× adk-go in-memory: %.0f / %.0f = %s", n, a.med, b.med, ratio(a, b))
}
