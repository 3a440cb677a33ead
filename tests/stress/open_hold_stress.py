#!/usr/bin/env python3
"""Stress: readers keep files open while writers churn, unlink and rename over them, and eviction runs
(issue #16 part 1; docs/semantics.md §6.10 "An open file keeps its bytes until its last close").

Usage: open_hold_stress.py MNT SECONDS [--writers 2] [--names 24] [--max-size 3MiB] [--read-mnt MNT2] [--json]

--read-mnt: the readers open the names on another mount over the same backing directory (another node,
docs/semantics.md §6.10 "Across nodes"): node B holds node A's segments while A evicts them. There,
ENOENT and ESTALE at open are both legitimate (a peer's replacement: §6.5), and the names appear one peer
poll after A publishes them.

Run it on a kvfs mount with a small --capacity and --segment-size, so that eviction and dead-segment
reclamation run all the time, and the smallest --staging-size (4MiB) with a longer commit delay, so that
readers often open files whose commit is pending and closed versions are spilled. What
tests/integration/open_hold_test.py OpenHoldStressTest runs for 12 s (KVFS_HOLD_STRESS_SECONDS=600 for
the 10-minute run of issue #16):
    KVFS_TEST_COMMIT_DELAY_MS=100 KVFS_TEST_DEAD_SEGMENT_AGE_MS=200 KVFS_TEST_DROP_GRACE_MS=100 \
    kvfs mount MNT --backing B --segment-size 4MiB --capacity 48MiB --cache-size 8MiB --staging-size 4MiB

Writers (processes) publish files under a pool of final names with temp + rename (the connectors'
pattern), unlink names and rename one final name over another. Every file is unique: each 4 KiB block
starts with a 24-byte tag (file id, block index, file size) followed by bytes of a random base buffer,
so a block of another file, another offset or zeros is told apart from the right one.
Readers (one process per kind: read(2) with the page cache dropped, O_DIRECT, mmap) open final names
(ENOENT at open is legitimate: unlinked, renamed away or evicted; ESTALE at open is counted apart: once
in 10 minutes before the fix under Fixed in docs/semantics.md Known bugs), keep up to 4 files open each for
0.2-3 s while the writers go on, read random blocks meanwhile and every byte before the close, and
compare each with the file's expected bytes. Counted as failures: EIO or any other error of a read
after a successful open, ENOENT after the open, a size that differs from the file's, wrong bytes, and
a reader killed by SIGBUS (the mmap reader runs in a process the parent restarts).
At the end it prints the figures (files verified, bytes verified, opens, ENOENT at open, evictions,
errors) and exits 1 on any failure, 0 otherwise. Python 3 stdlib only.
"""
import argparse
import errno
import json
import mmap
import multiprocessing as mp
import os
import random
import signal
import struct
import sys
import time

BLOCK = 4096
TAG = struct.Struct("<QQQ")  # file id, block index, file size
MiB = 1 << 20


def parse_size(s):
    s = s.strip()
    for suf, mul in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1024)):
        if s.endswith(suf):
            return int(float(s[: -len(suf)]) * mul)
    return int(s)


class Content:
    """The expected bytes of file `fid` of `size` bytes (a shared random base + per-block tags)."""

    def __init__(self, max_size, seed=1234):
        self.base = random.Random(seed).randbytes(max_size + BLOCK)

    def make(self, fid, size):
        out = bytearray(self.base[:size])
        for blk in range(0, (size + BLOCK - 1) // BLOCK):
            off = blk * BLOCK
            tag = TAG.pack(fid, blk, size)
            n = min(len(tag), size - off)
            out[off:off + n] = tag[:n]
        return bytes(out)

    def block(self, fid, size, blk):
        off = blk * BLOCK
        end = min(off + BLOCK, size)
        b = bytearray(self.base[off:end])
        tag = TAG.pack(fid, blk, size)
        n = min(len(tag), end - off)
        b[:n] = tag[:n]
        return bytes(b)


# ---- writers -----------------------------------------------------------------------------------------

def writer_main(wid, mnt, names, max_size, stop_at, counts):
    rng = random.Random(os.getpid() ^ int(time.time()))
    content = Content(max_size)
    fid = (wid + 1) << 40
    local = {"published": 0, "unlinks": 0, "renames_over": 0, "write_errors": 0, "bytes_written": 0}
    while time.time() < stop_at:
        op = rng.random()
        try:
            if op < 0.70:
                fid += 1
                size = rng.randint(16 * 1024, max_size)
                data = content.make(fid, size)
                tmp = os.path.join(mnt, ".tmp-w%d-%d" % (wid, fid))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view[:MiB]):]
                finally:
                    os.close(fd)
                os.rename(tmp, os.path.join(mnt, rng.choice(names)))
                local["published"] += 1
                local["bytes_written"] += size
            elif op < 0.85:
                os.unlink(os.path.join(mnt, rng.choice(names)))
                local["unlinks"] += 1
            else:
                a, b = rng.sample(names, 2)
                os.rename(os.path.join(mnt, a), os.path.join(mnt, b))
                local["renames_over"] += 1
        except OSError as e:
            if e.errno == errno.ENOENT:
                continue  # the name was gone (unlinked or renamed away by another writer)
            # ENOSPC: everything left is held or pinned (docs/semantics.md §1 staging caveats); not a
            # failure of the hold, but counted.
            local["write_errors"] += 1
            try:
                os.unlink(tmp)
            except (OSError, NameError):
                pass
            time.sleep(0.05)
    counts.put(("writer", local))


# ---- readers -----------------------------------------------------------------------------------------

class Held:
    def __init__(self, path, fd, fid, size, kind, until):
        self.path, self.fd, self.fid, self.size, self.kind, self.until = path, fd, fid, size, kind, until
        self.map = None
        self.buf = None


def reader_main(kind, mnt, names, max_size, stop_at, counts, seed):
    rng = random.Random(seed)
    content = Content(max_size)
    c = {"opens": 0, "open_enoent": 0, "open_estale": 0, "open_errors": 0, "files_verified": 0, "bytes_verified": 0,
         "blocks_checked": 0, "eio": 0, "enoent_after_open": 0, "other_errors": 0, "wrong_bytes": 0,
         "wrong_size": 0, "first_failures": []}
    held = []
    dbuf = mmap.mmap(-1, MiB) if kind == "direct" else None

    def fail(what, h, detail):
        c[what] += 1
        if len(c["first_failures"]) < 5:
            c["first_failures"].append("%s %s %s (file id %d, %d bytes): %s" %
                                       (kind, what, h.path, h.fid, h.size, detail))

    def read_range(h, off, n):
        """n bytes of h at off (fewer at EOF)."""
        if kind == "mmap":
            return h.map[off:off + n]
        if kind == "direct":
            aoff = off - off % BLOCK
            out = bytearray()
            while aoff + len(out) < off + n:
                got = os.preadv(h.fd, [dbuf], aoff + len(out))
                if got == 0:
                    break
                out += dbuf[:got]
            return bytes(out[off - aoff:off - aoff + n])
        out = bytearray()
        while len(out) < n:
            b = os.pread(h.fd, min(MiB, n - len(out)), off + len(out))
            if not b:
                break
            out += b
        return bytes(out)

    def check_blocks(h, blocks):
        for blk in blocks:
            off = blk * BLOCK
            want = content.block(h.fid, h.size, blk)
            try:
                got = read_range(h, off, len(want))
            except OSError as e:
                if e.errno == errno.EIO:
                    fail("eio", h, "read at %d" % off)
                elif e.errno == errno.ENOENT:
                    fail("enoent_after_open", h, "read at %d" % off)
                else:
                    fail("other_errors", h, "read at %d: %s" % (off, e))
                return False
            c["blocks_checked"] += 1
            if got != want:
                fail("wrong_bytes", h, "block %d: got %d bytes, tag %r" % (blk, len(got), got[:24]))
                return False
        return True

    def close(h, verify):
        ok = True
        if verify:
            if kind == "read":
                os.posix_fadvise(h.fd, 0, 0, os.POSIX_FADV_DONTNEED)  # reads reach the daemon
            # Every byte, 1 MiB at a time (block by block compared).
            off = 0
            while off < h.size and ok:
                n = min(MiB, h.size - off)
                try:
                    got = read_range(h, off, n)
                except OSError as e:
                    what = {errno.EIO: "eio", errno.ENOENT: "enoent_after_open"}.get(e.errno, "other_errors")
                    fail(what, h, "read at %d: %s" % (off, e))
                    ok = False
                    break
                if len(got) != n:
                    fail("wrong_size", h, "read %d bytes at %d, expected %d" % (len(got), off, n))
                    ok = False
                    break
                for k in range(0, n, BLOCK):
                    blk = (off + k) // BLOCK
                    if got[k:k + BLOCK] != content.block(h.fid, h.size, blk):
                        fail("wrong_bytes", h, "block %d" % blk)
                        ok = False
                        break
                off += n
            if ok:
                c["files_verified"] += 1
                c["bytes_verified"] += h.size
        if h.map is not None:
            h.map.close()
        os.close(h.fd)

    try:
        while time.time() < stop_at:
            now = time.time()
            # Close (after a full verification) the handles whose time is up.
            for h in [h for h in held if h.until <= now]:
                held.remove(h)
                close(h, True)
            if len(held) < 4:
                path = os.path.join(mnt, rng.choice(names))
                flags = os.O_RDONLY | (os.O_DIRECT if kind == "direct" else 0)
                try:
                    fd = os.open(path, flags)
                except OSError as e:
                    if e.errno == errno.ENOENT:
                        c["open_enoent"] += 1
                    elif e.errno == errno.ESTALE:
                        # Not a hold failure (nothing was open yet), and not a documented answer for a
                        # read-only open on one node either (its cause is fixed: docs/semantics.md,
                        # Fixed under Known bugs): counted apart, to see if another cause remains.
                        c["open_estale"] += 1
                        if len(c["first_failures"]) < 5:
                            c["first_failures"].append("(not counted as a failure) %s open %s: %s" %
                                                       (kind, path, e))
                    else:
                        c["open_errors"] += 1
                        if len(c["first_failures"]) < 5:
                            c["first_failures"].append("%s open %s: %s" % (kind, path, e))
                    time.sleep(0.01)
                    continue
                c["opens"] += 1
                size = os.fstat(fd).st_size
                h = Held(path, fd, 0, size, kind, now + rng.uniform(0.2, 3.0))
                try:
                    if size < TAG.size:
                        raise ValueError("size %d" % size)
                    if kind == "mmap":
                        h.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
                    head = read_range(h, 0, TAG.size)
                    fid, blk, tsize = TAG.unpack(head)
                    h.fid = fid
                    if blk != 0 or tsize != size:
                        fail("wrong_size" if blk == 0 else "wrong_bytes", h,
                             "header: block %d, size %d, fstat %d" % (blk, tsize, size))
                        close(h, False)
                        continue
                except OSError as e:
                    what = {errno.EIO: "eio", errno.ENOENT: "enoent_after_open"}.get(e.errno, "other_errors")
                    fail(what, h, "first read: %s" % e)
                    close(h, False)
                    continue
                except ValueError as e:
                    fail("wrong_size", h, str(e))
                    close(h, False)
                    continue
                held.append(h)
            # Random blocks of the held files, while the writers churn around them.
            for h in list(held):
                nblk = (h.size + BLOCK - 1) // BLOCK
                if not check_blocks(h, [rng.randrange(nblk) for _ in range(2)]):
                    held.remove(h)
                    close(h, False)
            time.sleep(0.005)
        for h in held:
            close(h, True)
    finally:
        counts.put((kind, c))


def stats(mnt):
    try:
        return json.loads(os.getxattr(mnt, "user.kvfs.stats").decode())
    except OSError:
        return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mnt")
    ap.add_argument("seconds", type=float)
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--names", type=int, default=24)
    ap.add_argument("--max-size", default="3MiB")
    ap.add_argument("--read-mnt", default=None, help="readers open the names here (another node's mount)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    max_size = parse_size(a.max_size)
    names = ["chunk-%03d" % i for i in range(a.names)]
    before = stats(a.mnt)
    stop_at = time.time() + a.seconds
    ctx = mp.get_context("fork")
    counts = ctx.Queue()
    writers = [ctx.Process(target=writer_main, args=(w, a.mnt, names, max_size, stop_at, counts))
               for w in range(a.writers)]
    for p in writers:
        p.start()
    readers = {}
    sigbus = 0
    restarts = 0
    seed = int(time.time())

    def start_reader(kind):
        nonlocal seed
        seed += 1
        p = ctx.Process(target=reader_main, args=(kind, a.read_mnt or a.mnt, names, max_size, stop_at, counts,
                                                  seed))
        p.start()
        readers[kind] = p

    for kind in ("read", "direct", "mmap"):
        start_reader(kind)
    results = {"writer": [], "read": [], "direct": [], "mmap": []}
    live = set(readers)
    while live or any(p.is_alive() for p in writers):
        while not counts.empty():
            k, v = counts.get()
            results[k].append(v)
        for kind in list(live):
            p = readers[kind]
            if p.is_alive():
                continue
            p.join()
            if p.exitcode is not None and p.exitcode < 0:
                # Killed by a signal (SIGBUS from a mapping): counted, restarted until the end.
                if -p.exitcode == signal.SIGBUS:
                    sigbus += 1
                else:
                    results.setdefault("killed", []).append(-p.exitcode)
                if time.time() < stop_at - 0.5:
                    restarts += 1
                    start_reader(kind)
                    continue
            live.discard(kind)
        time.sleep(0.1)
    for p in writers:
        p.join()
    time.sleep(0.2)
    while not counts.empty():
        k, v = counts.get()
        results[k].append(v)
    after = stats(a.mnt)

    total = {}
    first = []
    for kind in ("read", "direct", "mmap"):
        for c in results[kind]:
            first += c.pop("first_failures")
            for k, v in c.items():
                total[k] = total.get(k, 0) + v
    w = {}
    for c in results["writer"]:
        for k, v in c.items():
            w[k] = w.get(k, 0) + v
    ev_b, ev_a = before.get("eviction", {}), after.get("eviction", {})
    out = {
        "seconds": a.seconds,
        "writers": w,
        "readers": total,
        "per_kind_files_verified": {kind: sum(c.get("files_verified", 0) for c in results[kind])
                                    for kind in ("read", "direct", "mmap")},
        "sigbus": sigbus,
        "readers_killed_otherwise": results.get("killed", []),
        "reader_restarts": restarts,
        "segments_dropped": ev_a.get("segments_dropped", 0) - ev_b.get("segments_dropped", 0),
        "segments_unlinked": ev_a.get("segments_unlinked", 0) - ev_b.get("segments_unlinked", 0),
        "eviction_after": ev_a,
        "reader_node_eviction_after": stats(a.read_mnt).get("eviction", {}) if a.read_mnt else None,
        "first_failures": first[:10],
    }
    failures = (total.get("eio", 0) + total.get("enoent_after_open", 0) + total.get("other_errors", 0) +
                total.get("wrong_bytes", 0) + total.get("wrong_size", 0) + total.get("open_errors", 0) +
                sigbus + len(results.get("killed", [])))
    # A reader process that died without reporting is a failure too.
    for kind in ("read", "direct", "mmap"):
        if not results[kind]:
            failures += 1
            first.append("%s reader reported nothing" % kind)
    out["failures"] = failures
    if a.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        r = total
        print("open_hold_stress: %.0f s, %d writer(s): %d files published (%.1f MiB), %d unlinks, %d renames "
              "over, %d write errors" % (a.seconds, a.writers, w.get("published", 0),
                                         w.get("bytes_written", 0) / MiB, w.get("unlinks", 0),
                                         w.get("renames_over", 0), w.get("write_errors", 0)))
        print("  readers: %d opens (%d ENOENT, %d ESTALE at open), %d files verified whole (read %d, direct %d, mmap %d), "
              "%.1f MiB verified, %d random blocks checked" %
              (r.get("opens", 0), r.get("open_enoent", 0), r.get("open_estale", 0), r.get("files_verified", 0),
               out["per_kind_files_verified"]["read"], out["per_kind_files_verified"]["direct"],
               out["per_kind_files_verified"]["mmap"], r.get("bytes_verified", 0) / MiB,
               r.get("blocks_checked", 0)))
        print("  eviction: %d segments dropped (evicted or dead), %d segments unlinked" %
              (out["segments_dropped"], out["segments_unlinked"]))
        print("  errors: EIO %d, ENOENT after open %d, other %d, wrong bytes %d, wrong size %d, open errors %d, "
              "SIGBUS %d, killed otherwise %d" %
              (r.get("eio", 0), r.get("enoent_after_open", 0), r.get("other_errors", 0), r.get("wrong_bytes", 0),
               r.get("wrong_size", 0), r.get("open_errors", 0), sigbus, len(results.get("killed", []))))
        for f in first[:10]:
            print("  event: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
