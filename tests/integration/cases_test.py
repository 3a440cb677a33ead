#!/usr/bin/env python3
"""Failure cases from other file systems (docs/design.md §11), each with its expected value as the
assertion; runs against a plain temp dir and a kvfs mount. python3 stdlib only.

  case 1   write after rename of an open file (+ rename over an existing name); also after remount
  case 3   shrinking an open file: ftruncate(fd, 100) -> pread 100 B, fstat/stat (other process) 100
  case 4   reading a file while it is written (reader in another process sees only prefixes); with
           temp + rename, never a partial file under the final name
  case 6   O_DIRECT reads (dd bs=1024 and bs=4096 iflag=direct) with the right checksum: fresh, after a
           remount (not in kvfs's LRU), during a buffered reader; fio randread --verify=crc32c on 64 MiB
           when fio is installed, else 4 KiB O_DIRECT random reads verified in Python
  case 7   fchmod(0444) / utime / truncate-to-same-size on an open writer; a child mmaps both pages:
           no SIGBUS, st_size 8192 before and after the writer closes
  case 8   big directory: listdir = N, `ls -f | wc -l` = N + 2, scandir the same set; again while another
           process creates files in the same directory
  case 10  readers exists -> open -> read (checksum in the name), deleters, writers (temp + rename):
           every failure is a clean ENOENT; an fd opened before the unlink reads the full old content

Environment (scaled for CI, < 3 minutes in total):
  KVFS_CASE8_SIZES     comma-separated directory sizes (default "10000"; creating 100,000 files takes
                       ~25 s on this VM's ext4 alone)
  KVFS_CASE10_SECONDS  duration of case 10 (default 20; docs/design.md §11 says 60)
  KVFS_CASES_LONG=1    the long versions: case 8 with 10,000 and 100,000 files, case 10 for 60 s
"""

import hashlib
import json
import mmap
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvfs_target as kt  # noqa: E402
from trace_replay import pattern_bytes  # noqa: E402

PY = sys.executable
MIB = 1 << 20


def run_py(code, *args, timeout=120):
    """Runs a python3 snippet in another process; returns CompletedProcess (text)."""
    return subprocess.run([PY, "-c", code] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout)


def other_process_size(path):
    r = run_py("import os,sys; print(os.stat(sys.argv[1]).st_size)", path)
    if r.returncode != 0:
        return "error: " + r.stderr.strip()[-200:]
    return int(r.stdout)


def read_path(path):
    with open(path, "rb") as f:
        return f.read()


def sha(b):
    return hashlib.sha256(b).hexdigest()


class _Cases:
    KIND = None
    maxDiff = 2000

    def setUp(self):
        kt.skip_if_disabled(self, self.KIND)

    # ---------------------------------------------------------------------------------------------- 1
    def test_case01_write_after_rename_of_open_file(self):
        with kt.target(self.KIND) as t:
            a, b = t.path("a"), t.path("b")
            fd = os.open(a, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # creat("a")
            os.rename(a, b)
            self.assertEqual(10, os.write(fd, b"0123456789"))
            os.close(fd)
            self.assertEqual(b"0123456789", read_path(b))
            self.assertFalse(os.path.exists(a), "a still exists after rename")
            self.assertEqual(10, os.stat(b).st_size)
            t.remount()
            self.assertEqual(b"0123456789", read_path(t.path("b")), "after remount")
            self.assertFalse(os.path.exists(t.path("a")), "a exists after remount")
            self.assertTrue(t.alive())

    def test_case01_variant_rename_over_existing(self):
        with kt.target(self.KIND) as t:
            a, b = t.path("a"), t.path("b")
            with open(b, "wb") as f:
                f.write(b"old content of b, longer than ten bytes")
            fd = os.open(a, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            os.rename(a, b)
            self.assertEqual(10, os.write(fd, b"0123456789"))
            os.close(fd)
            self.assertEqual(b"0123456789", read_path(b))
            self.assertEqual(["b"], sorted(os.listdir(t.root)))
            t.remount()
            self.assertEqual(b"0123456789", read_path(t.path("b")), "after remount")
            self.assertEqual(["b"], sorted(os.listdir(t.root)), "after remount")

    # ---------------------------------------------------------------------------------------------- 3
    def test_case03_shrinking_an_open_file(self):
        with kt.target(self.KIND) as t:
            f = t.path("f")
            data = random.Random(3).randbytes(8192)
            with open(f, "wb") as fh:
                fh.write(data)
            fd = os.open(f, os.O_RDWR)
            try:
                os.ftruncate(fd, 100)
                got = os.pread(fd, 8192, 0)
                self.assertEqual(100, len(got), "pread after ftruncate(100)")
                self.assertEqual(data[:100], got)
                self.assertEqual(100, os.fstat(fd).st_size)
                self.assertEqual(100, other_process_size(f), "stat from another process, fd open")
            finally:
                os.close(fd)
            self.assertEqual(100, os.stat(f).st_size)
            self.assertEqual(100, other_process_size(f), "stat from another process, after close")
            self.assertEqual(data[:100], read_path(f))

    # ---------------------------------------------------------------------------------------------- 4
    READER4 = r"""
import hashlib, json, os, sys, time
sys.path.insert(0, sys.argv[4])
from trace_replay import pattern_bytes
path, total, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
want = pattern_bytes("blk4", total)
obs = {"polls": 0, "enoent": 0, "partial": 0, "full": 0, "read_behind_stat": 0, "bad": []}
deadline = time.time() + 60
while time.time() < deadline:
    obs["polls"] += 1
    finished = os.path.exists(path + ".done")  # checked before the stat: the file is complete then
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            got = f.read()
            size_after = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        obs["enoent"] += 1
        if finished:
            obs["bad"].append("ENOENT after the writer finished")
            break
        continue
    except OSError as e:
        obs["bad"].append("error %s" % e)
        continue
    if got != want[:len(got)]:
        i = next((k for k in range(len(got)) if got[k] != want[k]), len(got))
        obs["bad"].append("not a prefix: %d bytes, first wrong byte at %d (%r)" % (len(got), i, got[i:i+8]))
    elif not (len(got) <= size_after and size <= size_after):
        obs["bad"].append("sizes not monotonic: stat %d, read %d, fstat after %d" % (size, len(got), size_after))
    elif len(got) < size:
        # The kernel's window (docs/semantics.md §3 read): a write(2) not yet returned is in the
        # daemon's size but not in the i_size a page-cache read stops at. Counted, not a failure.
        obs["read_behind_stat"] += 1
    elif len(got) == total:
        obs["full"] += 1
    else:
        obs["partial"] += 1
        if mode == "rename":
            obs["bad"].append("partial file under the final name: %d of %d bytes" % (len(got), total))
    if finished and len(got) == total:
        break
print(json.dumps(obs))
"""

    def _case4(self, mode):
        total, step = 4 * MIB, 64 * 1024
        want = pattern_bytes("blk4", total)
        with kt.target(self.KIND) as t:
            final = t.path("c")
            done = final + ".done"
            reader = subprocess.Popen([PY, "-c", self.READER4, final, str(total), mode, HERE],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                time.sleep(0.2)
                path = final if mode == "direct" else t.path("c.tmp")
                fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
                for off in range(0, total, step):
                    self.assertEqual(step, os.write(fd, want[off:off + step]))
                    time.sleep(0.01)
                os.close(fd)
                if mode == "rename":
                    os.rename(path, final)
                open(done, "w").close()
                out, err = reader.communicate(timeout=90)
            finally:
                if reader.poll() is None:
                    reader.kill()  # only the pid we started
                    reader.wait()
            self.assertEqual(0, reader.returncode, err[-500:])
            obs = json.loads(out)
            self.assertEqual([], obs["bad"][:5], "reader saw bad data (%s): %r" % (mode, obs))
            self.assertGreater(obs["full"], 0, "reader never saw the complete file: %r" % obs)
            self.assertEqual(want, read_path(final))

    def test_case04_read_while_written(self):
        self._case4("direct")

    def test_case04_temp_and_rename_never_partial(self):
        self._case4("rename")

    # ---------------------------------------------------------------------------------------------- 6
    def _dd_sha(self, path, bs):
        r = subprocess.run(["dd", "if=" + path, "bs=%d" % bs, "iflag=direct", "status=none"],
                           capture_output=True, timeout=120)
        self.assertEqual(0, r.returncode, "dd bs=%d iflag=direct: %s" % (bs, r.stderr.decode()[-300:]))
        return sha(r.stdout)

    def test_case06_odirect_read_every_path(self):
        data = random.Random(6).randbytes(MIB)
        want = sha(data)
        with kt.target(self.KIND) as t:
            f = t.path("f")
            with open(f, "wb") as fh:
                fh.write(data)
            # (a) fresh (in kvfs's LRU / page cache)
            read_path(f)
            for bs in (1024, 4096):
                self.assertEqual(want, self._dd_sha(f, bs), "(a) in cache, bs=%d" % bs)
            # (b) not cached: remount (new daemon: empty LRU) and drop the kernel's pages of the file
            t.remount()
            f = t.path("f")
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
            for bs in (1024, 4096):
                self.assertEqual(want, self._dd_sha(f, bs), "(b) evicted, bs=%d" % bs)
            # (c) while a buffered reader reads it
            stop = threading.Event()
            errs = []

            def buffered():
                while not stop.is_set():
                    try:
                        if sha(read_path(f)) != want:
                            errs.append("buffered reader saw wrong content")
                    except OSError as e:
                        errs.append("buffered reader: %s" % e)

            th = threading.Thread(target=buffered)
            th.start()
            try:
                for _ in range(3):
                    for bs in (1024, 4096):
                        self.assertEqual(want, self._dd_sha(f, bs), "(c) concurrent buffered reader, bs=%d" % bs)
            finally:
                stop.set()
                th.join()
            self.assertEqual([], errs[:3])

    def test_case06_random_4k_direct_reads_64mib(self):
        size = 64 * MIB
        with kt.target(self.KIND) as t:
            f = t.path("big")
            if shutil.which("fio"):
                common = ["--name=case6", "--filename=" + f, "--size=64M", "--bs=4k", "--direct=1",
                          "--verify=crc32c", "--verify_state_save=0", "--ioengine=psync",
                          "--output-format=terse"]
                w = subprocess.run(["fio"] + common + ["--rw=write", "--do_verify=0"], capture_output=True,
                                   text=True, timeout=300)
                self.assertEqual(0, w.returncode, "fio write: " + w.stderr[-500:])
                r = subprocess.run(["fio"] + common + ["--rw=randread", "--verify_only", "--verify_fatal=1"],
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(0, r.returncode, "fio randread verify: " + r.stdout[-500:] + r.stderr[-500:])
                self.assertNotIn("verify", r.stderr.lower().replace("verify_", ""), r.stderr[-500:])
                return
            # No fio: dd writes the file with O_DIRECT in 1 MiB blocks, Python verifies 4 KiB O_DIRECT preads.
            src = os.path.join(kt.tmp_parent(), "kvfs-case6-src-%d" % os.getpid())
            try:
                rng = random.Random(66)
                with open(src, "wb") as fh:
                    for _ in range(size // MIB):
                        fh.write(rng.randbytes(MIB))
                r = subprocess.run(["dd", "if=" + src, "of=" + f, "bs=1M", "oflag=direct", "status=none"],
                                   capture_output=True, timeout=300)
                self.assertEqual(0, r.returncode, "dd oflag=direct: " + r.stderr.decode()[-300:])
                with open(src, "rb") as fh:
                    ref = fh.read()
            finally:
                if os.path.exists(src):
                    os.unlink(src)
            self.assertEqual(size, os.stat(f).st_size)
            fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
            buf = kt.aligned_buffer(4096)
            bad = []
            done, t0 = 0, time.time()
            try:
                rng = random.Random(67)
                with memoryview(buf) as v:
                    # 4000 reads, bounded at 45 s so a slow mount fails instead of stalling CI.
                    while done < 4000 and time.time() - t0 < 45:
                        off = rng.randrange(size // 4096) * 4096
                        n = os.preadv(fd, [v], off)
                        done += 1
                        if n != 4096 or buf[:4096] != ref[off:off + 4096]:
                            bad.append((off, n))
            finally:
                os.close(fd)
                buf.close()
            elapsed = time.time() - t0
            self.assertEqual([], bad[:5], "%d of %d random 4 KiB O_DIRECT reads wrong" % (len(bad), done))
            # docs/design.md §10: 4 KiB-at-a-time readers must still reach useful throughput.
            self.assertEqual(4000, done, "only %d random 4 KiB O_DIRECT preads in %.0f s (%.1f ms each)"
                             % (done, elapsed, 1000 * elapsed / max(done, 1)))
            self.assertEqual(sha(ref), self._dd_sha(f, MIB))

    # ---------------------------------------------------------------------------------------------- 7
    CHILD7 = r"""
import mmap, os, sys
p, want_hex = sys.argv[1], sys.argv[2]
fd = os.open(p, os.O_RDONLY)
m = mmap.mmap(fd, 8192, prot=mmap.PROT_READ)
a, b = m[0], m[4096]           # touch both pages: SIGBUS kills us here if the size is wrong
whole = m[:8192]
m.close()
os.close(fd)
print(whole.hex() == want_hex, os.stat(p).st_size)
"""

    def _case7(self, action):
        with kt.target(self.KIND) as t:
            p = t.path("p")
            data = random.Random(7).randbytes(8192)
            fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                self.assertEqual(8192, os.write(fd, data))
                if action == "fchmod":
                    os.fchmod(fd, 0o444)
                elif action == "utime":
                    os.utime(p, (1_600_000_000, 1_600_000_000))
                elif action == "truncate":
                    os.truncate(p, 8192)
                self.assertEqual(8192, os.stat(p).st_size, "st_size before the writer closes")
                r = run_py(self.CHILD7, p, data.hex())
                self.assertNotEqual(-signal.SIGBUS, r.returncode, "child got SIGBUS (%s)" % action)
                self.assertEqual(0, r.returncode, r.stderr[-500:])
                self.assertEqual("True 8192", r.stdout.strip(), "child's mmap view (%s)" % action)
            finally:
                os.close(fd)
            self.assertEqual(8192, os.stat(p).st_size, "st_size after the writer closed")
            r = run_py(self.CHILD7, p, data.hex())
            self.assertEqual(0, r.returncode, r.stderr[-500:])
            self.assertEqual("True 8192", r.stdout.strip())
            if action == "fchmod":
                self.assertEqual(0o444, os.stat(p).st_mode & 0o777)
            if action == "utime":
                self.assertEqual(1_600_000_000, int(os.stat(p).st_mtime))

    def test_case07_fchmod_open_writer_then_mmap(self):
        self._case7("fchmod")

    def test_case07_utime_open_writer_then_mmap(self):
        self._case7("utime")

    def test_case07_truncate_same_size_open_writer_then_mmap(self):
        self._case7("truncate")

    # ---------------------------------------------------------------------------------------------- 8
    CREATOR8 = r"""
import os, sys
d, n, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for i in range(n):
    os.close(os.open(os.path.join(d, "%s%07d" % (prefix, i)), os.O_CREAT | os.O_WRONLY, 0o644))
print(n)
"""

    def _listing_checks(self, d, expected, label):
        names = os.listdir(d)
        self.assertEqual(len(expected), len(names), "%s: len(os.listdir)" % label)
        self.assertEqual(len(names), len(set(names)), "%s: duplicate names in listdir" % label)
        ls = subprocess.run(["ls", "-f", d], capture_output=True, text=True, timeout=300)
        self.assertEqual(0, ls.returncode, ls.stderr)
        lines = ls.stdout.splitlines()
        self.assertEqual(len(expected) + 2, len(lines), "%s: ls -f | wc -l" % label)
        self.assertEqual(set(expected) | {".", ".."}, set(lines), "%s: ls -f names" % label)
        with os.scandir(d) as it:
            sc = [e.name for e in it]
        self.assertEqual(len(sc), len(set(sc)), "%s: duplicate names in scandir" % label)
        self.assertEqual(set(expected), set(sc), "%s: scandir set" % label)
        self.assertEqual(set(expected), set(names), "%s: listdir set" % label)

    def test_case08_big_directories(self):
        default = "10000,100000" if os.environ.get("KVFS_CASES_LONG") else "10000"
        sizes = [int(x) for x in os.environ.get("KVFS_CASE8_SIZES", default).split(",") if x]
        with kt.target(self.KIND) as t:
            for n in sizes:
                d = t.path("big%d" % n)
                os.mkdir(d)
                names = ["f%07d" % i for i in range(n)]
                for name in names:
                    os.close(os.open(os.path.join(d, name), os.O_CREAT | os.O_WRONLY, 0o644))
                self._listing_checks(d, names, "N=%d" % n)
                # Again while another process creates files in the same directory.
                m = max(1000, n // 10)
                creator = subprocess.Popen([PY, "-c", self.CREATOR8, d, str(m), "other"],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                others = {"other%07d" % i for i in range(m)}
                base = set(names)
                rounds = 0
                try:
                    while creator.poll() is None or rounds == 0:
                        rounds += 1
                        got = os.listdir(d)
                        self.assertEqual(len(got), len(set(got)), "N=%d concurrent: duplicates in listdir" % n)
                        gs = set(got)
                        self.assertTrue(base <= gs, "N=%d concurrent: listdir lost %d of the original names"
                                        % (n, len(base - gs)))
                        self.assertTrue(gs <= base | others, "N=%d concurrent: unknown names" % n)
                        ls = subprocess.run(["ls", "-f", d], capture_output=True, text=True, timeout=300)
                        lines = ls.stdout.splitlines()
                        self.assertEqual(len(lines), len(set(lines)), "N=%d concurrent: ls -f repeats names" % n)
                        self.assertTrue(base | {".", ".."} <= set(lines),
                                        "N=%d concurrent: ls -f lost original names" % n)
                        with os.scandir(d) as it:
                            sc = [e.name for e in it]
                        self.assertEqual(len(sc), len(set(sc)), "N=%d concurrent: duplicates in scandir" % n)
                        self.assertTrue(base <= set(sc), "N=%d concurrent: scandir lost original names" % n)
                    out, err = creator.communicate(timeout=600)
                finally:
                    if creator.poll() is None:
                        creator.kill()
                        creator.wait()
                self.assertEqual(0, creator.returncode, err[-300:])
                self._listing_checks(d, names + sorted(others), "N=%d after the concurrent creator" % n)
                shutil.rmtree(d)
            self.assertTrue(t.alive())

    # --------------------------------------------------------------------------------------------- 10
    def test_case10_exists_evicted_read(self):
        seconds = float(os.environ.get("KVFS_CASE10_SECONDS", "60" if os.environ.get("KVFS_CASES_LONG") else "20"))
        n_names, size = 48, 256 * 1024
        contents = {}
        for i in range(n_names):
            b = pattern_bytes("blk%d" % (1000 + i), size)
            contents["%s.bin" % sha(b)[:32]] = b
        names = sorted(contents)
        with kt.target(self.KIND) as t:
            d = t.path("kv")
            os.mkdir(d)
            for name in names:
                with open(os.path.join(d, name), "wb") as f:
                    f.write(contents[name])
            stop = threading.Event()
            lock = threading.Lock()
            bad = []
            counts = {"reads": 0, "enoent": 0, "unlinks": 0, "renames": 0, "pinned": 0}

            def bump(k):
                with lock:
                    counts[k] += 1

            def reader(rid):
                rng = random.Random(rid)
                while not stop.is_set():
                    name = rng.choice(names)
                    p = os.path.join(d, name)
                    try:
                        if not os.path.exists(p):
                            bump("enoent")
                            continue
                        fd = os.open(p, os.O_RDONLY)
                    except FileNotFoundError:
                        bump("enoent")
                        continue
                    except OSError as e:
                        bad.append("open %s: %s" % (name, kt.errname(e)))
                        continue
                    try:
                        first = os.read(fd, 4096)
                        if rng.random() < 0.3:
                            time.sleep(0.002)  # let a deleter unlink it while we hold the fd
                        rest = b""
                        while True:
                            c = os.read(fd, 1 << 20)
                            if not c:
                                break
                            rest += c
                        data = first + rest
                        still = os.path.exists(p)
                    except OSError as e:
                        bad.append("read %s: %s" % (name, kt.errname(e)))
                        continue
                    finally:
                        os.close(fd)
                    bump("reads")
                    if not still:
                        bump("pinned")
                    if len(data) != size:
                        bad.append("short read %s: %d of %d" % (name, len(data), size))
                    elif sha(data)[:32] + ".bin" != name:
                        bad.append("wrong bytes under %s" % name)

            def deleter(did):
                rng = random.Random(100 + did)
                while not stop.is_set():
                    try:
                        os.unlink(os.path.join(d, rng.choice(names)))
                        bump("unlinks")
                    except FileNotFoundError:
                        pass
                    except OSError as e:
                        bad.append("unlink: %s" % kt.errname(e))
                    time.sleep(0.003)

            def writer(wid):
                rng = random.Random(200 + wid)
                while not stop.is_set():
                    name = rng.choice(names)
                    tmp = os.path.join(d, "%s.tmp.%d" % (name, wid))
                    try:
                        with open(tmp, "wb") as f:
                            f.write(contents[name])
                        os.rename(tmp, os.path.join(d, name))
                        bump("renames")
                    except OSError as e:
                        bad.append("writer %s: %s" % (name, kt.errname(e)))
                    time.sleep(0.002)

            threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
            threads += [threading.Thread(target=deleter, args=(i,)) for i in range(2)]
            threads += [threading.Thread(target=writer, args=(i,)) for i in range(2)]
            for th in threads:
                th.start()
            try:
                time.sleep(seconds)
            finally:
                stop.set()
                for th in threads:
                    th.join()
            self.assertTrue(t.alive(), "kvfs process died during case 10")
            self.assertEqual([], bad[:10], "case 10: %d bad outcomes; counts %r" % (len(bad), counts))
            self.assertGreater(counts["reads"], 100, counts)
            self.assertGreater(counts["unlinks"], 10, counts)
            self.assertGreater(counts["renames"], 10, counts)
            leftovers = [n for n in os.listdir(d) if n not in contents]
            self.assertEqual([], leftovers, "temp files left")

    def test_case10_fd_opened_before_unlink_reads_old_content(self):
        size = 1 * MIB
        old = pattern_bytes("blk10", size)
        with kt.target(self.KIND) as t:
            p = t.path("x.bin")
            with open(p, "wb") as f:
                f.write(old)
            fd = os.open(p, os.O_RDONLY)
            try:
                self.assertEqual(old[:4096], os.read(fd, 4096))
                os.unlink(p)
                self.assertFalse(os.path.exists(p))
                # A new file under the same name must not leak into the old fd.
                with open(p + ".tmp", "wb") as f:
                    f.write(pattern_bytes("blk11", size))
                os.rename(p + ".tmp", p)
                rest = b""
                while True:
                    c = os.read(fd, 1 << 20)
                    if not c:
                        break
                    rest += c
                self.assertEqual(old, old[:4096] + rest, "fd opened before the unlink")
                self.assertEqual(size, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            self.assertEqual(pattern_bytes("blk11", size), read_path(p))


kt.make_target_classes(_Cases, globals())


if __name__ == "__main__":
    unittest.main(verbosity=2)
