package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// releaseStartupPages drops this process's mappings of its own executable's code and read-only
// data (MADV_DONTNEED), once the server is built and before it serves, and returns the bytes
// they had resident.
//
// Starting touches much of the binary that serving never runs again: package initialisation,
// flag and configuration parsing, opening the stores, registering the services, and the kernel
// maps each touched page with its neighbours (fault-around) and reads ahead around it. Those
// pages stay in the process's RSS, file-backed, for its lifetime: about 38 MB of an idle
// `hermes serve`'s 50 MB, of which a turn uses well under half (issue 25, stop 33). The pages
// stay in the page cache, so the ones serving needs come back on their next use as minor
// faults, and the rest stop counting against the process.
//
// Only mappings that are read-only and hold no anonymous pages, resident or swapped out, are
// released: for a private file mapping that was never written, MADV_DONTNEED changes nothing
// but residency. A mapping written at load time (a RELRO segment the dynamic loader relocated)
// holds anonymous copies that DONTNEED would discard (from swap too: a swapped-out copy is in
// Swap, not Anonymous), so it is left alone, as is any mapping whose smaps entry does not say
// both counts.
func releaseStartupPages() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("release startup pages: %w", err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("release startup pages: %w", err)
	}
	ranges, err := releasableRanges(f, exe)
	_ = f.Close()
	if err != nil {
		return 0, fmt.Errorf("release startup pages: %w", err)
	}
	var released int64
	for _, r := range ranges {
		// Raw addresses, not a []byte over them: these pages are not Go memory.
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, r.start, r.end-r.start, syscall.MADV_DONTNEED); e != 0 {
			return released, fmt.Errorf("release startup pages: madvise %#x-%#x: %w", r.start, r.end, e)
		}
		released += r.rss
	}
	return released, nil
}

// pageRange is one mapping of the executable: its addresses and its resident bytes.
type pageRange struct {
	start, end uintptr
	rss        int64
}

// releasableRanges reads /proc/PID/smaps and returns the mappings of the file exe that are
// read-only (no w in the permissions) and hold no anonymous pages: their Anonymous and Swap
// fields are both present and 0.
func releasableRanges(r io.Reader, exe string) ([]pageRange, error) {
	var (
		out  []pageRange
		cur  pageRange
		keep bool // cur is a read-only mapping of exe
		// noAnon and noSwap: cur's Anonymous and Swap fields were read, and are 0.
		noAnon, noSwap bool
	)
	flush := func() {
		if keep && noAnon && noSwap {
			out = append(out, cur)
		}
		keep, noAnon, noSwap = false, false, false
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if key, ok := strings.CutSuffix(fields[0], ":"); ok {
			// A field of the current mapping: "Rss:  1234 kB".
			if !keep || len(fields) < 2 {
				continue
			}
			switch key {
			case "Rss":
				kb, err := strconv.ParseInt(fields[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("smaps %q: %w", sc.Text(), err)
				}
				cur.rss = kb << 10
			case "Anonymous":
				noAnon = fields[1] == "0"
			case "Swap":
				noSwap = fields[1] == "0"
			}
			continue
		}
		// A mapping's header: "start-end perms offset dev inode [path]".
		flush()
		if len(fields) < 6 || strings.Join(fields[5:], " ") != exe || strings.ContainsRune(fields[1], 'w') {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("smaps %q: no address range", sc.Text())
		}
		start, err := strconv.ParseUint(lo, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("smaps %q: %w", sc.Text(), err)
		}
		end, err := strconv.ParseUint(hi, 16, 64)
		if err != nil || end < start {
			return nil, fmt.Errorf("smaps %q: bad address range", sc.Text())
		}
		cur, keep = pageRange{start: uintptr(start), end: uintptr(end)}, true
	}
	flush()
	return out, sc.Err()
}
