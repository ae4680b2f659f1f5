package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReleasableRanges(t *testing.T) {
	const exe = "/usr/local/bin/hermes"
	// Field lines as the kernel writes them, trimmed to what the parser reads.
	fieldLines := func(rss, anon string) string {
		return "Size:              23556 kB\nRss:   " + rss + " kB\nPss:   " + rss + " kB\nAnonymous:  " + anon + " kB\nSwap:  0 kB\nVmFlags: rd ex mr mw me\n"
	}
	for _, tc := range []struct {
		name  string
		smaps string
		want  []pageRange
	}{
		{
			name: "text and read-only data",
			smaps: "00400000-01b01000 r-xp 00000000 fd:01 123 " + exe + "\n" + fieldLines("17096", "0") +
				"01b01000-040e4000 r--p 01701000 fd:01 123 " + exe + "\n" + fieldLines("21708", "0"),
			want: []pageRange{
				{start: 0x400000, end: 0x1b01000, rss: 17096 << 10},
				{start: 0x1b01000, end: 0x40e4000, rss: 21708 << 10},
			},
		},
		{
			name: "writable data is kept",
			smaps: "040e4000-041ca000 rw-p 03ce4000 fd:01 123 " + exe + "\n" + fieldLines("856", "0") +
				"041ca000-061fd000 rw-p 00000000 00:00 0 \n" + fieldLines("172", "172"),
		},
		{
			name: "a read-only mapping with anonymous pages (relocated RELRO) is kept",
			smaps: "00400000-01b01000 r-xp 00000000 fd:01 123 " + exe + "\n" + fieldLines("100", "0") +
				"01b01000-01b02000 r--p 01701000 fd:01 123 " + exe + "\n" + fieldLines("4", "4"),
			want: []pageRange{{start: 0x400000, end: 0x1b01000, rss: 100 << 10}},
		},
		{
			// The relocated copies swapped out: Anonymous is 0, Swap is not. DONTNEED would
			// discard the swap entries and the next fault would read the unrelocated file.
			name: "a read-only mapping with swapped-out anonymous pages is kept",
			smaps: "00400000-01b01000 r-xp 00000000 fd:01 123 " + exe + "\n" + fieldLines("100", "0") +
				"01b01000-01b02000 r--p 01701000 fd:01 123 " + exe + "\nRss: 0 kB\nAnonymous: 0 kB\nSwap: 4 kB\n",
			want: []pageRange{{start: 0x400000, end: 0x1b01000, rss: 100 << 10}},
		},
		{
			// A kernel (or sandbox) that does not report the counts: nothing says the mapping
			// holds no anonymous pages.
			name: "a mapping without Anonymous or Swap fields is kept",
			smaps: "00400000-01b01000 r-xp 00000000 fd:01 123 " + exe + "\nRss: 100 kB\nSwap: 0 kB\n" +
				"01b01000-01b02000 r--p 01701000 fd:01 123 " + exe + "\nRss: 4 kB\nAnonymous: 0 kB\n",
		},
		{
			name: "other files and anonymous mappings are kept",
			smaps: "7f1e1395a000-7f1e13ab0000 r-xp 00028000 fd:01 9 /usr/lib/x86_64-linux-gnu/libc.so.6\n" + fieldLines("920", "0") +
				"7f1dc4200000-7f1ec4200000 r--s 00000000 fd:01 10 /data/session.db\n" + fieldLines("2816", "0") +
				"173073000000-173075000000 r--p 00000000 00:00 0 \n" + fieldLines("0", "0") +
				"00400000-01b01000 r-xp 00000000 fd:01 124 " + exe + ".old\n" + fieldLines("5", "0"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := releasableRanges(strings.NewReader(tc.smaps), exe)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(pageRange{})); diff != "" {
				t.Errorf("ranges (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReleasableRangesPathWithSpaces(t *testing.T) {
	const exe = "/opt/my apps/hermes"
	got, err := releasableRanges(strings.NewReader("00400000-00401000 r-xp 00000000 fd:01 123 "+exe+"\nRss: 4 kB\nAnonymous: 0 kB\nSwap: 0 kB\n"), exe)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pageRange{{start: 0x400000, end: 0x401000, rss: 4 << 10}}, got, cmp.AllowUnexported(pageRange{})); diff != "" {
		t.Errorf("ranges (-want +got):\n%s", diff)
	}
}

func TestReleasableRangesMalformed(t *testing.T) {
	const exe = "/usr/local/bin/hermes"
	for _, smaps := range []string{
		"00400000 r-xp 00000000 fd:01 123 " + exe + "\n",
		"zz-01b01000 r-xp 00000000 fd:01 123 " + exe + "\n",
		"01b01000-00400000 r-xp 00000000 fd:01 123 " + exe + "\n",
		"00400000-01b01000 r-xp 00000000 fd:01 123 " + exe + "\nRss: many kB\n",
	} {
		if got, err := releasableRanges(strings.NewReader(smaps), exe); err == nil {
			t.Errorf("releasableRanges(%q) = %v, want an error", smaps, got)
		}
	}
}

// TestReleaseStartupPages releases the test binary's own pages: the process goes on running
// (the pages come back as it touches them), and a second release finds fewer resident, only
// those touched in between.
func TestReleaseStartupPages(t *testing.T) {
	first, err := releaseStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 0 {
		t.Fatalf("released %d bytes, want some: the running test binary has resident code", first)
	}
	second, err := releaseStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	if second >= first {
		t.Errorf("second release %d bytes, want fewer than the first's %d", second, first)
	}
}
