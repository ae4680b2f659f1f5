#!/usr/bin/env python3
"""Which bucket each page of a bbolt commit belongs to (issue 25, stop 41).

Reads `strace -e trace=pwrite64,fdatasync` output of a process writing a bbolt file and a copy of
that file taken right after (the process stopped with SIGSTOP while it is copied), walks the
copy's B-trees from its current meta page to learn which bucket owns each page, and prints the
pages of the last complete commits by bucket. Pages written by earlier commits may have been
freed and reused since, so only the last commits before the copy are reliable.

    timeout 0.4 strace -f -e trace=pwrite64,fdatasync -p PID -o st.txt
    kill -STOP PID; cp DATA/session.db snap.db; kill -CONT PID
    python3 bench/pprof/commitpages.py st.txt snap.db FD [COMMITS]

FD is the file's descriptor in the process (ls -l /proc/PID/fd). Sessions' buckets (s/<id>) are
shown as s/<sid>.
"""
import collections
import re
import struct
import sys

BRANCH, LEAF = 0x01, 0x02
BUCKET_LEAF_FLAG = 0x01


def owners(data, page_size=4096):
    """Maps page id -> (bucket path, 'branch'|'leaf'|'freelist') for the file's current tree."""
    def header(pgid):
        return struct.unpack_from("<QHHI", data, pgid * page_size)

    metas = []
    for i in (0, 1):
        # page header (16), magic, version, page size, flags (4 each), root bucket (root, seq),
        # free list, high-water mark, txid (8 each)
        (_, _, _, _, root, _, freelist, _, txid) = struct.unpack_from("<IIIIQQQQQ", data, i * page_size + 16)
        metas.append((txid, root, freelist))
    _, root, freelist = max(metas)
    out = {}

    def walk(pgid, path):
        _, flags, count, overflow = header(pgid)
        kind = "branch" if flags == BRANCH else "leaf"
        for j in range(overflow + 1):
            out[pgid + j] = (path or "/", kind)
        base = pgid * page_size
        for i in range(count):
            el = base + 16 + 16 * i
            if flags == BRANCH:
                _, _, child = struct.unpack_from("<IIQ", data, el)
                walk(child, path)
            elif flags == LEAF:
                eflags, pos, ksize, vsize = struct.unpack_from("<IIII", data, el)
                if eflags & BUCKET_LEAF_FLAG:
                    key = data[el + pos:el + pos + ksize].decode("latin1")
                    if key.startswith("s/"):
                        key = "s/<sid>"
                    broot, _ = struct.unpack_from("<QQ", data, el + pos + ksize)
                    if broot:  # 0: an inline bucket, stored in this leaf
                        walk(broot, path + "/" + key)

    walk(root, "")
    if freelist != 0xFFFFFFFFFFFFFFFF:
        out[freelist] = ("free list", "")
    return out


def commits(trace, fd):
    """The data pages of each commit: the pwrites before each data fdatasync, as (page, pages)."""
    out, cur = [], []
    write = re.compile(r"pwrite64\(%s, .*?, (\d+), (\d+)\)" % fd)
    for line in trace.splitlines():
        m = write.search(line)
        if m:
            cur.append((int(m.group(2)) // 4096, int(m.group(1)) // 4096))
        elif "fdatasync(%s)" % fd in line:
            # A commit's meta page (page 0 or 1) has a sync of its own.
            if cur and not (len(cur) == 1 and cur[0][0] in (0, 1)):
                out.append(cur)
            cur = []
    return out


def main():
    trace, snap, fd = open(sys.argv[1]).read(), open(sys.argv[2], "rb").read(), sys.argv[3]
    last = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    own = owners(snap)
    cs = commits(trace, fd)
    sizes = collections.Counter(sum(n for _, n in c) for c in cs)
    print(f"{len(cs)} commits; pages a commit (pages: commits): {dict(sorted(sizes.items()))}")
    for c in cs[-last:]:
        by = collections.Counter()
        for page, n in c:
            path, kind = own.get(page, ("?", ""))
            by[f"{path} {kind}".strip()] += n
        print(f"\n{sum(by.values())} pages:")
        for k, n in sorted(by.items()):
            print(f"  {n:3d}  {k}")


if __name__ == "__main__":
    main()
