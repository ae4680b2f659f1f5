#!/usr/bin/env python3
"""Goroutine hand-offs in a Go execution trace, counted by stack (issue 27, stop 36).

Reads the text that `go tool trace -d=parsed TRACE` prints and reports:

  - every Waiting->Runnable transition (a goroutine woken), grouped by where the woken goroutine
    had blocked and by the stack of the goroutine that woke it ("netpoll/scheduler" when no
    goroutine did: a socket or pipe became ready, a timer fired);
  - every goroutine created (NotExist->Runnable), by its start and its creator;
  - per woken episode (woken -> blocks again), the median delay until it ran, its wall time and
    its running time;
  - how many times a P left the idle state (a thread woken or started to run goroutines).

Divide the counts by the calls in the window (for `hermes serve`, the count of the gRPC reader's
wake-ups) to get hand-offs per call.

    curl -o hermes.trace 'http://PPROF_ADDR/debug/pprof/trace?seconds=3'
    go tool trace -d=parsed hermes.trace > hermes.parsed
    python3 bench/trace/wakeups.py < hermes.parsed
"""
import collections
import re
import statistics
import sys

EVENT = re.compile(r'^M=(-?\d+) P=(-?\d+) G=(-?\d+) (\w+) Time=(\d+)(.*)$')
GOROUTINE = re.compile(r'GoID=(\d+) (\w+)->(\w+)')
# Frames skipped when naming a stack: the runtime's and the standard library's plumbing.
SKIP = ('runtime.', 'sync.', 'internal/', 'context.', 'time.', 'syscall.', 'os.', 'net.(*netFD)',
        'net.(*conn)', 'net.(*rawConn)', 'bufio.', 'io.',
        'google.golang.org/grpc/internal/transport/readyreader')


def name(stack, frames=3):
    kept = [f.rsplit('/', 1)[-1] for f in stack if not f.startswith(SKIP)][:frames]
    return ' < '.join(kept or stack[:2]) or '-'


def parse(lines):
    events, cur, field = [], None, None
    for line in lines:
        line = line.rstrip('\n')
        m = EVENT.match(line)
        if m:
            cur = {'G': int(m[3]), 'kind': m[4], 't': int(m[5]), 'rest': m[6], 'stack': [], 'tstack': []}
            events.append(cur)
            field = None
        elif line.startswith('TransitionStack='):
            field = 'tstack'
        elif line.startswith('Stack='):
            field = 'stack'
        elif field and cur and line.startswith('\t') and not line.startswith('\t\t'):
            cur[field].append(line.strip().split(' @ ')[0])
    return events


def main():
    events = parse(sys.stdin)
    blocked_at = {}
    woken = collections.Counter()
    created = collections.Counter()
    episode = {}
    episodes = collections.defaultdict(lambda: {'delay': [], 'wall': [], 'run': []})
    proc_starts = 0
    for e in events:
        if e['kind'] != 'StateTransition':
            continue
        if 'ProcID=' in e['rest'] and 'Idle->Running' in e['rest']:
            proc_starts += 1
            continue
        m = GOROUTINE.search(e['rest'])
        if not m:
            continue
        g, src, dst = int(m[1]), m[2], m[3]
        ep = episode.get(g)
        if src == 'Waiting' and dst == 'Runnable':
            waker = name(e['stack']) if e['stack'] else 'netpoll/scheduler'
            woken[(blocked_at.get(g, '?'), waker)] += 1
            episode[g] = {'from': blocked_at.get(g, '?'), 'ready': e['t'], 'first': None, 'since': None, 'run': 0}
        elif src == 'NotExist' and dst == 'Runnable':
            created[(name(e['tstack']), name(e['stack']))] += 1
        elif dst == 'Running' and ep:
            ep['first'] = ep['first'] or e['t']
            ep['since'] = e['t']
        elif src == 'Syscall' and dst == 'Running' and ep:
            ep['since'] = e['t']
        if src == 'Running' and ep and ep['since'] is not None:
            ep['run'] += e['t'] - ep['since']
            ep['since'] = None
        if src == 'Running' and dst == 'Waiting':
            here = name(e['tstack'], 2)
            blocked_at[g] = name(e['tstack'])
            if ep and ep['first']:
                s = episodes[(ep['from'], here)]
                s['delay'].append(ep['first'] - ep['ready'])
                s['wall'].append(e['t'] - ep['ready'])
                s['run'].append(ep['run'])
            episode.pop(g, None)

    print('== goroutines woken (count; blocked at; woken by)')
    for (at, by), n in woken.most_common(20):
        print(f'{n:7d}  {at}\n         <= {by}')
    print(f'total woken {sum(woken.values())}')
    print('\n== goroutines created (count; start; creator)')
    for (start, by), n in created.most_common(10):
        print(f'{n:7d}  {start}\n         <= {by}')
    print(f'total created {sum(created.values())}')
    print(f'\n== P idle -> running (threads set to work): {proc_starts}')
    print('\n== episodes, woken -> blocked again (median µs)')
    print(f'{"count":>7} {"delay":>7} {"wall":>7} {"run":>7}  woken at -> blocks at')
    for (frm, to), s in sorted(episodes.items(), key=lambda kv: -len(kv[1]['wall']))[:12]:
        med = lambda xs: statistics.median(xs) / 1000
        print(f'{len(s["wall"]):7d} {med(s["delay"]):7.1f} {med(s["wall"]):7.1f} {med(s["run"]):7.1f}  {frm} -> {to}')


if __name__ == '__main__':
    main()
