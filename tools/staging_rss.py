#!/usr/bin/env python3
"""Daemon memory of large writers through one mount (docs/benchmarks.md "Staging budget").

  KVFS_BINARY=build/tools/kvfs python3 tools/staging_rss.py --writers 4 --size-mib 36 --staging-size 8MiB

Mounts kvfs over a temp backing dir (tests/integration/kvfs_fixture.py), starts N threads that each write
one file of SIZE MiB with 1 MiB pwrites, keeps every file open until all writes are done, then closes them
all at once. The daemon's VmRSS (/proc/PID/status) is sampled every 2 ms; growth is relative to the RSS
right after mount. Prints one table row: RSS growth while writing, during the closes (peak over the whole
run), spills, backing bytes written, write and close times (single runs: indicative only).
"""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import kvfs_fixture as kf  # noqa: E402

MIB = 1 << 20


def vm_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def block(i, k):
    return ((b"w%d|%d|" % (i, k)).ljust(4096, b".")) * (MIB // 4096)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--size-mib", type=int, default=36)
    ap.add_argument("--staging-size", default="8MiB")
    ap.add_argument("--cache-size", default="16MiB")
    a = ap.parse_args()
    with kf.mounted(staging_size=a.staging_size, cache_size=a.cache_size) as (mnt, _, proc):
        time.sleep(0.5)
        base = vm_rss(proc.pid)
        before = kf.stats(mnt)
        peak = [base]
        stop = threading.Event()

        def monitor():
            while not stop.is_set():
                peak[0] = max(peak[0], vm_rss(proc.pid))
                time.sleep(0.002)

        mon = threading.Thread(target=monitor)
        mon.start()
        fds = [os.open(os.path.join(mnt, "f%d" % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
               for i in range(a.writers)]

        def writer(i):
            for k in range(a.size_mib):
                os.pwrite(fds[i], block(i, k), k * MIB)

        t0 = time.time()
        ts = [threading.Thread(target=writer, args=(i,)) for i in range(a.writers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        t_write = time.time() - t0
        write_peak = peak[0]
        st = kf.stats(mnt)["fuse"]
        t1 = time.time()
        cs = [threading.Thread(target=os.close, args=(fd,)) for fd in fds]
        for t in cs:
            t.start()
        for t in cs:
            t.join()
        t_close = time.time() - t1
        while kf.stats(mnt)["fuse"]["versions_committed"] < a.writers:
            time.sleep(0.01)
        stop.set()
        mon.join()
        after = kf.stats(mnt)
        for i in range(a.writers):  # spot check: first and last MiB of each file
            with open(os.path.join(mnt, "f%d" % i), "rb") as f:
                assert f.read(MIB) == block(i, 0)
                f.seek((a.size_mib - 1) * MIB)
                assert f.read(MIB) == block(i, a.size_mib - 1)
        print("| %s | %d x %d MiB | +%.0f MiB | +%.0f MiB | %d (%.0f MiB) | %.0f MiB | %.2f s | %.2f s | %d |" % (
            a.staging_size, a.writers, a.size_mib, (write_peak - base) / MIB, (peak[0] - base) / MIB,
            st["spills"], st["spilled_bytes_total"] / MIB,
            (after["backing_bytes_written"] - before["backing_bytes_written"]) / MIB, t_write, t_close,
            after["fuse"].get("streamed_commits", 0)))


if __name__ == "__main__":
    main()
