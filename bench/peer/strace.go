package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// fsyncs are counted with strace on a process started under it for the purpose (a separate,
// shorter run: the measured runs are not traced). --seccomp-bpf stops the process only at the
// traced calls, so the rest of its work runs at full speed; -T gives each call's duration and
// -ttt its time, so the calls of the measured window are picked out afterwards; -y names the
// file of each descriptor, so the calls are counted per file.

const syncCalls = "fsync,fdatasync,sync_file_range,syncfs,msync"

// straceArgs is the command line that runs argv under strace, writing the sync calls to out.
func straceArgs(out string, argv ...string) []string {
	return append([]string{"strace", "-f", "-qq", "--seccomp-bpf", "-y", "-ttt", "-T", "-e", "trace=" + syncCalls, "-o", out, "--"}, argv...)
}

// straceAvailable says whether strace can trace here (it needs ptrace).
func straceAvailable() error {
	if _, err := exec.LookPath("strace"); err != nil {
		return fmt.Errorf("strace is not installed (apt-get install strace): %w", err)
	}
	out, err := exec.Command("strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=fsync", "-o", os.DevNull, "--", "true").CombinedOutput()
	if err != nil {
		return fmt.Errorf("strace cannot trace here: %v: %s", err, out)
	}
	return nil
}

// hermesUnderStrace writes a script that runs the hermes binary under strace; it stands in for
// the binary where a process is started by path.
func hermesUnderStrace(dir, bin, out string) (string, error) {
	script := dir + "/hermes-strace.sh"
	args := straceArgs(out, bin)
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	body := "#!/bin/sh\nexec " + strings.Join(quoted, " ") + ` "$@"` + "\n"
	return script, os.WriteFile(script, []byte(body), 0o755)
}

// syncStats are the sync calls of a window.
type syncStats struct {
	calls  int
	time   time.Duration // summed over calls, which may overlap in different threads
	byName map[string]int
	byFile map[string]int // path below the run's directory (or as strace gave it)
}

// strace -f -y -ttt -T lines: "pid 1712345678.123456 fdatasync(7</dir/x.db>) = 0 <0.001234>", or
// a call cut in two by another thread's: "pid … fdatasync(7</dir/x.db> <unfinished ...>" then
// "pid 1712345678.125 <... fdatasync resumed>) = 0 <0.001234>".
var (
	straceDone       = regexp.MustCompile(`^(\d+)\s+(\d+\.\d+)\s+([a-z_0-9]+)\((.*)\)\s+=\s+-?\d+.*<(\d+\.\d+)>$`)
	straceUnfinished = regexp.MustCompile(`^(\d+)\s+\d+\.\d+\s+[a-z_0-9]+\((.*) <unfinished \.\.\.>$`)
	straceResumed    = regexp.MustCompile(`^(\d+)\s+(\d+\.\d+)\s+<\.\.\. ([a-z_0-9]+) resumed>.*=\s+-?\d+.*<(\d+\.\d+)>$`)
	straceFile       = regexp.MustCompile(`^\d+<([^>]*)>`)
)

// parseSyncs reads an strace output file and returns the sync calls that ended in [from, to];
// files are named relative to dir.
func parseSyncs(path, dir string, from, to time.Time) (syncStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return syncStats{}, err
	}
	defer func() { _ = f.Close() }()
	st := syncStats{byName: map[string]int{}, byFile: map[string]int{}}
	pending := map[string]string{} // pid → arguments of its unfinished call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var pid, ts, name, args, dur string
		if m := straceDone.FindStringSubmatch(line); m != nil {
			pid, ts, name, args, dur = m[1], m[2], m[3], m[4], m[5]
		} else if m := straceUnfinished.FindStringSubmatch(line); m != nil {
			pending[m[1]] = m[2]
			continue
		} else if m := straceResumed.FindStringSubmatch(line); m != nil {
			pid, ts, name, dur = m[1], m[2], m[3], m[4]
			args = pending[pid]
			delete(pending, pid)
		} else {
			continue
		}
		at, err1 := strconv.ParseFloat(ts, 64)
		d, err2 := strconv.ParseFloat(dur, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		when := time.Unix(0, int64(at*1e9))
		if when.Before(from) || when.After(to) {
			continue
		}
		st.calls++
		st.time += time.Duration(d * 1e9)
		st.byName[name]++
		file := "?"
		if m := straceFile.FindStringSubmatch(args); m != nil {
			file = strings.TrimPrefix(strings.TrimPrefix(m[1], dir), "/")
		}
		st.byFile[file]++
	}
	return st, sc.Err()
}
