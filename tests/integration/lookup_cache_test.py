#!/usr/bin/env python3
"""What the kernel may cache of names and attributes, and what invalidates it (issue 15).

Real mounts, real syscalls. FUSE requests are counted from `kvfs stats` (fuse_ops.*.count; every stats
read is one GETXATTR, so GETXATTR is left out of the counts).

RequestsPerProbeTest: the connectors' existence probes after a store on the same mount, counted per
probe (docs/benchmarks.md "FUSE requests per operation"): a vLLM hit (access(F_OK) of a 4-level path)
costs only the GETATTR of its directory (the kernel drops a directory's attributes after every entry
change in it, and default_permissions needs them) - the file's own attributes, given with a positive
attr_timeout while it was staged, are still valid; a miss costs one LOOKUP; the same probes again cost
nothing. SGLang's stat of a flat-directory file costs one GETATTR (its write and its rename mark the
kernel's size and ctime stale: a kernel rule). Staged files with cached attributes still show exact
sizes to stat, fstat and lseek(SEEK_END) after every write, truncate and rewrite.
"""
import hashlib
import mmap
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402



def ops(mnt):
    return {k: v["count"] for k, v in kf.stats(mnt)["fuse_ops"].items() if k != "getxattr"}


def delta(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def key(i):
    return hashlib.sha256(b"chunk %d" % i).hexdigest()


def vllm_path(root, k):
    return "%s/M_r0/%s/%s_g0/%s.bin" % (root, k[:3], k[3:5], k)


def vllm_store(root, k, size=65536):
    """vLLM fs tier's store: access, stat parents, mkdir, O_EXCL|O_DIRECT tmp, one write, close, rename."""
    f = vllm_path(root, k)
    assert not os.path.exists(f), f
    d, todo = os.path.dirname(f), []
    while not os.path.isdir(d):
        todo.append(d)
        d = os.path.dirname(d)
    for d in reversed(todo):
        os.mkdir(d, 0o777)
    buf = mmap.mmap(-1, size)  # page-aligned for O_DIRECT
    buf.write(k.encode()[:1] * size)
    tmp = f + "_1.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        assert os.write(fd, buf) == size
    finally:
        os.close(fd)
    os.rename(tmp, f)


def sglang_path(root, k):
    return "%s/hicache/%s_Q_0_1.bin" % (root, k)


def sglang_store(root, k, size=147456):
    """SGLang HiCacheFile's store: stat, tmp O_WRONLY|O_CREAT|O_TRUNC, fstat, write, close, rename."""
    f = sglang_path(root, k)
    try:
        os.stat(f)
        raise AssertionError(f + " exists")
    except FileNotFoundError:
        pass
    tmp = f + ".tmp.1"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        os.fstat(fd)
        os.write(fd, b"s" * size)
    finally:
        os.close(fd)
    os.rename(tmp, f)


def exists_stat(p):
    try:
        os.stat(p)
        return True
    except FileNotFoundError:
        return False


class RequestsPerProbeTest(unittest.TestCase):
    N = 16

    @classmethod
    def setUpClass(cls):
        if not kf.fuse_available():
            raise unittest.SkipTest("no FUSE")
        cls.ctx = kf.mounted(o="default_permissions")
        cls.mnt, _, _ = cls.ctx.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.ctx.__exit__(None, None, None)

    def probe_rounds(self, probe, hits, misses):
        """Per round (hits, then misses): the FUSE requests the probes caused."""
        out = []
        for rnd in range(2):
            for keys, want in ((hits, True), (misses, False)):
                a = ops(self.mnt)
                for k in keys:
                    self.assertEqual(probe(k), want, "probe of %s (round %d)" % (k, rnd))
                out.append(delta(a, ops(self.mnt)))
        return out

    def test_vllm_probe_requests(self):
        hits = [key(i) for i in range(self.N)]
        # distinct first levels (3 hex digits), none of them a stored one's: each miss is one new name
        used = {k[:3] for k in hits}
        misses = []
        i = 1000
        while len(misses) < self.N:
            k = key(i)
            i += 1
            if k[:3] not in used:
                used.add(k[:3])
                misses.append(k)
        os.mkdir(os.path.join(self.mnt, "M_r0"))
        a = ops(self.mnt)
        for k in hits:
            vllm_store(self.mnt, k)
        store = delta(a, ops(self.mnt))
        time.sleep(0.3)  # the deferred commits (commit_delay_ms) are done: the probes see committed files
        r = self.probe_rounds(lambda k: os.access(vllm_path(self.mnt, k), os.F_OK), hits, misses)
        n = self.N
        # The file's attributes came with a positive attr_timeout at CREATE: only the directory's
        # attributes (dropped by the kernel at the rename into it) are asked. Was 2 GETATTR per hit.
        self.assertEqual(r[0], {"getattr": n}, "first access(F_OK) of %d stored chunks" % n)
        self.assertEqual(r[1], {"lookup": n}, "first access(F_OK) of %d absent chunks" % n)
        self.assertEqual(r[2], {}, "second access(F_OK) of the stored chunks")
        self.assertEqual(r[3], {}, "second access(F_OK) of the absent chunks (negative entries)")
        # the store: 3 GETATTR per chunk (2 directories after their mkdir, 1 after the CREATE), was 4
        self.assertEqual(store.get("getattr"), 3 * n, "GETATTRs of the vLLM store: %s" % store)
        self.assertEqual(store.get("create"), n, store)

    def test_sglang_probe_requests(self):
        hits = [key(100 + i) for i in range(self.N)]
        misses = [key(200 + i) for i in range(self.N)]
        os.mkdir(os.path.join(self.mnt, "hicache"))
        for k in hits:
            sglang_store(self.mnt, k)
        time.sleep(0.3)
        r = self.probe_rounds(lambda k: exists_stat(sglang_path(self.mnt, k)), hits, misses)
        n = self.N
        # stat wants size and ctime, which the kernel marked stale at the write and the rename: one
        # GETATTR per stored file (+1 for the directory the renames changed), one LOOKUP per absent name.
        self.assertEqual(r[0], {"getattr": n + 1}, "first stat of %d stored chunks" % n)
        self.assertEqual(r[1], {"lookup": n}, "first stat of %d absent chunks" % n)
        self.assertEqual(r[2], {}, "second stat of the stored chunks")
        self.assertEqual(r[3], {}, "second stat of the absent chunks (negative entries)")

    def test_staged_attributes_stay_exact(self):
        """A staged file whose attributes the kernel keeps: stat/fstat/lseek show every change."""
        d = os.path.join(self.mnt, "exact")
        os.mkdir(d)
        p = os.path.join(d, "f")
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        try:
            st = os.stat(p)
            self.assertEqual((st.st_size, st.st_nlink, st.st_mode & 0o777), (0, 1, 0o640))
            os.write(fd, b"a" * 5000)
            self.assertEqual(os.stat(p).st_size, 5000, "stat after a write, writer open")
            self.assertEqual(os.fstat(fd).st_size, 5000)
            fd2 = os.open(p, os.O_RDWR | os.O_APPEND)  # a second writer joins the version
            try:
                os.write(fd2, b"b" * 3000)
                self.assertEqual(os.lseek(fd2, 0, os.SEEK_END), 8000)
            finally:
                os.close(fd2)
            self.assertEqual(os.stat(p).st_size, 8000, "stat after an appending writer")
            os.ftruncate(fd, 100)
            self.assertEqual(os.stat(p).st_size, 100, "stat after ftruncate")
            os.write(fd, b"c" * 10)  # at offset 5000: a hole up to it
            self.assertEqual(os.stat(p).st_size, 5010)
        finally:
            os.close(fd)
        time.sleep(0.3)
        st = os.stat(p)
        self.assertEqual((st.st_size, st.st_nlink), (5010, 1), "committed")
        with open(p, "rb") as f:
            data = f.read()
        self.assertEqual(data, b"a" * 100 + b"\0" * 4900 + b"c" * 10)
        os.chmod(p, 0o600)
        self.assertEqual(os.stat(p).st_mode & 0o777, 0o600)
        # a rewrite (O_TRUNC) while a reader holds the old content
        r = os.open(p, os.O_RDONLY)
        try:
            m0 = os.stat(p).st_mtime_ns
            time.sleep(0.01)
            kf.write_file(p, b"new")
            self.assertEqual(os.stat(p).st_size, 3, "stat after a rewrite")
            self.assertGreater(os.stat(p).st_mtime_ns, m0)
            self.assertEqual(os.pread(r, 8, 0), b"a" * 8, "the reader keeps the content it opened")
        finally:
            os.close(r)
        time.sleep(0.3)
        self.assertEqual(os.stat(p).st_size, 3)
        self.assertEqual(kf.read_file(p), b"new")


if __name__ == "__main__":
    unittest.main()
