package cluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times; 100 on every Linux port Go
// supports.
const clockTick = 100

// ProcCPU returns a process's user+system CPU time (all its threads) from /proc/<pid>/stat, so
// every process is read alike: Hermes, Redis, NATS. It fails where there is no /proc.
func ProcCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTick, nil
}

// FindServer returns the pid of a running process named comm whose command line mentions port,
// or 0: the machine's shared Redis and NATS servers, to read their CPU.
func FindServer(comm, port string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		c, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		cmdline, _ := os.ReadFile(d + "/cmdline")
		if port != "" && !bytes.Contains(cmdline, []byte(port)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			return pid
		}
	}
	return 0
}
