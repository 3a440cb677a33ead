#!/usr/bin/env python3
"""Stress: a peer never sees a writer's unclosed bytes while closes are sealed (docs/design.md §13
"Sealed closes"; docs/semantics.md §1, the commit of a close is the state of that close).

Usage: KVFS_BINARY=build/tools/kvfs sealed_close_stress.py [CLOSES]   (default 3000; exit 1 on a violation)

Two nodes over one temporary backing directory. On node a one writer, for k = 0, 1, ...: open(O_RDWR),
pwrite page k = PROV(k), in 5 % of the iterations sleep 20 ms (a deferred commit then runs while it is
open), pwrite page k = FINAL(k), close; in 2 % sleep 10 ms after the close. Node b reads the whole file
through one open (a snapshot of one committed version) in a loop. A violation: a PROV page (bytes a writer
had not closed), or FINAL pages that are not a prefix 0..n-1 (a commit out of close order). Counts only.
Before the as-flushed commit of a release whose own FLUSH sealed the version and of the last writer's
deferred commit, about one violation per 3,000 closes (the next OPEN came before the previous RELEASE);
0 in 9,000 after.
"""
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import kvfs_fixture as kf  # noqa: E402

PAGE = 4096
SIZE = 16 << 20


def page(tag, k):
    return struct.pack("<8sQ", tag, k) * (PAGE // 16)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    assert n <= SIZE // PAGE - 1
    root = tempfile.mkdtemp(prefix="kvfs-sealed-stress-")
    os.mkdir(os.path.join(root, "backing"))

    class Spec:
        pass

    def spec(name):
        s = Spec()
        s.backing, s.index, s.mnt, s.root = (os.path.join(root, "backing"), os.path.join(root, "idx-" + name),
                                             os.path.join(root, "mnt-" + name), root)
        os.makedirs(s.mnt, exist_ok=True)
        return s

    bad, reads = [], [0]
    try:
        with kf.mounted(backing=spec("a"), node_id="a", peer_poll_ms=50) as (a, _, _):
            p = os.path.join(a, "f.bin")
            fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, SIZE)
            os.pwrite(fd, b"z" * PAGE, SIZE - PAGE)
            os.close(fd)
            time.sleep(0.3)
            with kf.mounted(backing=spec("b"), node_id="b", peer_poll_ms=50) as (b, _, _):
                q = os.path.join(b, "f.bin")
                while not os.path.exists(q):
                    time.sleep(0.05)
                done = threading.Event()

                def reader():
                    while not done.is_set():
                        try:
                            with open(q, "rb") as f:
                                d = f.read()
                        except OSError:
                            continue
                        reads[0] += 1
                        final = [k for k in range(n) if d[k * PAGE:k * PAGE + 8] == b"FINALFIN"]
                        prov = [k for k in range(n) if d[k * PAGE:k * PAGE + 8] == b"PROVPROV"]
                        if prov:
                            bad.append(("unclosed page", prov[:3]))
                        if final and len(final) != final[-1] + 1:
                            bad.append(("not a prefix", final[-1], len(final)))

                t = threading.Thread(target=reader)
                t.start()
                rnd = random.Random(5)
                for k in range(n):
                    fd = os.open(p, os.O_RDWR)
                    os.pwrite(fd, page(b"PROVPROV", k), k * PAGE)
                    if rnd.random() < 0.05:
                        time.sleep(0.02)
                    os.pwrite(fd, page(b"FINALFIN", k), k * PAGE)
                    os.close(fd)
                    if rnd.random() < 0.02:
                        time.sleep(0.01)
                time.sleep(1.0)
                done.set()
                t.join()
                f = kf.stats(a)["fuse"]
                with open(q, "rb") as fh:
                    d = fh.read()
                fin = sum(1 for k in range(n) if d[k * PAGE:k * PAGE + 8] == b"FINALFIN")
                if fin != n:
                    bad.append(("final pages on b at the end", fin, n))
                print("closes %d, snapshots read on b %d, violations %d %s; sealed_closes %s, sealed_flushes %s"
                      % (n, reads[0], len(bad), bad[:3], f.get("sealed_closes"), f.get("sealed_flushes")))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
