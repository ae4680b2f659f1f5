package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// Every process is measured the same way, from /proc: CPU as utime+stime of
// /proc/<pid>/stat (all threads, clock ticks), memory as VmRSS and VmHWM of
// /proc/<pid>/status. Nothing is asked of the process itself, so adk-go's child and Hermes'
// processes are read alike.

// proc is one measured process.
type proc struct {
	name string
	pid  int
	// shared marks a process that other work on the machine uses too (the running Redis and
	// NATS servers): its CPU figures include that work.
	shared bool
}

// memStat is a process's resident memory, in bytes.
type memStat struct {
	rss, hwm int64 // resident set now and its peak (VmRSS, VmHWM)
	// anon is the private part of rss (RssAnon): what the process itself allocated. The rest
	// is file pages, mostly the executable's, which count once the process touches them and
	// more of them when the file is in the page cache (a binary just built): the same program
	// reads 15–20 MiB apart in VmRSS depending on that alone.
	anon int64
}

// procMem reads the process's resident memory.
func procMem(pid int) (memStat, error) {
	var m memStat
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	fields := map[string]*int64{"VmRSS": &m.rss, "VmHWM": &m.hwm, "RssAnon": &m.anon}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		dst := fields[k]
		if !ok || dst == nil {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			*dst = kb << 10
		}
	}
	return m, nil
}

// machineTicks reads the machine's CPU time from /proc/stat's first line: all of it and the
// part stolen by the hypervisor (a virtual machine whose host runs other guests), in clock
// ticks. Steal is time a runnable process waited for a CPU the host gave to someone else, so
// it says how much of a phase's latency was the machine's, not the system's.
func machineTicks() (total, steal uint64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0
		}
		// guest and guest_nice (fields 9 and 10) are already counted in user and nice.
		if i < 8 {
			total += n
		}
		if i == 7 {
			steal = n
		}
	}
	return total, steal
}

// selfCPU is the harness's own CPU: the client side of every turn and the instant model.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuSnapshot reads the CPU of every process; a process it cannot read is left out.
func cpuSnapshot(ps []proc) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range ps {
		if d, err := cluster.ProcCPU(p.pid); err == nil {
			out[p.name] = d
		}
	}
	return out
}
