#!/usr/bin/env python3
"""Namespace behaviours the connectors of 2026 rely on (issue #18), each on a real mount. python3 stdlib only.

  Fallocate        fallocate(2) mode 0 and FALLOC_FL_KEEP_SIZE on writable descriptors (new file, O_RDWR
                   copy-on-write of a committed file, O_WRONLY), sizes and bytes as on ext4 (zeros; mode 0
                   grows the size, KEEP_SIZE does not); the other modes work or answer EOPNOTSUPP; never
                   EIO, never ENOSPC while the backing store has room (a 64 MiB mode-0 reservation);
                   os.posix_fallocate likewise; a 48 MiB preallocation through an 8 MiB staging budget
                   (holes hold no RAM) filled with 2 MiB slots out of order.
  SetflODirect     fcntl(F_SETFL, O_DIRECT) on an open writer (O_RDWR, O_WRONLY, O_RDWR of a committed
                   file) and on an open reader: accepted (the flag reads back), and the bytes written and
                   read afterwards with page-aligned buffers are exact, also mixed with buffered I/O on
                   the same descriptor before the switch.
  Statvfs          f_bsize == f_frsize == 4096; f_blocks >= f_bfree >= f_bavail; used
                   (f_blocks - f_bfree) grows by 64 MiB after writing 64 MiB and falls back after the
                   unlink, within one segment.
  XattrAfterRename vLLM's checksum variant: write tmp, rename to final, setxattr(final,
                   "user.vllm_kv_crc32"): survives a remount of the node, and a second node (own --node-id
                   and --index-dir, same backing) sees it within a few seconds.
  FsyncDir         fsync of a directory descriptor returns 0; renames made before it survive SIGKILL of
                   the daemon + remount.
  TpRanks          vLLM multi-node TP: a temp made with ftruncate, 4 ranks (own descriptors) pwrite their
                   slices, close one after another, then a rename: exact bytes, here and on a peer, and the
                   file is written to the export once (the closes of ranks whose peers still write defer
                   the record to the last one), not once per rank.
  DeepTrie         VAST VUA's trie: 200 nested directory levels made and walked with openat(dirfd, ...)
                   (mkdir, O_EXCL create, rename, read relative to a directory fd); the file reads back
                   by its 600-character path, after a remount and from an index rebuilt from the journals.
  Atime            the llm-d evictor's rule (keep files read in the last hour): a read updates st_atime
                   with relatime rules (once after each change, or when a day old), also when the page
                   cache answers the read, ctime and mtime unchanged; a second node sees it, a remount
                   keeps it; -o noatime turns it off.

Environment: kvfs_fixture's KVFS_BINARY, KVFS_TEST_KEEP, KVFS_TEST_LOG.
"""

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvfs_fixture as kf  # noqa: E402

KIB = 1024
MIB = 1024 * 1024
DAY_NS = 24 * 3600 * 10**9

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_COLLAPSE_RANGE = 0x08
FALLOC_FL_ZERO_RANGE = 0x10
FALLOC_FL_INSERT_RANGE = 0x20

libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def pattern(tag, n):
    """n deterministic bytes (not compressible to zeros)."""
    seed = tag.encode()
    out = bytearray()
    i = 0
    while len(out) < n:
        out += zlib.crc32(seed + i.to_bytes(8, "little")).to_bytes(4, "little") * 1024
        i += 1
    return bytes(out[:n])


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def wait_for(fn, timeout=10.0, interval=0.02):
    """Calls fn() until it returns a true value or the timeout passes; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


class MountedCase(unittest.TestCase):
    """A fresh mount per test, over a fresh temp backing dir."""

    flags = {}

    def setUp(self):
        self.b = kf.Backing()
        self.stack = contextlib.ExitStack()
        self.mnt, self.backing, self.proc = self.stack.enter_context(kf.mounted(backing=self.b, **self.flags))

    def tearDown(self):
        self.stack.close()
        self.b.cleanup()

    def p(self, name):
        return os.path.join(self.mnt, name)

    def assertErrno(self, err, fn, *args):
        with self.assertRaises(OSError) as cm:
            fn(*args)
        self.assertEqual(cm.exception.errno, err, "%s%r" % (fn.__name__, args))


@kf.skip_unless_fuse
class Fallocate(MountedCase):
    def check_file(self, path, want):
        self.assertEqual(os.stat(path).st_size, len(want))
        got = kf.read_file(path)
        self.assertEqual(len(got), len(want))
        self.assertTrue(got == want, "bytes of %s differ" % path)

    def test_mode0_and_keep_size_on_new_file(self):
        path = self.p("new")
        head = pattern("new", 1000)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, head)
            fallocate(fd, 0, 0, MIB)                     # grows to 1 MiB, zeros after the data
            self.assertEqual(os.fstat(fd).st_size, MIB)
            fallocate(fd, 0, 100, 200)                   # inside the file: nothing changes
            self.assertEqual(os.fstat(fd).st_size, MIB)
            fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4 * MIB)  # beyond the end, size kept
            self.assertEqual(os.fstat(fd).st_size, MIB)
            fallocate(fd, 0, MIB + 4096, 8192)           # a range past the end: size = its end
            self.assertEqual(os.fstat(fd).st_size, MIB + 12288)
            self.assertEqual(os.pread(fd, 1000, 0), head)
            self.assertEqual(os.pread(fd, 64, MIB - 32), b"\0" * 64)
        finally:
            os.close(fd)
        self.check_file(path, head + b"\0" * (MIB + 12288 - 1000))

    def test_posix_fallocate(self):
        path = self.p("pf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.posix_fallocate(fd, 0, 2 * MIB)
            self.assertEqual(os.fstat(fd).st_size, 2 * MIB)
            os.posix_fallocate(fd, 0, MIB)               # never shrinks
            self.assertEqual(os.fstat(fd).st_size, 2 * MIB)
            os.pwrite(fd, b"tail", 2 * MIB - 4)
        finally:
            os.close(fd)
        self.check_file(path, b"\0" * (2 * MIB - 4) + b"tail")

    def test_on_committed_file_copy_on_write(self):
        path = self.p("cow")
        data = pattern("cow", 3 * MIB + 77)
        kf.write_file(path, data)
        fsync_dir(self.mnt)
        fd = os.open(path, os.O_RDWR)
        try:
            fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 8 * MIB)
            self.assertEqual(os.fstat(fd).st_size, len(data))
            fallocate(fd, 0, 0, 5 * MIB)
            self.assertEqual(os.fstat(fd).st_size, 5 * MIB)
            self.assertEqual(os.pread(fd, 77, 3 * MIB), data[3 * MIB:])
        finally:
            os.close(fd)
        self.check_file(path, data + b"\0" * (5 * MIB - len(data)))
        # the same through O_WRONLY without O_TRUNC
        fd = os.open(path, os.O_WRONLY)
        try:
            os.posix_fallocate(fd, 4 * MIB, 2 * MIB)
            self.assertEqual(os.fstat(fd).st_size, 6 * MIB)
        finally:
            os.close(fd)
        self.check_file(path, data + b"\0" * (6 * MIB - len(data)))

    def test_other_modes_eopnotsupp_or_exact(self):
        path = self.p("modes")
        data = pattern("modes", 64 * KIB)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            want = bytearray(data)
            for mode, name in ((FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "punch"),
                               (FALLOC_FL_ZERO_RANGE, "zero"),
                               (FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, "zero-keep"),
                               (FALLOC_FL_COLLAPSE_RANGE, "collapse"),
                               (FALLOC_FL_INSERT_RANGE, "insert")):
                try:
                    fallocate(fd, mode, 4096, 8192)
                except OSError as e:
                    self.assertEqual(e.errno, errno.EOPNOTSUPP, "%s: %s" % (name, os.strerror(e.errno)))
                    continue
                # Accepted: then with ext4's result (punch/zero only; the rest must not be accepted blindly).
                self.assertIn(name, ("punch", "zero", "zero-keep"), "%s accepted" % name)
                want[4096:12288] = b"\0" * 8192
                self.assertEqual(os.pread(fd, len(want) + 1, 0), bytes(want), name)
            self.assertEqual(os.fstat(fd).st_size, len(data))
        finally:
            os.close(fd)

    def test_large_mode0_no_enospc_with_room(self):
        free = os.statvfs(self.backing).f_bavail * os.statvfs(self.backing).f_frsize
        if free < 1024 * MIB:
            self.skipTest("backing has under 1 GiB free (%d MiB)" % (free // MIB))
        path = self.p("big")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fallocate(fd, 0, 0, 64 * MIB)
            self.assertEqual(os.fstat(fd).st_size, 64 * MIB)
            os.pwrite(fd, b"end", 64 * MIB - 3)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.assertEqual(os.stat(path).st_size, 64 * MIB)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, 16, 32 * MIB), b"\0" * 16)
            self.assertEqual(os.pread(fd, 16, 64 * MIB - 3), b"end")
        finally:
            os.close(fd)

    def test_read_only_fd_refused(self):
        path = self.p("ro")
        kf.write_file(path, b"x" * 100)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertErrno(errno.EBADF, fallocate, fd, 0, 0, 4096)
        finally:
            os.close(fd)
        self.assertEqual(os.stat(path).st_size, 100)


@kf.skip_unless_fuse
class FallocateSmallStaging(MountedCase):
    """A preallocation larger than the staging budget: holes hold no RAM, nothing spills, no ENOSPC."""

    flags = {"staging_size": "8MiB", "segment_size": "16MiB"}

    def test_slot_file_over_budget(self):
        path = self.p("slots")
        slot = pattern("slot", 2 * MIB)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fallocate(fd, 0, 0, 48 * MIB)
            self.assertEqual(os.fstat(fd).st_size, 48 * MIB)
            for off in (0, 10 * MIB, 46 * MIB, 20 * MIB):  # 2 MiB slots, out of order
                os.pwrite(fd, slot, off)
            os.fsync(fd)
        finally:
            os.close(fd)
        got = kf.read_file(path)
        self.assertEqual(len(got), 48 * MIB)
        for off in range(0, 48 * MIB, 2 * MIB):
            want = slot if off in (0, 10 * MIB, 46 * MIB, 20 * MIB) else b"\0" * (2 * MIB)
            self.assertTrue(got[off:off + 2 * MIB] == want, "slot at %d MiB" % (off // MIB))


@kf.skip_unless_fuse
class SetflODirect(MountedCase):
    def setfl_direct(self, fd):
        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_DIRECT)
        self.assertTrue(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT, "O_DIRECT did not stick")

    def aligned_pwrite(self, fd, data, off):
        buf = kf.aligned_buffer(len(data), data)
        try:
            self.assertEqual(os.pwritev(fd, [buf], off), len(data))
        finally:
            buf.close()

    def aligned_pread(self, fd, n, off):
        buf = kf.aligned_buffer(n)
        try:
            got = os.preadv(fd, [buf], off)
            return bytes(buf[:got])
        finally:
            buf.close()

    def test_writer_rdwr_then_direct(self):
        path = self.p("w")
        a = pattern("wa", 2 * MIB)
        b = pattern("wb", MIB)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, a)                           # buffered first
            self.setfl_direct(fd)
            self.aligned_pwrite(fd, b, 2 * MIB)       # appended with O_DIRECT
            self.aligned_pwrite(fd, b[:4096], 4096)   # overwrites a buffered range
            want = bytearray(a + b)
            want[4096:8192] = b[:4096]
            self.assertEqual(self.aligned_pread(fd, 3 * MIB, 0), bytes(want))
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
            self.assertEqual(os.pread(fd, 8192, 0), bytes(want[:8192]))  # buffered again: coherent
        finally:
            os.close(fd)
        self.assertTrue(kf.read_file(path) == bytes(want))

    def test_writer_wronly_then_direct(self):
        path = self.p("wo")
        data = pattern("wo", 4 * MIB)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self.setfl_direct(fd)
            for off in range(0, len(data), 2 * MIB):  # 2 MiB slots, as the slot-file connectors do
                self.aligned_pwrite(fd, data[off:off + 2 * MIB], off)
        finally:
            os.close(fd)
        self.assertTrue(kf.read_file(path) == data)

    def test_rdwr_of_committed_file_then_direct(self):
        path = self.p("cw")
        data = pattern("cw", 4 * MIB)
        kf.write_file(path, data)
        fsync_dir(self.mnt)
        slot = pattern("slot", 2 * MIB)
        fd = os.open(path, os.O_RDWR)
        try:
            self.setfl_direct(fd)
            self.aligned_pwrite(fd, slot, 2 * MIB)
            self.assertEqual(self.aligned_pread(fd, 4096, 2 * MIB - 4096), data[2 * MIB - 4096:2 * MIB])
        finally:
            os.close(fd)
        self.assertTrue(kf.read_file(path) == data[:2 * MIB] + slot)

    def test_reader_then_direct(self):
        path = self.p("r")
        data = pattern("r", 3 * MIB + 4096)
        kf.write_file(path, data)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.read(fd, 100), data[:100])   # buffered first
            self.setfl_direct(fd)
            self.assertEqual(self.aligned_pread(fd, MIB, 0), data[:MIB])
            self.assertEqual(self.aligned_pread(fd, 2 * MIB, MIB), data[MIB:3 * MIB])
            self.assertEqual(self.aligned_pread(fd, MIB, 3 * MIB), data[3 * MIB:])   # short at EOF
            self.assertEqual(self.aligned_pread(fd, 4096, 4 * MIB), b"")
        finally:
            os.close(fd)


@kf.skip_unless_fuse
class Statvfs(MountedCase):
    flags = {"segment_size": "16MiB"}
    SEG = 16 * MIB

    def used(self):
        sv = os.statvfs(self.mnt)
        self.assertEqual(sv.f_bsize, 4096)
        self.assertEqual(sv.f_frsize, 4096)
        self.assertGreaterEqual(sv.f_blocks, sv.f_bfree)
        self.assertGreaterEqual(sv.f_bfree, sv.f_bavail)
        self.assertGreater(sv.f_blocks, 0)
        return (sv.f_blocks - sv.f_bfree) * sv.f_frsize

    def test_block_size_and_usage(self):
        u0 = self.used()
        data = pattern("sv", 4 * MIB)
        fd = os.open(self.p("big"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for off in range(0, 64 * MIB, len(data)):
                os.pwrite(fd, data, off)
            os.fsync(fd)
        finally:
            os.close(fd)
        u1 = wait_for(lambda: self.used() if self.used() - u0 >= 64 * MIB - self.SEG else None, 5.0) or self.used()
        self.assertGreaterEqual(u1 - u0, 64 * MIB - self.SEG, (u0, u1))
        self.assertLessEqual(u1 - u0, 64 * MIB + self.SEG, (u0, u1))
        os.unlink(self.p("big"))
        fsync_dir(self.mnt)
        u2 = wait_for(lambda: self.used() if self.used() <= u0 + self.SEG else None, 5.0) or self.used()
        self.assertLessEqual(u2, u0 + self.SEG, (u0, u1, u2))
        self.assertLess(u2, u1, (u0, u1, u2))
        fd = os.open(self.mnt, os.O_RDONLY)
        try:
            self.assertEqual(os.fstatvfs(fd).f_bsize, 4096)
        finally:
            os.close(fd)


@kf.skip_unless_fuse
class XattrAfterRename(kf.SharedBackingCase):
    NAME = "user.vllm_kv_crc32"
    PREFIX = "kvfs-c26-"

    def mount(self, name, stack=None):
        mnt, _, _ = (stack or self.stack).enter_context(
            kf.mounted(backing=self.node(name), node_id=name, peer_poll_ms=200, group_commit_ms=20))
        return mnt

    def store(self, mnt, key, data):
        """vLLM's variant: tmp, rename to the final name, then the checksum xattr on the final name."""
        d = os.path.join(mnt, "kv", key[:2])
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, key + ".tmp.%d" % os.getpid())
        final = os.path.join(d, key + ".bin")
        kf.write_file(tmp, data, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.rename(tmp, final)
        os.setxattr(final, self.NAME, b"%08x" % zlib.crc32(data))
        return final

    def test_survives_remount_and_seen_by_peer(self):
        keys = ["ab%04d" % i for i in range(20)]
        data = {k: pattern(k, 144 * KIB + 3 * (i + 1)) for i, k in enumerate(keys)}
        with contextlib.ExitStack() as a_stack:
            a = self.mount("a", a_stack)
            for k in keys:
                self.store(a, k, data[k])
            # the peer: every final name with its bytes and its checksum xattr, within a few seconds
            b = self.mount("b")
            for k in keys:
                final = os.path.join(b, "kv", k[:2], k + ".bin")

                def seen(final=final, k=k):
                    try:
                        return os.getxattr(final, self.NAME) == b"%08x" % zlib.crc32(data[k])
                    except OSError:
                        return False
                self.assertTrue(wait_for(seen, 10.0), "node b: %s has no (or a wrong) %s" % (final, self.NAME))
                self.assertEqual(kf.read_file(final), data[k])
                self.assertIn(self.NAME, os.listxattr(final))
            # set after b has seen the file: a later change reaches b too
            final_a = os.path.join(a, "kv", "ab", keys[0] + ".bin")
            os.setxattr(final_a, self.NAME, b"changed!")
            final_b = os.path.join(b, "kv", "ab", keys[0] + ".bin")
            self.assertTrue(wait_for(lambda: os.getxattr(final_b, self.NAME) == b"changed!", 10.0))
            data_x = {keys[0]: b"changed!"}
        # remount of node a (same index dir): the xattrs are there
        a = self.mount("a")
        for k in keys:
            final = os.path.join(a, "kv", k[:2], k + ".bin")
            want = data_x.get(k, b"%08x" % zlib.crc32(data[k]))
            self.assertEqual(os.getxattr(final, self.NAME), want, final)
            self.assertEqual(kf.read_file(final), data[k])

    def test_set_right_after_rename_of_open_tmp(self):
        # The rename comes while the tmp is still open (its version not committed yet), the xattr on the
        # final name right after: both land with the content.
        a = self.mount("a")
        d = os.path.join(a, "kv")
        os.mkdir(d)
        data = pattern("open", 2 * MIB + 5)
        fd = os.open(os.path.join(d, "k.tmp"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.rename(os.path.join(d, "k.tmp"), os.path.join(d, "k.bin"))
            os.setxattr(os.path.join(d, "k.bin"), self.NAME, b"beef")
        finally:
            os.close(fd)
        b = self.mount("b")
        fb = os.path.join(b, "kv", "k.bin")

        def seen():
            try:
                return os.getxattr(fb, self.NAME) == b"beef"
            except OSError:
                return False
        self.assertTrue(wait_for(seen, 10.0), "node b: no xattr on %s" % fb)
        self.assertEqual(kf.read_file(fb), data)


@kf.skip_unless_fuse
class TpRanks(kf.SharedBackingCase):
    PREFIX = "kvfs-c26-tp-"
    RANKS = 4
    SIZE = 8 * MIB

    def test_ranks_pwrite_slices_file_written_once(self):
        import threading
        a, _, _ = self.stack.enter_context(kf.mounted(backing=self.node("a"), node_id="a", peer_poll_ms=200))
        d = os.path.join(a, "kv")
        os.mkdir(d)
        data = pattern("tp", self.SIZE)
        tmp, final = os.path.join(d, "c.tmp"), os.path.join(d, "c.bin")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(fd, self.SIZE)
        os.close(fd)
        time.sleep(0.3)
        before = kf.stats(a)
        started = threading.Barrier(self.RANKS)
        turns = [threading.Event() for _ in range(self.RANKS)]
        errors = []
        part, half = self.SIZE // self.RANKS, self.SIZE // self.RANKS // 2

        def rank(r):
            # Every rank writes the first half of its slice; then, rank after rank, one writes the rest
            # and closes while the later ranks still have writes to make (as ranks finishing at
            # different times do).
            try:
                f = os.open(tmp, os.O_RDWR)
                try:
                    lo = r * part
                    self.assertEqual(os.pwrite(f, data[lo:lo + half], lo), half)
                    started.wait(10)
                    if r:
                        turns[r - 1].wait(10)
                    self.assertEqual(os.pwrite(f, data[lo + half:lo + part], lo + half), part - half)
                finally:
                    os.close(f)
                    turns[r].set()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        ts = [threading.Thread(target=rank, args=(r,)) for r in range(self.RANKS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        os.rename(tmp, final)
        self.assertEqual(kf.read_file(final), data)
        time.sleep(0.3)
        after = kf.stats(a)
        wrote = after["backing_bytes_written"] - before["backing_bytes_written"]
        self.assertGreaterEqual(wrote, self.SIZE)
        self.assertLess(wrote, 1.5 * self.SIZE, "the file went to the export %.2f times" % (wrote / self.SIZE))
        self.assertGreaterEqual(after["fuse"]["flushes_deferred"] - before["fuse"]["flushes_deferred"],
                                self.RANKS - 1)
        b, _, _ = self.stack.enter_context(kf.mounted(backing=self.node("b"), node_id="b", peer_poll_ms=200))
        fb = os.path.join(b, "kv", "c.bin")
        self.assertTrue(wait_for(lambda: os.path.exists(fb), 10.0))
        self.assertEqual(kf.read_file(fb), data)


@kf.skip_unless_fuse
class DeepTrie(kf.SharedBackingCase):
    PREFIX = "kvfs-c26-trie-"
    LEVELS = 200

    def test_200_levels_by_dirfd(self):
        names = ["%02x" % (lvl % 256) for lvl in range(self.LEVELS)]
        data = pattern("trie", 64 * KIB + 3)
        spec = self.node("a")
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
            fds = [os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)]
            try:
                for name in names:
                    os.mkdir(name, 0o755, dir_fd=fds[-1])
                    fds.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
                fd = os.open("chunk.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fds[-1])
                os.write(fd, data)
                os.close(fd)
                os.rename("chunk.tmp", "chunk.bin", src_dir_fd=fds[-1], dst_dir_fd=fds[-1])
                fd = os.open("chunk.bin", os.O_RDONLY, dir_fd=fds[-1])
                try:
                    self.assertEqual(os.read(fd, len(data) + 1), data)
                finally:
                    os.close(fd)
                self.assertEqual(os.listdir(fds[-1]), ["chunk.bin"])
            finally:
                for fd in fds:
                    os.close(fd)
            path = os.path.join(mnt, *names, "chunk.bin")
            self.assertEqual(len(path) - len(mnt), 3 * self.LEVELS + len("/chunk.bin"))
            self.assertEqual(kf.read_file(path), data)
            self.assertEqual(sum(len(f) for _, _, f in os.walk(mnt)), 1)
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):  # the same index
            self.assertEqual(kf.read_file(os.path.join(mnt, *names, "chunk.bin")), data)
        shutil.rmtree(spec.index)  # rebuilt from the journals
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
            self.assertEqual(kf.read_file(os.path.join(mnt, *names, "chunk.bin")), data)


@kf.skip_unless_fuse
class Atime(kf.SharedBackingCase):
    PREFIX = "kvfs-c26-atime-"

    def mount(self, name, stack=None, **extra):
        mnt, _, _ = (stack or self.stack).enter_context(
            kf.mounted(backing=self.node(name), node_id=name, peer_poll_ms=200, group_commit_ms=20, **extra))
        return mnt

    def publish(self, mnt, key, data):
        d = os.path.join(mnt, "kv")
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, key + ".tmp")
        final = os.path.join(d, key + ".bin")
        kf.write_file(tmp, data, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        os.rename(tmp, final)
        return final

    def test_read_updates_atime_relatime_seen_by_peer_and_remount(self):
        data = pattern("atime", 300 * KIB + 7)
        with contextlib.ExitStack() as a_stack:
            a = self.mount("a", a_stack)
            final = self.publish(a, "k1", data)
            st0 = os.stat(final)
            self.assertLessEqual(st0.st_atime_ns, max(st0.st_mtime_ns, st0.st_ctime_ns))  # never read yet
            time.sleep(0.05)
            t_read = time.time_ns()
            self.assertEqual(kf.read_file(final), data)
            st1 = os.stat(final)
            self.assertGreaterEqual(st1.st_atime_ns, t_read)
            self.assertGreater(st1.st_atime_ns, st1.st_mtime_ns)
            self.assertEqual(st1.st_mtime_ns, st0.st_mtime_ns)
            self.assertEqual(st1.st_ctime_ns, st0.st_ctime_ns)  # an atime update is not a change
            # relatime: read again within the day, after no change: atime stays
            time.sleep(0.05)
            self.assertEqual(kf.read_file(final), data)
            self.assertEqual(os.stat(final).st_atime_ns, st1.st_atime_ns)

            # A read the page cache answers (the pages are cached from the reads above) counts too:
            # make atime older than mtime again with utimensat, then read without any READ request.
            os.utime(final, ns=(st1.st_mtime_ns - 10**10, st1.st_mtime_ns))
            st2 = os.stat(final)
            self.assertEqual(st2.st_atime_ns, st1.st_mtime_ns - 10**10)
            t_read2 = time.time_ns()
            with open(final, "rb") as f:
                self.assertEqual(f.read(), data)
            st3 = os.stat(final)
            self.assertGreaterEqual(st3.st_atime_ns, t_read2)
            self.assertEqual(st3.st_ctime_ns, st2.st_ctime_ns)

            # a second node sees the read's atime once it is journaled (about a second) and tailed
            b = self.mount("b")
            fb = os.path.join(b, "kv", "k1.bin")
            self.assertTrue(wait_for(lambda: os.path.exists(fb) and os.stat(fb).st_atime_ns == st3.st_atime_ns, 10.0),
                            "node b: atime %s, want %s" % (os.stat(fb).st_atime_ns if os.path.exists(fb) else None,
                                                          st3.st_atime_ns))
        # a clean remount of node a keeps it
        a = self.mount("a")
        self.assertEqual(os.stat(os.path.join(a, "kv", "k1.bin")).st_atime_ns, st3.st_atime_ns)

    def test_explicit_atime_after_a_peers_read_wins_everywhere(self):
        # B reads, then A sets atime explicitly: the read's note (journaled ~1 s after the read, with
        # the read's stamp) must not overwrite the later utimensat on either node.
        a = self.mount("a")
        b = self.mount("b")
        names = ["x%d" % i for i in range(6)]
        for n in names:
            self.publish(a, n, pattern(n, 1000))
        for n in names:
            fb = os.path.join(b, "kv", n + ".bin")
            self.assertTrue(wait_for(lambda fb=fb: os.path.exists(fb), 10.0))
        for i, n in enumerate(names):
            self.assertEqual(kf.read_file(os.path.join(b, "kv", n + ".bin")), pattern(n, 1000))
            os.utime(os.path.join(a, "kv", n + ".bin"), ns=(3000 * 10**9 + i, 4000 * 10**9))
        time.sleep(3)  # B's notes journaled and tailed by A; A's SETATTRs tailed by B
        for i, n in enumerate(names):
            for m in (a, b):
                st = os.stat(os.path.join(m, "kv", n + ".bin"))
                self.assertEqual(st.st_atime_ns, 3000 * 10**9 + i, (m, n))

    def test_writable_open_right_after_a_read_keeps_its_atime(self):
        a = self.mount("a")
        f1 = self.publish(a, "w1", pattern("w1", 100000))
        f2 = self.publish(a, "w2", pattern("w2", 100000))
        for f in (f1, f2):
            os.utime(f, ns=(1000 * 10**9, 2000 * 10**9))
        t_read = time.time_ns()
        for f in (f1, f2):
            with open(f, "rb") as fh:
                fh.read(10)
        os.close(os.open(f1, os.O_RDWR))  # a writer that writes nothing (the file moves to a new number)
        os.truncate(f2, 100000)           # a new version of the same content and size
        time.sleep(1.6)                   # past the journaling delay
        for f in (f1, f2):
            st = os.stat(f)
            self.assertGreaterEqual(st.st_atime_ns, t_read, f)

    def test_ro_mount_and_atime_flags(self):
        spec_a = self.mount("a")
        f = self.publish(spec_a, "r1", pattern("r1", 5000))
        os.utime(f, ns=(1000 * 10**9, 2000 * 10**9))
        self.stack.close()
        self.stack = contextlib.ExitStack()
        # fstab lines carry relatime / nodiratime / lazytime: accepted (libfuse does not know them)
        for opts in ("relatime,nodiratime", "strictatime", "lazytime,noexec"):
            with kf.mounted(backing=self.node("a"), node_id="a", o=opts) as (mnt, _, _):
                self.assertEqual(kf.read_file(os.path.join(mnt, "kv", "r1.bin")), pattern("r1", 5000))
        with kf.mounted(backing=self.node("a"), node_id="a", o="ro") as (mnt, _, _):
            st0 = os.stat(os.path.join(mnt, "kv", "r1.bin"))
            self.assertEqual(kf.read_file(os.path.join(mnt, "kv", "r1.bin")), pattern("r1", 5000))
            time.sleep(1.5)
            self.assertEqual(os.stat(os.path.join(mnt, "kv", "r1.bin")).st_atime_ns, st0.st_atime_ns)

    def test_noatime(self):
        a = self.mount("a", o="noatime")
        final = self.publish(a, "k2", pattern("noatime", 5000))
        st0 = os.stat(final)
        time.sleep(0.05)
        self.assertEqual(kf.read_file(final), pattern("noatime", 5000))
        time.sleep(1.5)  # past the journaling delay
        self.assertEqual(os.stat(final).st_atime_ns, st0.st_atime_ns)


@kf.skip_unless_fuse
class FsyncDir(unittest.TestCase):
    NODE = "c26"

    def setUp(self):
        self.b = kf.Backing()

    def tearDown(self):
        self.b.cleanup()

    def start(self):
        cmd = [kf.kvfs_binary(), "mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
               "--foreground", "--node-id", self.NODE, "--group-commit-ms", "200"]
        self.log = open(os.path.join(self.b.root, "daemon.log"), "ab")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 60
        while not kf.is_served(self.b.mnt):
            if proc.poll() is not None:
                raise RuntimeError("kvfs mount exited with %s" % proc.returncode)
            if time.time() > deadline:
                self.kill(proc)
                raise RuntimeError("mount did not appear")
            time.sleep(0.01)
        return proc

    def kill(self, proc):
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # only the pid this test started
        proc.wait()
        subprocess.run(["fusermount3", "-u", "-z", self.b.mnt], capture_output=True)
        self.log.close()

    def stop(self, proc):
        kf.unmount(self.b.mnt)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            raise
        self.log.close()

    def test_renames_before_fsyncdir_survive_sigkill(self):
        proc = self.start()
        try:
            mnt = self.b.mnt
            d = os.path.join(mnt, "kv")
            os.mkdir(d)
            want = {}
            for i in range(30):
                data = pattern("k%d" % i, 64 * KIB + i)
                tmp = os.path.join(d, "k%d.tmp" % i)
                kf.write_file(tmp, data)
                os.rename(tmp, os.path.join(d, "k%d" % i))
                want["k%d" % i] = data
            # renames of committed files (file first made durable, then renamed)
            os.mkdir(os.path.join(d, "sub"))
            for i in range(5):
                os.rename(os.path.join(d, "k%d" % i), os.path.join(d, "sub", "m%d" % i))
                want["sub/m%d" % i] = want.pop("k%d" % i)
            os.rename(os.path.join(d, "k29"), os.path.join(d, "k28"))  # rename over
            want["k28"] = want.pop("k29")
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                self.assertIsNone(os.fsync(fd))
            finally:
                os.close(fd)
        finally:
            self.kill(proc)  # SIGKILL right after fsyncdir returned (group commit interval 200 ms)
        proc = self.start()
        try:
            d = os.path.join(self.b.mnt, "kv")
            got = {}
            for root, _dirs, files in os.walk(d):
                for f in files:
                    got[os.path.relpath(os.path.join(root, f), d)] = kf.read_file(os.path.join(root, f))
            self.assertEqual(sorted(got), sorted(want))
            for k in want:
                self.assertTrue(got[k] == want[k], "content of %s" % k)
        finally:
            self.stop(proc)


if __name__ == "__main__":
    unittest.main(verbosity=2)
