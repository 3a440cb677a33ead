#!/usr/bin/env python3
"""NFS caching behaviour that kvfs's correctness argument rests on, measured between two test bed nodes.

Run on both nodes of the NFS test bed (docs/nfs-testbed.md):
    tests/nfs/testbed.sh run --nodes 2 -- 'python3 $KVFS_REPO/tests/nfs/measure_nfs.py'
Node A writes, node B observes; they synchronise out of band (files in the 9p run directory, never on
NFS, so the NFS caches being measured are not disturbed). Both nodes run in one guest kernel, so
time.monotonic() is one clock for both. Each result is printed as "RESULT name: value" and saved to
$KVFS_RESULTS/measure.json. Phases (each on its own file or directory name):
  neg_lookup   B gets ENOENT for a name, A creates it: how long B's stat keeps answering ENOENT;
               in another directory: O_CREAT|O_EXCL on B for such a name (EEXIST expected), and
               whether B's readdir lists such a name and a stat after that readdir finds it
  attr_busy    A appends 4 KiB + fsync every 0.5 s for 12 s to a file it keeps open; B stats it every
               0.1 s: the largest lag of B's size behind A's; then B's stat vs a fresh open+fstat
  attr_idle    the same file idle for IDLE_S s (B keeps stat'ing), then one more append + fsync: how
               long B's stat shows the old size (the attribute cache timeout grows while a file is idle)
  writeback    A writes without fsync (keeps the file open, no stat): when B's O_DIRECT pread sees it on
               the server; then a second write: when a fresh open + buffered read on B sees it
  odirect      B has read a file to its end (buffered); A appends 4 KiB + fsync: B's buffered pread at
               the old end vs an O_DIRECT pread there; A's O_DIRECT pwrite (no fsync) likewise;
               open(O_APPEND|O_DIRECT) on NFS
  rpcs         per-operation RPC counts on A alone (nfsops deltas of its own mount)
Set MEASURE_PHASES="neg_lookup rpcs" to run only some; IDLE_S (default 60), MAX_WAIT_S (default 75).
"""
import errno
import json
import mmap
import os
import subprocess
import sys
import time

NODE = os.environ["KVFS_NODE"]
NFS = os.environ["KVFS_NFS"]
RESULTS = os.environ.get("KVFS_RESULTS", "/tmp")
SYNC = "/tb/sync"
PHASES = os.environ.get("MEASURE_PHASES", "neg_lookup attr_busy attr_idle writeback odirect rpcs").split()
IDLE_S = float(os.environ.get("IDLE_S", "60"))
MAX_WAIT_S = float(os.environ.get("MAX_WAIT_S", "75"))
D = os.path.join(NFS, "measure")
results = {}


def now():
    return time.monotonic()


def result(name, value):
    results[name] = value
    print(f"RESULT {name}: {value}", flush=True)


def signal(name, value=""):
    os.makedirs(SYNC, exist_ok=True)
    tmp = os.path.join(SYNC, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(value))
    os.rename(tmp, os.path.join(SYNC, name))


def wait(name, timeout=600):
    path = os.path.join(SYNC, name)
    end = now() + timeout
    while not os.path.exists(path):
        if now() > end:
            raise SystemExit(f"timed out waiting for {name}")
        time.sleep(0.02)
    with open(path) as f:
        return json.loads(f.read())


def exists(path):
    try:
        os.stat(path)
        return True
    except FileNotFoundError:
        return False


def nfsops():
    out = subprocess.run(["nfsops", NFS], capture_output=True, text=True).stdout
    return {l.split()[0]: int(l.split()[1]) for l in out.splitlines() if l.strip()}


def delta(before):
    after = nfsops()
    d = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
    return " ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none"


def aligned_buf(n):
    return mmap.mmap(-1, n)  # page aligned, as O_DIRECT wants


# ------------------------------------------------------------------------------------------------ phases
def neg_lookup():
    d1, d2 = os.path.join(D, "neg1"), os.path.join(D, "neg2")  # separate directories: no cross-talk
    if NODE == "A":
        os.makedirs(d1, exist_ok=True)
        os.makedirs(d2, exist_ok=True)
        signal("neg-dir")
        wait("neg-enoent")
        t = now()
        for p in (os.path.join(d1, "f"), os.path.join(d2, "excl"), os.path.join(d2, "listed")):
            os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        signal("neg-created", t)
        wait("neg-done", MAX_WAIT_S + 60)
    else:
        wait("neg-dir")
        os.listdir(d1)
        os.listdir(d2)
        for p in (os.path.join(d1, "f"), os.path.join(d2, "excl"), os.path.join(d2, "listed")):
            assert not exists(p)
        signal("neg-enoent")
        t_created = wait("neg-created")
        time.sleep(0.5)
        # directory 2: stat (cached ENOENT?), O_CREAT|O_EXCL, stat again, readdir, stat after it
        st1 = exists(os.path.join(d2, "listed"))
        try:
            os.close(os.open(os.path.join(d2, "excl"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            result("neg_lookup.excl_create_on_B", "SUCCEEDED (the file existed on the server!)")
        except FileExistsError:
            result("neg_lookup.excl_create_on_B", "EEXIST (correct)")
        st2 = exists(os.path.join(d2, "listed"))
        listed = "listed" in os.listdir(d2)
        st3 = exists(os.path.join(d2, "listed"))
        result("neg_lookup.B_sees_other_name: stat / after O_EXCL / readdir lists it / stat after readdir",
               f"{st1} / {st2} / {listed} / {st3}")
        # directory 1: only stat, every 0.25 s
        seen = None
        while now() - t_created < MAX_WAIT_S:
            if exists(os.path.join(d1, "f")):
                seen = now() - t_created
                break
            time.sleep(0.25)
        result("neg_lookup.stat_enoent_after_create_s",
               f"{seen:.1f}" if seen is not None else f">{MAX_WAIT_S:.0f} (still ENOENT)")
        signal("neg-done")


def attr_busy_and_idle(run_busy, run_idle):
    path = os.path.join(D, "attr-file")
    chunk = b"a" * 4096
    if NODE == "A":
        os.makedirs(D, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.fsync(fd)
        signal("attr-ready")
        wait("attr-b-ready")
        size = 0
        if run_busy:
            log = []
            end = now() + 12
            while now() < end:
                os.pwrite(fd, chunk, size)
                os.fsync(fd)
                size += len(chunk)
                log.append((now(), size))
                time.sleep(0.5)
            signal("attr-busy-done", log)
            wait("attr-busy-ack")
        if run_idle:
            time.sleep(IDLE_S)
            os.pwrite(fd, chunk, size)
            os.fsync(fd)
            size += len(chunk)
            signal("attr-idle-appended", [now(), size])
            wait("attr-idle-done", MAX_WAIT_S + 60)
        os.close(fd)
    else:
        wait("attr-ready")
        os.stat(path)
        signal("attr-b-ready")
        if run_busy:
            samples = []  # stat only: an open would revalidate the attributes (close-to-open)
            while not os.path.exists(os.path.join(SYNC, "attr-busy-done")):
                samples.append((now(), os.stat(path).st_size))
                time.sleep(0.1)
            log = wait("attr-busy-done")

            def lag(t, s):  # how long A's (fsync'd) file had already been bigger than s at time t
                later = [ta for ta, sa in log if sa > s and ta <= t]
                return t - min(later) if later else 0.0

            lags = [lag(t, s) for t, s in samples]
            result("attr_busy.stat_max_lag_s", f"{max(lags):.1f} over {len(samples)} stats "
                   f"(median {sorted(lags)[len(lags) // 2]:.1f})")
            s_stat = os.stat(path).st_size
            fd = os.open(path, os.O_RDONLY)
            s_open = os.fstat(fd).st_size
            os.close(fd)
            result("attr_busy.end: A's size / B stat / B fresh open+fstat", f"{log[-1][1]} / {s_stat} / {s_open}")
            signal("attr-busy-ack")
        if run_idle:
            # keep stat'ing while the file is idle: each revalidation that finds it unchanged doubles the
            # attribute cache timeout (acregmin 3 s .. acregmax 60 s)
            while not os.path.exists(os.path.join(SYNC, "attr-idle-appended")):
                size0 = os.stat(path).st_size
                time.sleep(0.25)
            t_app, size1 = wait("attr-idle-appended")
            seen = None
            while now() - t_app < MAX_WAIT_S:
                if os.stat(path).st_size == size1:
                    seen = now() - t_app
                    break
                time.sleep(0.25)
            fd = os.open(path, os.O_RDONLY)
            fresh = os.fstat(fd).st_size
            os.close(fd)
            result(f"attr_idle.stat_shows_old_size_after_{IDLE_S:.0f}s_idle_then_append_s",
                   f"{seen:.1f}" if seen is not None else f">{MAX_WAIT_S:.0f}")
            result("attr_idle.size_before/after/fresh_open", f"{size0}/{size1}/{fresh}")
            signal("attr-idle-done")


def writeback():
    path = os.path.join(D, "wb-file")
    if NODE == "A":
        os.makedirs(D, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.fsync(fd)
        with open("/proc/sys/vm/dirty_expire_centisecs") as f:
            result("writeback.vm.dirty_expire_centisecs", f.read().strip())
        signal("wb-ready")
        wait("wb-b-ready")
        # 1: no fsync, no close, no stat: only writeback sends it; B watches the server with O_DIRECT
        os.pwrite(fd, b"w" * 4096, 0)
        signal("wb-written", now())
        wait("wb-seen1", MAX_WAIT_S + 60)
        # 2: the same, B watching with a fresh open + buffered read every 0.5 s
        os.pwrite(fd, b"v" * 4096, 4096)
        signal("wb-written2", now())
        wait("wb-done", MAX_WAIT_S + 60)
        os.close(fd)
    else:
        wait("wb-ready")
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = aligned_buf(4096)
        signal("wb-b-ready")
        t_w = wait("wb-written")
        seen = None
        while now() - t_w < MAX_WAIT_S:
            if os.preadv(dfd, [buf], 0) == 4096:
                seen = now() - t_w
                break
            time.sleep(0.25)
        os.close(dfd)
        result("writeback.unsynced_write_on_server_(B O_DIRECT poll)_after_s",
               f"{seen:.1f}" if seen is not None else f">{MAX_WAIT_S:.0f}")
        signal("wb-seen1")
        t_w = wait("wb-written2")
        seen = None
        while now() - t_w < MAX_WAIT_S:
            fd = os.open(path, os.O_RDONLY)
            n = len(os.pread(fd, 4096, 4096))
            os.close(fd)
            if n == 4096:
                seen = now() - t_w
                break
            time.sleep(0.5)
        result("writeback.unsynced_write_visible_to_B_fresh_open_after_s",
               f"{seen:.1f}" if seen is not None else f">{MAX_WAIT_S:.0f}")
        signal("wb-done")


def odirect():
    path = os.path.join(D, "od-file")
    chunk = b"d" * 4096
    if NODE == "A":
        os.makedirs(D, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.pwrite(fd, chunk * 4, 0)
        os.fsync(fd)
        signal("od-ready")
        wait("od-b-read")
        os.pwrite(fd, chunk, 4 * 4096)
        os.fsync(fd)
        signal("od-appended")
        wait("od-b-checked")
        dfd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        buf = aligned_buf(4096)
        buf.write(b"e" * 4096)
        os.pwrite(dfd, buf, 5 * 4096)  # O_DIRECT, no fsync
        signal("od-direct-appended")
        wait("od-b-checked2")
        os.close(dfd)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_DIRECT))
            result("odirect.open_O_APPEND_O_DIRECT", "allowed")
        except OSError as e:
            result("odirect.open_O_APPEND_O_DIRECT", errno.errorcode.get(e.errno, str(e.errno)))
        os.close(fd)
    else:
        wait("od-ready")
        fd = os.open(path, os.O_RDONLY)
        while os.read(fd, 65536):
            pass
        signal("od-b-read")
        wait("od-appended")
        b_buf = len(os.pread(fd, 4096, 4 * 4096))
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = aligned_buf(4096)
        b_direct = os.preadv(dfd, [buf], 4 * 4096)
        result("odirect.fsynced_append: B buffered/O_DIRECT pread bytes at old EOF",
               f"{b_buf}/{b_direct} (data {'ok' if buf[:] == chunk else 'WRONG'})")
        signal("od-b-checked")
        wait("od-direct-appended")
        b_buf2 = len(os.pread(fd, 4096, 5 * 4096))
        b_direct2 = os.preadv(dfd, [buf], 5 * 4096)
        result("odirect.O_DIRECT_write_no_fsync: B buffered/O_DIRECT pread bytes",
               f"{b_buf2}/{b_direct2} (data {'ok' if buf[:] == b'e' * 4096 else 'WRONG'})")
        signal("od-b-checked2")
        os.close(dfd)
        os.close(fd)


def rpcs():
    if NODE != "A":
        return
    r = os.path.join(D, "rpc")
    os.makedirs(r, exist_ok=True)
    os.listdir(r)

    def measure(name, fn):
        b = nfsops()
        fn()
        result(f"rpcs.{name}", delta(b))

    def stat_missing():
        assert not exists(os.path.join(r, "missing"))

    def create_close():
        os.close(os.open(os.path.join(r, "f1"), os.O_CREAT | os.O_WRONLY, 0o644))

    def open_close():
        os.close(os.open(os.path.join(r, "f1"), os.O_RDONLY))

    def write_fsync_close():
        fd = os.open(os.path.join(r, "f1"), os.O_WRONLY)
        os.pwrite(fd, b"x" * 4096, 0)
        os.fsync(fd)
        os.close(fd)

    def append_fsync_close():
        fd = os.open(os.path.join(r, "f1"), os.O_WRONLY)
        os.pwrite(fd, b"y" * 4096, 4096)
        os.fsync(fd)
        os.close(fd)

    def read_close():
        fd = os.open(os.path.join(r, "f1"), os.O_RDONLY)
        os.pread(fd, 8192, 0)
        os.close(fd)

    def stat_existing():
        os.stat(os.path.join(r, "f1"))

    def rename():
        os.rename(os.path.join(r, "f1"), os.path.join(r, "f2"))

    def unlink():
        os.unlink(os.path.join(r, "f2"))

    def stat_while_writing():
        fd = os.open(os.path.join(r, "f3"), os.O_CREAT | os.O_WRONLY, 0o644)
        for size in (4096, 1 << 20):
            b = nfsops()
            os.pwrite(fd, b"z" * size, 0)
            result(f"rpcs.buffered_pwrite_{size}_no_fsync", delta(b))
            b = nfsops()
            os.fstat(fd)
            result(f"rpcs.then_fstat_on_writer", delta(b))
            b = nfsops()
            os.fsync(fd)
            result(f"rpcs.then_fsync", delta(b))
        os.close(fd)

    def chunk_256k_create_write_fsync_close():
        fd = os.open(os.path.join(r, "chunk"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, os.urandom(256 * 1024))
        os.fsync(fd)
        os.close(fd)

    def chunk_256k_open_read_close():
        fd = os.open(os.path.join(r, "chunk"), os.O_RDONLY)
        while os.read(fd, 1 << 20):
            pass
        os.close(fd)

    def mkdir():
        os.mkdir(os.path.join(r, "d"))

    def readdir_small():
        os.listdir(r)

    for name, fn in [("stat_missing_name", stat_missing), ("create_close", create_close),
                     ("open_close", open_close), ("write4k_fsync_close", write_fsync_close),
                     ("append4k_fsync_close", append_fsync_close), ("open_read8k_close", read_close),
                     ("stat_existing_cached", stat_existing), ("rename", rename), ("unlink", unlink),
                     ("mkdir", mkdir), ("readdir_5_entries", readdir_small),
                     ("chunk256k_create_write_fsync_close", chunk_256k_create_write_fsync_close),
                     ("chunk256k_open_read_close_own_file", chunk_256k_open_read_close)]:
        measure(name, fn)
    stat_while_writing()


def main():
    print(f"node {NODE}: phases {' '.join(PHASES)}", flush=True)
    t0 = now()
    if NODE not in ("A", "B"):
        print("only nodes A and B take part")
        return
    for p in PHASES:
        t = now()
        if p == "neg_lookup":
            neg_lookup()
        elif p == "attr_busy":
            attr_busy_and_idle(True, "attr_idle" in PHASES)
        elif p == "attr_idle":
            if "attr_busy" not in PHASES:
                attr_busy_and_idle(False, True)
        elif p == "writeback":
            writeback()
        elif p == "odirect":
            odirect()
        elif p == "rpcs":
            rpcs()
        else:
            raise SystemExit(f"unknown phase {p}")
        print(f"phase {p} done in {now() - t:.1f} s", flush=True)
    print(f"all phases in {now() - t0:.1f} s", flush=True)
    with open(os.path.join(RESULTS, "measure.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
