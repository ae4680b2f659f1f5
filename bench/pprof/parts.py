#!/usr/bin/env python3
"""A CPU profile's samples by part of a turn (issue 25, stop 39).

Reads the text that `go tool pprof -traces BINARY PROFILE` prints and puts each stack's samples
in one bucket: the first rule below that it matches, in the rules' order (so a bbolt commit made
during a session append counts as the commit). Prints each bucket's time,
share, and time per turn when the number of turns in the profile is given.

    go tool pprof -traces hermes hermes-mono-0-*-cpu.pb.gz > traces.txt
    python3 bench/pprof/parts.py TURNS < traces.txt
"""
import re
import sys
from collections import Counter

# (bucket, any of these in a frame, none of these in any frame); the first rule that matches
# wins.
RULES = [
    ("bbolt commit", ["bbolt.(*Tx).Commit"], []),
    ("GC", ["runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep"], []),
    ("memory consumer (extraction)", ["memory.(*Consumer)"], []),
    ("summarizer", ["orchestrator.(*summarizer)"], []),
    ("model HTTP calls", ["internal/model.(*Client)", "net/http."], []),
    ("NATS", ["nats-io/"], []),
    ("recall", ["memory.(*Service).Recall", "memory.(*Service).recall", "memory.(*Service).searchTiers"], []),
    ("tool selection", ["tools.(*Service).SelectTools"], []),
    ("tool execution", ["tools.(*Service).ExecuteTool"], []),
    ("session appends", ["session.(*Service).AppendMessages"], []),
    ("allocation elsewhere", ["runtime.mallocgc"], []),
    ("scheduler", ["runtime.schedule", "runtime.findRunnable"], []),
    ("orchestrator, the rest", ["services/orchestrator."], []),
    ("gRPC transport", ["google.golang.org/grpc"], ["hermes-agent/hermes/"]),
]


def parse(text):
    """Yields (milliseconds, frames) per stack of `pprof -traces` output."""
    for block in text.split("-----------+-------------------------------------------------------"):
        lines = [l.strip() for l in block.strip().splitlines() if l.strip()]
        if not lines:
            continue
        m = re.match(r"(\d+(?:\.\d+)?)(ms|s|us|µs)\s+(.*)", lines[0])
        if not m:
            continue
        scale = {"s": 1000.0, "ms": 1.0, "us": 0.001, "µs": 0.001}[m.group(2)]
        yield float(m.group(1)) * scale, [m.group(3)] + lines[1:]


def bucket(frames):
    for name, anyof, noneof in RULES:
        if any(p in f for f in frames for p in anyof) and not any(p in f for f in frames for p in noneof):
            return name
    return "other: " + frames[-1]


def main():
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    parts, total = Counter(), 0.0
    for ms, frames in parse(sys.stdin.read()):
        parts[bucket(frames)] += ms
        total += ms
    for name, ms in parts.most_common():
        per = f"  {1000 * ms / turns:7.0f} µs a turn" if turns else ""
        print(f"{ms:8.0f} ms {100 * ms / total:5.1f}%{per}  {name}")


if __name__ == "__main__":
    main()
