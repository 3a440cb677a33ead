#!/usr/bin/env python3
"""Files as extents (docs/design.md §13, issue #18) on a real mount: a FLUSH of a changed version appends
only its dirty pages, so the bytes written to the export (`kvfs stats --json` backing_bytes_written:
segments + journal) stay about the bytes written through the mount, whatever the pattern:

  * a 2 MiB slot rewritten in a 64 MiB file writes <= 1.2x the slot (was the whole file);
  * 4 tensor-parallel ranks filling an ftruncate'd file with pwrite write <= 1.2x the file;
  * a 50 KiB pwrite at 1.6 MB of a new file writes < 64 KiB (the rest is a hole, not zeros);
  * every file reads back byte-exact: at once, after a remount (index kept, and rebuilt from the
    journals), and from a second node mounted on the same backing directory (it applies the version-3
    PUTs of the first node's journal).

  * a version kept open by reopens, or spilled while written at random, writes each byte once (a
    FLUSH leaves no clean chunk in RAM; a spill appends only dirty pages: KeptOpenVersion).

Counts, not timings. Environment: kvfs_fixture's KVFS_BINARY, KVFS_TEST_KEEP, KVFS_TEST_LOG.
"""

import errno
import hashlib
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvfs_fixture as kf  # noqa: E402

KIB = 1024
MIB = 1024 * 1024


def wait_for(cond, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@kf.skip_unless_fuse
class ExtentFiles(kf.SharedBackingCase):
    PREFIX = "kvfs-extents-"

    def written(self, mnt, fn):
        """Bytes written to the export by fn() (after its commits: the 5 ms commit delay and the group commit round)."""
        before = kf.stats(mnt)["backing_bytes_written"]
        fn()
        time.sleep(0.2)
        n = kf.stats(mnt)["backing_bytes_written"] - before
        sys.stderr.write("extents_test: %s wrote %d bytes to the export\n" % (fn.__name__, n))
        return n

    def test_slot_rewrite_tp_ranks_sparse_pwrite(self):
        spec = self.node("a")
        files = {}
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
            # A 64 MiB slot file, then one 2 MiB slot rewritten in place (O_RDWR, no truncate).
            slots = os.path.join(mnt, "slots.bin")
            data = bytearray(os.urandom(64 * MIB))
            kf.write_file(slots, bytes(data))
            slot = os.urandom(2 * MIB)

            def rewrite():
                fd = os.open(slots, os.O_RDWR)
                try:
                    self.assertEqual(os.pwrite(fd, slot, 20 * MIB), len(slot))
                finally:
                    os.close(fd)
            wrote = self.written(mnt, rewrite)
            data[20 * MIB:22 * MIB] = slot
            self.assertGreaterEqual(wrote, len(slot))
            self.assertLessEqual(wrote, 1.2 * len(slot), "a 2 MiB slot wrote %d bytes" % wrote)
            # A second slot, then a 1-byte change of the first: each costs its own pages only.
            slot2 = os.urandom(2 * MIB)

            def rewrite2():
                fd = os.open(slots, os.O_RDWR)
                try:
                    os.pwrite(fd, slot2, 40 * MIB)
                    os.pwrite(fd, b"X", 21 * MIB + 5)
                finally:
                    os.close(fd)
            wrote = self.written(mnt, rewrite2)
            data[40 * MIB:42 * MIB] = slot2
            data[21 * MIB + 5] = ord("X")
            self.assertLessEqual(wrote, 1.2 * (len(slot2) + 4 * KIB), "wrote %d bytes" % wrote)
            files["slots.bin"] = bytes(data)
            self.assertTrue(kf.read_file(slots) == files["slots.bin"])

            # 4 TP ranks: ftruncate, then each rank pwrites its slice through its own descriptor.
            tp = os.path.join(mnt, "tp.bin")
            tp_data = os.urandom(8 * MIB)
            part = len(tp_data) // 4

            def ranks():
                fd = os.open(tp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                os.ftruncate(fd, len(tp_data))
                os.close(fd)
                errors = []

                def rank(r):
                    try:
                        f = os.open(tp, os.O_RDWR)
                        try:
                            os.pwrite(f, tp_data[r * part:(r + 1) * part], r * part)
                        finally:
                            os.close(f)
                    except OSError as e:
                        errors.append(e)
                ts = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                self.assertEqual(errors, [])
            wrote = self.written(mnt, ranks)
            self.assertLessEqual(wrote, 1.2 * len(tp_data), "4 ranks wrote %d bytes" % wrote)
            files["tp.bin"] = tp_data
            self.assertTrue(kf.read_file(tp) == tp_data)

            # A sparse pwrite: 50 KiB at 1.6 MB of a new file; the rest is a hole.
            sparse = os.path.join(mnt, "sparse.bin")
            piece = os.urandom(50 * KIB)

            def sparse_write():
                fd = os.open(sparse, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    os.pwrite(fd, piece, 1600 * 1000)
                finally:
                    os.close(fd)
            wrote = self.written(mnt, sparse_write)
            self.assertLess(wrote, 64 * KIB, "a 50 KiB sparse pwrite wrote %d bytes" % wrote)
            files["sparse.bin"] = b"\0" * (1600 * 1000) + piece
            self.assertTrue(kf.read_file(sparse) == files["sparse.bin"])
            st = os.stat(sparse)
            self.assertEqual(st.st_size, len(files["sparse.bin"]))
            self.assertLess(st.st_blocks * 512, 64 * KIB)  # data bytes, not the size
            # Reads across extents and holes, unaligned.
            fd = os.open(slots, os.O_RDONLY)
            try:
                self.assertEqual(os.pread(fd, 3 * MIB, 19 * MIB + 7), files["slots.bin"][19 * MIB + 7:22 * MIB + 7])
            finally:
                os.close(fd)

        # Remount with the index kept, then with the index rebuilt from the journals.
        for rebuild in (False, True):
            if rebuild:
                shutil.rmtree(spec.index)
            with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
                for name, want in files.items():
                    self.assertTrue(kf.read_file(os.path.join(mnt, name)) == want, "%s rebuild=%s" % (name, rebuild))
        # A second node on the same backing: applies node a's version-3 PUTs (a stays mounted).
        a, _, _ = self.stack.enter_context(kf.mounted(backing=spec, node_id="a", peer_poll_ms=200))
        b, _, _ = self.stack.enter_context(kf.mounted(backing=self.node("b"), node_id="b", peer_poll_ms=200))
        for name, want in files.items():
            p = os.path.join(b, name)
            self.assertTrue(wait_for(lambda: os.path.exists(p), 10.0), name)
            self.assertTrue(kf.read_file(p) == want, name)
        # A rewrite on node b of a's extent file: b's copy-on-write of the map, seen by a.
        fd = os.open(os.path.join(b, "slots.bin"), os.O_RDWR)
        try:
            os.pwrite(fd, b"peer", 63 * MIB)
        finally:
            os.close(fd)
        want = files["slots.bin"][:63 * MIB] + b"peer" + files["slots.bin"][63 * MIB + 4:]
        self.assertTrue(wait_for(lambda: kf.read_file(os.path.join(a, "slots.bin")) == want, 10.0))


def punch_hole(fd, off, length):
    """fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, length)."""
    import ctypes
    import ctypes.util
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.fallocate(fd, ctypes.c_int(0x02 | 0x01), ctypes.c_long(off), ctypes.c_long(length)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def zero_range(fd, off, length, keep_size=False):
    """fallocate(fd, FALLOC_FL_ZERO_RANGE [| FALLOC_FL_KEEP_SIZE], off, length)."""
    import ctypes
    import ctypes.util
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    mode = 0x10 | (0x01 if keep_size else 0)
    if libc.fallocate(fd, ctypes.c_int(mode), ctypes.c_long(off), ctypes.c_long(length)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def seek_answers(path, offsets):
    """(SEEK_DATA, SEEK_HOLE) answers of `path` at each offset: an offset, or the errno name."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in offsets:
            row = []
            for whence in (os.SEEK_DATA, os.SEEK_HOLE):
                try:
                    row.append(os.lseek(fd, off, whence))
                except OSError as e:
                    row.append(errno.errorcode[e.errno])
            out.append((off, tuple(row)))
    finally:
        os.close(fd)
    return out


def probe_offsets(size, marks):
    """Offsets worth asking: 0, every mark and a byte either side, a 256 KiB stride, and the end."""
    offs = {0, 1, 4095, 4096, size - 1, size, size + 1, size + 5 * MIB}
    for m in marks:
        offs.update((m - 1, m, m + 1))
    offs.update(range(0, size, 256 * KIB))
    return sorted(o for o in offs if o >= 0)


@kf.skip_unless_fuse
class SeekDataHole(kf.SharedBackingCase):
    """lseek SEEK_DATA / SEEK_HOLE on a mount answer from the file's holes (design.md §13 step 4): the
    same answers as ext4 (/tmp) and tmpfs (/dev/shm) give for the same file, at every probe offset,
    while the file is being written (the staged version's holes), once it is committed (its extent
    map), after a remount, and from a second node; holes made by growth and by fallocate PUNCH_HOLE
    (which writes no data bytes for whole chunks)."""

    PREFIX = "kvfs-holes-"

    # Each case: (name, steps); a step is ("pwrite", off, len) / ("ftruncate", n) / ("close",) /
    # ("reopen",): the same steps run on the mount and on the reference directories.
    CASES = [
        # A 50 KiB pwrite at 1.6 MB of a new file: [0, 1597440) is a hole.
        ("sparse.bin", [("pwrite", 1600 * 1000, 50 * KIB)]),
        # A 2 MiB slot written into an 8 MiB ftruncated file, then (another open) a 1 MiB slot and 100
        # bytes in the middle of a page: data only where written, a trailing hole.
        ("slots.bin", [("ftruncate", 8 * MIB), ("pwrite", 2 * MIB, 2 * MIB), ("close",), ("reopen",),
                       ("pwrite", 5 * MIB, 1 * MIB), ("pwrite", 7 * MIB + 10, 100)]),
        # fallocate PUNCH_HOLE: two whole 1 MiB chunks of a committed 4 MiB file (holes, nothing
        # written), and 4 pages of a new file's written bytes (holes).
        ("punched.bin", [("pwrite", 0, 4 * MIB), ("close",), ("reopen",), ("punch", 1 * MIB, 2 * MIB)]),
        ("punched-new.bin", [("pwrite", 0, 3 * MIB), ("punch", 20480, 16384)]),
        # A file written whole: one record, all data.
        ("whole.bin", [("pwrite", 0, 3 * MIB + 17)]),
        # 64 KiB in the middle of nothing, then the file cut inside that data (40 KiB of it stay: over
        # the fragmentation bound's 1/6 live, so the FLUSH keeps the map and its hole).
        ("cut.bin", [("ftruncate", 4 * MIB), ("pwrite", 3 * MIB, 64 * KIB), ("close",), ("reopen",),
                     ("ftruncate", 3 * MIB + 40 * KIB + 1)]),
    ]

    def run_steps(self, root, name, steps, check_open=None):
        path = os.path.join(root, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        rng = 0
        try:
            for st in steps:
                if st[0] == "pwrite":
                    rng += 1
                    os.pwrite(fd, bytes([rng]) * st[2], st[1])
                elif st[0] == "ftruncate":
                    os.ftruncate(fd, st[1])
                elif st[0] == "punch":
                    punch_hole(fd, st[1], st[2])
                elif st[0] in ("zero", "zero-keep"):
                    zero_range(fd, st[1], st[2], keep_size=st[0] == "zero-keep")
                elif st[0] == "close":
                    os.close(fd)
                    fd = -1
                elif st[0] == "reopen":
                    fd = os.open(path, os.O_RDWR)
            if check_open:
                check_open(path)
        finally:
            if fd >= 0:
                os.close(fd)
        return path

    def marks(self, steps):
        m = []
        for st in steps:
            if st[0] == "pwrite":
                m += [st[1], st[1] + st[2], st[1] // 4096 * 4096, (st[1] + st[2] + 4095) // 4096 * 4096]
            elif st[0] == "ftruncate":
                m.append(st[1])
            elif st[0] in ("punch", "zero", "zero-keep"):
                m += [st[1], st[1] + st[2]]
        return m

    def test_seek_data_and_hole_match_ext4_and_tmpfs(self):
        refs = []
        for parent in ("/tmp", "/dev/shm"):
            if os.path.isdir(parent):
                d = tempfile.mkdtemp(prefix="kvfs-holes-ref-", dir=parent)
                self.addCleanup(shutil.rmtree, d, True)
                refs.append(d)
        want = {}
        for name, steps in self.CASES:
            ref = self.run_steps(refs[0], name, steps)
            size = os.stat(ref).st_size
            want[name] = seek_answers(ref, probe_offsets(size, self.marks(steps)))
            for other in refs[1:]:
                self.assertEqual(seek_answers(self.run_steps(other, name, steps), [o for o, _ in want[name]]),
                                 want[name], "%s: the reference file systems disagree" % name)
        # Sanity of the references: the sparse file's data starts at the page its write starts in.
        self.assertEqual(dict(want["sparse.bin"])[0], (1597440, 0))
        spec = self.node("a")
        staged = {}
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
            for name, steps in self.CASES:
                offs = [o for o, _ in want[name]]
                path = self.run_steps(mnt, name, steps,
                                      check_open=lambda p, n=name, o=offs: staged.__setitem__(n, seek_answers(p, o)))
                self.assertEqual(staged[name], want[name], "%s while open for writing" % name)
                self.assertEqual(seek_answers(path, offs), want[name], "%s committed" % name)
            st = kf.stats(mnt)
            self.assertGreaterEqual(st["fuse"]["extent_flushes"], 3, st["fuse"])
            # Punching 2 MiB out of a committed 8 MiB file writes no data bytes (the journal entry only)
            # and the range reads zeros, after a remount too (below).
            data = bytearray(os.urandom(8 * MIB))
            kf.write_file(os.path.join(mnt, "punch2.bin"), bytes(data))
            time.sleep(0.2)  # committed (the commit delay), so the punch opens a copy-on-write version

            def punch():
                fd = os.open(os.path.join(mnt, "punch2.bin"), os.O_RDWR)
                try:
                    punch_hole(fd, 3 * MIB, 2 * MIB)
                    self.assertEqual(os.fstat(fd).st_size, 8 * MIB)
                finally:
                    os.close(fd)
            wrote = ExtentFiles.written(self, mnt, punch)
            self.assertLess(wrote, 16 * KIB, "a 2 MiB punch wrote %d bytes" % wrote)
            data[3 * MIB:5 * MIB] = bytes(2 * MIB)
            self.assertTrue(kf.read_file(os.path.join(mnt, "punch2.bin")) == data)
            self.assertEqual(os.stat(os.path.join(mnt, "punch2.bin")).st_blocks * 512, 6 * MIB)
        with kf.mounted(backing=spec, node_id="a", peer_poll_ms=200) as (mnt, _, _):
            for name, _ in self.CASES:
                self.assertEqual(seek_answers(os.path.join(mnt, name), [o for o, _ in want[name]]), want[name],
                                 "%s after a remount" % name)
            self.assertTrue(kf.read_file(os.path.join(mnt, "punch2.bin")) == data)
            with kf.mounted(backing=self.node("b"), node_id="b", peer_poll_ms=200) as (b, _, _):
                for name, _ in self.CASES:
                    p = os.path.join(b, name)
                    self.assertTrue(wait_for(lambda: os.path.exists(p), 10.0), name)
                    self.assertEqual(seek_answers(p, [o for o, _ in want[name]]), want[name], "%s on node b" % name)


@kf.skip_unless_fuse
class ZeroRange(kf.SharedBackingCase):
    """fallocate ZERO_RANGE (with and without KEEP_SIZE) on a mount leaves the same bytes and sizes as
    ext4 (/tmp; tmpfs has no ZERO_RANGE) for the same steps: the range reads zeros and, without
    KEEP_SIZE, the file grows to the range's end. The pages it covers whole are holes (ext4 may answer
    them as data: zeros it wrote, or unwritten extents; a hole reported as data is allowed, the
    reverse is not), the pages it covers in part hold written zeros. Every reported hole reads zeros,
    and the SEEK_DATA / SEEK_HOLE answers are the same while open, committed, after a remount and on
    a second node. Zeroing 2 MiB of a committed 8 MiB file writes no data bytes. Before 2026-12-07
    (late) every ZERO_RANGE answered EOPNOTSUPP."""

    PREFIX = "kvfs-zero-"
    run_steps = SeekDataHole.run_steps
    marks = SeekDataHole.marks

    CASES = [
        # Two whole 1 MiB chunks and a partial page on either side, in a committed 4 MiB file.
        ("zero-committed.bin", [("pwrite", 0, 4 * MIB), ("close",), ("reopen",), ("zero", 1 * MIB - 100, 2 * MIB + 200)]),
        # Inside a new file's written bytes, then past its end without KEEP_SIZE (grows: a hole), then
        # past the new end with KEEP_SIZE (the size stays).
        ("zero-new.bin", [("pwrite", 0, 3 * MIB), ("zero", 20480 + 7, 16384), ("zero", 3 * MIB + 5000, 70000),
                          ("zero-keep", 3 * MIB + 60000, 1 * MIB)]),
        # Across the end of a committed file with KEEP_SIZE: only the part inside is zeroed.
        ("zero-keep.bin", [("pwrite", 0, 2 * MIB + 300), ("close",), ("reopen",), ("zero-keep", 2 * MIB - 4096, 1 * MIB)]),
        # Entirely past the end of a sparse file, without KEEP_SIZE: a growth only.
        ("zero-past.bin", [("ftruncate", 1 * MIB), ("pwrite", 512 * KIB, 4096), ("zero", 5 * MIB, 4096)]),
    ]

    def contents(self, root):
        return {name: hashlib.sha256(kf.read_file(os.path.join(root, name))).hexdigest() for name, _ in self.CASES}

    def holes_read_zeros(self, path, answers):
        data = kf.read_file(path)
        for off, (d, _) in answers:
            end = len(data) if isinstance(d, str) else d
            if off < end:
                self.assertEqual(data[off:end].count(0), end - off,
                                 "%s: SEEK_DATA(%d) = %s skips non-zero bytes" % (path, off, d))

    def test_zero_range_bytes_match_ext4_and_zeroed_pages_are_holes(self):
        ref = tempfile.mkdtemp(prefix="kvfs-zero-ref-", dir="/tmp")
        self.addCleanup(shutil.rmtree, ref, True)
        offs, sizes = {}, {}
        for name, steps in self.CASES:
            p = self.run_steps(ref, name, steps)
            sizes[name] = os.stat(p).st_size
            offs[name] = probe_offsets(sizes[name], self.marks(steps))
        want_bytes = self.contents(ref)
        self.assertEqual(sizes["zero-new.bin"], 3 * MIB + 75000)
        self.assertEqual(sizes["zero-keep.bin"], 2 * MIB + 300)
        self.assertEqual(sizes["zero-past.bin"], 5 * MIB + 4096)
        spec = self.node("a")
        got = {}
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
            staged, staged_size = {}, {}

            def check_open(p, n):
                staged[n] = seek_answers(p, offs[n])
                staged_size[n] = os.stat(p).st_size
            for name, steps in self.CASES:
                path = self.run_steps(mnt, name, steps, check_open=lambda p, n=name: check_open(p, n))
                self.assertEqual(staged_size[name], sizes[name], "%s while open" % name)
                self.assertEqual(os.stat(path).st_size, sizes[name], name)
                got[name] = seek_answers(path, offs[name])
                self.assertEqual(staged[name], got[name], "%s: answers while open and committed differ" % name)
                self.holes_read_zeros(path, got[name])
            self.assertEqual(self.contents(mnt), want_bytes)
            # The whole pages of the zeroed range are a hole; its partial pages are data (written zeros).
            a = dict(got["zero-committed.bin"])
            self.assertEqual(a[0], (0, 1 * MIB))
            self.assertEqual(a[1 * MIB], (3 * MIB, 1 * MIB))
            a = dict(got["zero-new.bin"])  # zeroed [20487, 36871): whole pages [24576, 36864)
            self.assertEqual(a[20488], (20488, 24576))
            self.assertEqual(a[36870], (36870, 3 * MIB))
            self.assertEqual(dict(got["zero-past.bin"])[512 * KIB + 4096], ("ENXIO", 512 * KIB + 4096))
            data = bytearray(os.urandom(8 * MIB))
            kf.write_file(os.path.join(mnt, "zero2.bin"), bytes(data))
            time.sleep(0.2)  # committed (the commit delay), so the zeroing opens a copy-on-write version

            def zero():
                fd = os.open(os.path.join(mnt, "zero2.bin"), os.O_RDWR)
                try:
                    zero_range(fd, 3 * MIB, 2 * MIB)
                    self.assertEqual(os.fstat(fd).st_size, 8 * MIB)
                finally:
                    os.close(fd)
            wrote = ExtentFiles.written(self, mnt, zero)
            self.assertLess(wrote, 16 * KIB, "zeroing 2 MiB wrote %d bytes" % wrote)
            data[3 * MIB:5 * MIB] = bytes(2 * MIB)
            self.assertTrue(kf.read_file(os.path.join(mnt, "zero2.bin")) == data)
        with kf.mounted(backing=spec, node_id="a", peer_poll_ms=200) as (mnt, _, _):
            for name, _ in self.CASES:
                self.assertEqual(seek_answers(os.path.join(mnt, name), offs[name]), got[name], "%s after a remount" % name)
            self.assertEqual(self.contents(mnt), want_bytes)
            self.assertTrue(kf.read_file(os.path.join(mnt, "zero2.bin")) == data)
            with kf.mounted(backing=self.node("b"), node_id="b", peer_poll_ms=200) as (b, _, _):
                for name, _ in self.CASES:
                    p = os.path.join(b, name)
                    self.assertTrue(wait_for(lambda: os.path.exists(p), 10.0), name)
                    self.assertEqual(seek_answers(p, offs[name]), got[name], "%s on node b" % name)
                self.assertEqual(self.contents(b), want_bytes)


@kf.skip_unless_fuse
class RewriteAfterWholeFlush(kf.SharedBackingCase):
    """A version whose FLUSH wrote it whole (all new bytes: one plain record) and that is written again
    (a writable reopen within the commit delay joins it; writes after an fsync) appends only what
    changed since that FLUSH: its chunks are clean references to that record (ChunkBuffer::RebaseWhole,
    design.md §13 step 3). Before, its pages stayed dirty and the next FLUSH appended them all again
    (a 2 MiB punch of a just-written 8 MiB file wrote 6,295,665 more bytes). Counts
    backing_bytes_written; a 1 s commit delay makes every reopen join the closed version."""

    PREFIX = "kvfs-rebase-whole-"
    DELAY_S = 1.0

    def written(self, mnt, fn):
        before = kf.stats(mnt)["backing_bytes_written"]
        fn()
        time.sleep(self.DELAY_S + 0.5)  # the deferred commit and its group commit round
        n = kf.stats(mnt)["backing_bytes_written"] - before
        sys.stderr.write("extents_test: %s wrote %d bytes to the export\n" % (fn.__name__, n))
        return n

    def test_reopen_within_commit_delay_and_write_after_fsync(self):
        spec = self.node("a")
        env = {"KVFS_TEST_COMMIT_DELAY_MS": str(int(self.DELAY_S * 1000))}
        want = {}
        with kf.mounted(backing=spec, node_id="a", env=env) as (mnt, _, _):
            # Written once and closed: one plain record (no extent FLUSH), the file's bytes + journal.
            once = os.urandom(8 * MIB)

            def write_once():
                kf.write_file(os.path.join(mnt, "once.bin"), once)
            f0 = kf.stats(mnt)["fuse"]
            wrote = self.written(mnt, write_once)
            f1 = kf.stats(mnt)["fuse"]
            self.assertGreaterEqual(wrote, len(once))
            self.assertLess(wrote, len(once) + 16 * KIB)
            self.assertEqual(f1["extent_flushes"], f0["extent_flushes"], f1)
            want["once.bin"] = once

            # Written, closed, reopened at once (joins the version), 2 MiB punched out.
            punched = bytearray(os.urandom(8 * MIB))

            def write_then_punch():
                p = os.path.join(mnt, "punch.bin")
                kf.write_file(p, bytes(punched))
                fd = os.open(p, os.O_RDWR)
                try:
                    punch_hole(fd, 3 * MIB, 2 * MIB)
                finally:
                    os.close(fd)
            wrote = self.written(mnt, write_then_punch)
            punched[3 * MIB:5 * MIB] = bytes(2 * MIB)
            self.assertGreaterEqual(wrote, 8 * MIB)
            self.assertLess(wrote, 8 * MIB + 16 * KIB, "8 MiB + a 2 MiB punch wrote %d bytes" % wrote)
            want["punch.bin"] = bytes(punched)

            # Written, closed, reopened at once, 64 KiB (plus a byte either side: 18 pages) rewritten.
            rewritten = bytearray(os.urandom(8 * MIB))
            piece = os.urandom(64 * KIB + 2)

            def write_then_pwrite():
                p = os.path.join(mnt, "pwrite.bin")
                kf.write_file(p, bytes(rewritten))
                fd = os.open(p, os.O_RDWR)
                try:
                    os.pwrite(fd, piece, 5 * MIB - 1)
                finally:
                    os.close(fd)
            wrote = self.written(mnt, write_then_pwrite)
            rewritten[5 * MIB - 1:5 * MIB - 1 + len(piece)] = piece
            self.assertLess(wrote, 8 * MIB + 1.2 * 72 * KIB + 16 * KIB, "8 MiB + 64 KiB wrote %d bytes" % wrote)
            want["pwrite.bin"] = bytes(rewritten)

            # One open: 8 MiB written, fsync (FLUSH + commit), 64 KiB more at 1 MiB, close.
            synced = bytearray(os.urandom(8 * MIB))
            piece2 = os.urandom(64 * KIB)

            def write_fsync_pwrite():
                fd = os.open(os.path.join(mnt, "fsync.bin"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    os.pwrite(fd, bytes(synced), 0)
                    os.fsync(fd)
                    os.pwrite(fd, piece2, 1 * MIB)
                finally:
                    os.close(fd)
            wrote = self.written(mnt, write_fsync_pwrite)
            synced[1 * MIB:1 * MIB + len(piece2)] = piece2
            self.assertLess(wrote, 8 * MIB + 1.2 * len(piece2) + 16 * KIB, "8 MiB, fsync, 64 KiB wrote %d bytes" % wrote)
            want["fsync.bin"] = bytes(synced)

            for name, data in want.items():
                self.assertTrue(kf.read_file(os.path.join(mnt, name)) == data, name)
            self.assertEqual(os.stat(os.path.join(mnt, "punch.bin")).st_blocks * 512, 6 * MIB)
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
            for name, data in want.items():
                self.assertTrue(kf.read_file(os.path.join(mnt, name)) == data, name + " after a remount")
            self.assertEqual(seek_answers(os.path.join(mnt, "punch.bin"), [0, 3 * MIB, 5 * MIB]),
                             [(0, (0, 3 * MIB)), (3 * MIB, (5 * MIB, 3 * MIB)), (5 * MIB, (5 * MIB, 8 * MIB))])


@kf.skip_unless_fuse
class KeptOpenVersion(kf.SharedBackingCase):
    """A version kept alive across many closes (back-to-back O_RDWR reopens of a slot file, each made
    before the previous close's deferred commit) or written at random through one long open, under a
    small --staging-size (breaker F2, #18). After a FLUSH its chunks are clean references to what it
    appended (ChunkBuffer::ReleaseClean: no RAM), and a spill appends only dirty pages, never a clean
    chunk (ChunkBuffer::SpillDirty). Counts backing_bytes_written. Before, every flushed 2 MiB slot
    stayed in RAM (staged_bytes +2 MiB per cycle) and was spilled, i.e. written a second time: 12 slots
    wrote 45,228,339 bytes (1.80x; now 25,256,349, 1.004x); and a spill of chunks copied in for 4 KiB
    writes wrote each whole: 400 x 4 KiB wrote 406,710,292 bytes (248x; now 1,870,806, 1.14x)."""

    PREFIX = "kvfs-kept-open-"

    def test_reopened_slot_file_writes_each_slot_once(self):
        spec = self.node("a")
        env = {"KVFS_TEST_COMMIT_DELAY_MS": "1000"}  # every reopen joins the closed version
        flags = dict(segment_size="8MiB", staging_size="8MiB")
        size, slot, cycles = 64 * MIB, 2 * MIB, 12
        model = bytearray(size)
        with kf.mounted(backing=spec, node_id="a", env=env, **flags) as (mnt, _, _):
            p = os.path.join(mnt, "slots.bin")
            fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, size)
            os.close(fd)
            time.sleep(1.5)
            before = kf.stats(mnt)
            hold, staged = None, []
            for c in range(cycles):
                data = os.urandom(slot)
                fd = os.open(p, os.O_RDWR)
                os.pwrite(fd, data, c * slot)
                os.close(fd)
                model[c * slot:(c + 1) * slot] = data
                if hold is not None:
                    os.close(hold)
                hold = os.open(p, os.O_RDWR)  # the next cycle's open, before the deferred commit
                staged.append(kf.stats(mnt)["fuse"]["staged_bytes"])
            os.close(hold)
            time.sleep(1.5)
            after = kf.stats(mnt)
            wrote = after["backing_bytes_written"] - before["backing_bytes_written"]
            sys.stderr.write("extents_test: %d slots of 2 MiB through reopens wrote %d bytes, staged %s\n"
                             % (cycles, wrote, staged))
            self.assertLessEqual(wrote, 1.2 * cycles * slot)
            self.assertEqual(after["fuse"]["spilled_bytes_total"], before["fuse"]["spilled_bytes_total"])
            self.assertLessEqual(max(staged), slot, staged)  # was 2 MiB more per cycle, up to the budget
            self.assertTrue(kf.read_file(p) == bytes(model), "read-back")
        with kf.mounted(backing=spec, node_id="a", **flags) as (mnt, _, _):
            self.assertTrue(kf.read_file(os.path.join(mnt, "slots.bin")) == bytes(model), "after a remount")

    def test_spill_of_one_long_open_writes_only_dirty_pages(self):
        spec = self.node("a")
        flags = dict(segment_size="8MiB", staging_size="8MiB")
        size, n = 64 * MIB, 400  # under ExtentMap::kMaxExtents (no compaction copies)
        model = bytearray(os.urandom(size))
        with kf.mounted(backing=spec, node_id="a", **flags) as (mnt, _, _):
            p = os.path.join(mnt, "f.bin")
            kf.write_file(p, bytes(model))
            time.sleep(0.3)
            before = kf.stats(mnt)
            pages = random.Random(18).sample(range(size // (4 * KIB)), n)
            fd = os.open(p, os.O_RDWR)
            try:
                for pg in pages:  # each copies its 1 MiB chunk in: 64 chunks through an 8 MiB budget
                    data = os.urandom(4 * KIB)
                    os.pwrite(fd, data, pg * 4 * KIB)
                    model[pg * 4 * KIB:(pg + 1) * 4 * KIB] = data
                mid = kf.stats(mnt)["fuse"]
            finally:
                os.close(fd)
            time.sleep(0.3)
            after = kf.stats(mnt)
            wrote = after["backing_bytes_written"] - before["backing_bytes_written"]
            spilled = mid["spilled_bytes_total"] - before["fuse"]["spilled_bytes_total"]
            sys.stderr.write("extents_test: %d random 4 KiB pwrites through one open wrote %d bytes (%d spilled)\n"
                             % (n, wrote, spilled))
            self.assertGreater(mid["spills"], before["fuse"]["spills"])  # the spill path ran
            self.assertLessEqual(spilled, n * 4 * KIB)
            self.assertLessEqual(wrote, 1.2 * n * 4 * KIB)
            self.assertTrue(kf.read_file(p) == bytes(model), "read-back")
        with kf.mounted(backing=spec, node_id="a", **flags) as (mnt, _, _):
            self.assertTrue(kf.read_file(os.path.join(mnt, "f.bin")) == bytes(model), "after a remount")


@kf.skip_unless_fuse
class CompactionCopies(kf.SharedBackingCase):
    """A file rewritten by many small scattered pwrites over many reopen/close cycles crosses 1024
    extents; its FLUSHes then copy only what ExtentMap::CompactionRanges picks into the record of their
    dirty pages (design.md §13, compaction copies): the live extents of records under 1/6 live, and
    joins of neighbouring extents (cheapest first, large holes never) paid from the file's copy budget,
    1/5 of the dirty bytes its FLUSHes appended. Counted from the file's creation: the compaction
    copies add at most 0.2 + 0.2 of the dirty page bytes, and the segment bytes written are at most 1.2x
    the dirty pages plus each record's metadata (design.md §13 "Segment record overhead"; the journal
    counted apart); the map stays under the hard cap (kvfs-fsck --dump-index), the holes stay holes
    (SEEK_DATA / SEEK_HOLE), the bytes are exact after a remount and on a second node. Before the budget
    (the joins went down to 512 extents whatever they cost) the rewrites alone wrote 4.01x the bytes
    written through the mount, 6 compaction FLUSHes copying 8,982,528 bytes."""

    PREFIX = "kvfs-compaction-"
    CYCLES = 160
    WRITES = 8  # per cycle: 3 in 4 are aligned 4 KiB pages, the others 100 unaligned bytes

    def journal_bytes(self):
        d = os.path.join(self.backing, ".kvfs", "v1", "nodes", "a")
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("journal-"))

    def test_scattered_rewrites_keep_the_bound_and_the_holes(self):
        import random
        rnd = random.Random(18)
        spec = self.node("a")
        size, hole = 16 * MIB, (6 * MIB, 10 * MIB)
        data = bytearray(size)
        data[0:hole[0]] = os.urandom(hole[0])
        data[hole[1]:] = os.urandom(size - hole[1])
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
            p = os.path.join(mnt, "frag.bin")
            time.sleep(0.3)
            # Counted from the file's creation: the bound is over everything written to it (its first
            # FLUSH appends 12 MiB of dirty pages too, and earns its budget).
            st0, j0 = kf.stats(mnt), self.journal_bytes()
            fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, size)
                os.pwrite(fd, bytes(data[0:hole[0]]), 0)
                os.pwrite(fd, bytes(data[hole[1]:]), hole[1])
            finally:
                os.close(fd)
            time.sleep(0.3)
            # Bytes written through the mount; the 4 KiB pages they dirtied, per close.
            through, dirty = hole[0] + size - hole[1], hole[0] + size - hole[1]
            for _ in range(self.CYCLES):
                fd = os.open(p, os.O_RDWR)
                pages = set()
                try:
                    for _ in range(self.WRITES):
                        region = 0 if rnd.random() < 0.5 else hole[1]
                        if rnd.random() < 0.75:
                            n, off = 4096, region + rnd.randrange(6 * MIB // 4096) * 4096
                        else:
                            n, off = 100, region + rnd.randrange(6 * MIB - 100)
                        b = os.urandom(n)
                        self.assertEqual(os.pwrite(fd, b, off), n)
                        data[off:off + n] = b
                        through += n
                        pages.update(range(off // 4096, (off + n - 1) // 4096 + 1))
                finally:
                    os.close(fd)
                dirty += 4096 * len(pages)
                time.sleep(0.01)
            time.sleep(0.3)
            st1, j1 = kf.stats(mnt), self.journal_bytes()
            wrote = st1["backing_bytes_written"] - st0["backing_bytes_written"]
            journal = j1 - j0
            records = st1["records_written"] - st0["records_written"]
            compactions = st1["fuse"]["compaction_flushes"] - st0["fuse"]["compaction_flushes"]
            copied = st1["fuse"]["compaction_copied_bytes"] - st0["fuse"]["compaction_copied_bytes"]
            sys.stderr.write("extents_test: %d cycles, %d bytes through the mount (%d dirty page bytes), %d to the "
                             "export (%.2fx; journal %d, %d records), %d compaction flushes copying %d bytes\n"
                             % (self.CYCLES, through, dirty, wrote, wrote / through, journal, records, compactions,
                                copied))
            self.assertGreaterEqual(compactions, 1, st1["fuse"])
            self.assertEqual(st1["fuse"]["streamed_commits"], st0["fuse"]["streamed_commits"])
            # The compaction copies: at most 0.2 (records under 1/6 live) + 0.2 (joins, the copy budget) of
            # the dirty pages; the segments: the dirty pages, the copies, and per record its metadata (a 4 KiB
            # block, more for the checksum table of a large one): 1.2x here, the cold copies being few.
            self.assertLessEqual(copied, 0.4 * dirty, "%d dirty page bytes, %d copied" % (dirty, copied))
            self.assertLessEqual(wrote - journal, 1.2 * dirty + 8192 * records,
                                 "%d dirty page bytes wrote %d to the segments" % (dirty, wrote - journal))
            self.assertTrue(kf.read_file(p) == data)
            self.assertEqual(seek_answers(p, [0, hole[0], hole[1]]),
                             [(0, (0, hole[0])), (hole[0], (hole[1], hole[0])), (hole[1], (hole[1], size))])
        r = fsck("--dump-index", spec.index, "--node", "a")
        self.assertEqual(r.returncode, 0, r.stderr)
        import json
        ext = json.loads(r.stdout)["/frag.bin"]["extents"]
        sys.stderr.write("extents_test: frag.bin has %d extents\n" % len(ext))
        self.assertGreater(len(ext), 16)
        self.assertLessEqual(len(ext), 16384)  # ExtentMap::kMaxExtents
        self.assertFalse(any(e["file_offset"] < hole[1] and e["file_offset"] + e["length"] > hole[0] for e in ext))
        with kf.mounted(backing=spec, node_id="a", peer_poll_ms=200) as (mnt, _, _):
            p = os.path.join(mnt, "frag.bin")
            self.assertTrue(kf.read_file(p) == data, "after a remount")
            self.assertEqual(seek_answers(p, [hole[0]]), [(hole[0], (hole[1], hole[0]))])
            with kf.mounted(backing=self.node("b"), node_id="b", peer_poll_ms=200) as (b, _, _):
                q = os.path.join(b, "frag.bin")
                self.assertTrue(wait_for(lambda: os.path.exists(q), 10.0))
                self.assertTrue(kf.read_file(q) == data, "on node b")
                self.assertEqual(seek_answers(q, [hole[0]]), [(hole[0], (hole[1], hole[0]))])


@kf.skip_unless_fuse
class JournalDeltas(kf.SharedBackingCase):
    """Small in-place rewrites of a large extent file journal a delta PUT (docs/format.md "Extent deltas",
    PUT entry version 5: the extents that changed against the writer's own previous binding of the path)
    instead of the whole map, with a whole map now and then: journal bytes per 4 KiB rewrite stay about
    constant as the map grows to ~1000 extents (before: each close journaled the whole map, 2,191 B per
    write for the first 200 writes, 20,825 B at the 1000th extent). The file reads back byte-exact after
    a remount (index kept, and rebuilt from the journals: replay resolves the deltas), on a second node
    (its tailer applies them, none unresolved), and kvfs-fsck is clean."""

    PREFIX = "kvfs-deltas-"
    WRITES = 1000

    def journal_bytes(self):
        d = os.path.join(self.backing, ".kvfs", "v1", "nodes", "a")
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("journal-"))

    def test_journal_bytes_per_small_rewrite_stay_constant(self):
        import random
        rnd = random.Random(18)
        spec = self.node("a")
        size = 64 * MIB
        data = bytearray(size)
        data[0:MIB] = os.urandom(MIB)
        offs = [p * 4096 for p in rnd.sample(range(size // 4096), self.WRITES)]
        per_write = {}
        with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
            p = os.path.join(mnt, "slots.bin")
            fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.pwrite(fd, bytes(data[0:MIB]), 0)
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
            time.sleep(0.3)
            marks = {}
            for i, off in enumerate(offs):
                if i in (0, 100, self.WRITES - 100):
                    time.sleep(0.2)
                    marks[i] = (self.journal_bytes(), kf.stats(mnt)["backing_bytes_written"])
                b = os.urandom(4096)
                fd = os.open(p, os.O_RDWR)
                try:
                    self.assertEqual(os.pwrite(fd, b, off), 4096)
                finally:
                    os.close(fd)
                data[off:off + 4096] = b
                time.sleep(0.005)
            time.sleep(0.3)
            st = kf.stats(mnt)
            marks[self.WRITES] = (self.journal_bytes(), st["backing_bytes_written"])
            for lo, hi in ((0, 100), (self.WRITES - 100, self.WRITES)):
                per_write[lo] = tuple((marks[hi][k] - marks[lo][k]) / (hi - lo) for k in (0, 1))
            ext = st["extent_puts"]
            sys.stderr.write("extents_test: journal bytes per 4 KiB rewrite %.0f (writes 1-100), %.0f (writes "
                             "%d-%d); export bytes per write %.0f, %.0f; %s\n"
                             % (per_write[0][0], per_write[self.WRITES - 100][0], self.WRITES - 99, self.WRITES,
                                per_write[0][1], per_write[self.WRITES - 100][1], ext))
            first, last = per_write[0][0], per_write[self.WRITES - 100][0]
            self.assertLess(last, 3 * first, per_write)
            self.assertLess(last, 600, per_write)  # a whole ~1000-extent map is ~20 KB
            self.assertLess(per_write[self.WRITES - 100][1], 1.2 * per_write[0][1], per_write)
            # Most PUTs are deltas (closes within one commit delay share one commit and one PUT: design.md §13
            # "Sealed closes"; before those, one PUT per write).
            self.assertGreater(ext["delta"], (ext["delta"] + ext["map"]) * 8 // 10, ext)
            self.assertGreater(ext["delta"], self.WRITES // 4, ext)
            self.assertTrue(kf.read_file(p) == data)
        r = fsck("--dump-index", spec.index, "--node", "a")
        self.assertEqual(r.returncode, 0, r.stderr)
        import json
        next = len(json.loads(r.stdout)["/slots.bin"]["extents"])
        self.assertGreater(next, self.WRITES // 2)
        r = fsck(self.backing, "--verify-data")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = fsck(self.backing, "--json")
        self.assertEqual([n["unresolved_deltas"] for n in json.loads(r.stdout)["nodes"]], [0], r.stdout)
        for rebuild in (False, True):
            if rebuild:
                shutil.rmtree(spec.index)  # replayed from the journal: every delta resolved again
            with kf.mounted(backing=spec, node_id="a") as (mnt, _, _):
                self.assertTrue(kf.read_file(os.path.join(mnt, "slots.bin")) == data, "rebuild=%s" % rebuild)
        a, _, _ = self.stack.enter_context(kf.mounted(backing=spec, node_id="a", peer_poll_ms=200))
        b, _, _ = self.stack.enter_context(kf.mounted(backing=self.node("b"), node_id="b", peer_poll_ms=200))
        q = os.path.join(b, "slots.bin")
        self.assertTrue(wait_for(lambda: os.path.exists(q), 10.0))
        self.assertTrue(kf.read_file(q) == data, "on node b")
        # Rewrites on a while b tails a's journal: b applies the deltas as they come.
        for off in offs[:50]:
            bb = os.urandom(4096)
            fd = os.open(os.path.join(a, "slots.bin"), os.O_RDWR)
            try:
                os.pwrite(fd, bb, off)
            finally:
                os.close(fd)
            data[off:off + 4096] = bb
        self.assertTrue(wait_for(lambda: kf.read_file(q) == data, 10.0), "b tailing a's deltas")
        self.assertEqual(kf.stats(b)["extent_puts"]["peer_unresolved_deltas"], 0)


@kf.skip_unless_fuse
class SealedCloses(kf.SharedBackingCase):
    """One 4 KiB page per open(O_RDWR)/pwrite/close of a large file (docs/design.md §13 "Sealed closes"):
    a close of a few dirty pages seals them instead of appending a record (64-byte header + path +
    checksum table padded to its own 4 KiB block: 8 KiB per 4 KiB page), and the deferred commit appends
    the pages of every close sealed within the commit delay as ONE record. Before: 2.04x the bytes
    written (one metadata block per page); now <= 1.2x with a 50 ms commit delay. And a writer that
    joins the closed version within the delay (open right after close) never gets its unclosed bytes
    into that close's commit: a peer sees the closed page, not the page the joined writer wrote and
    holds open (nor its rewrite of the sealed page itself), until that writer closes."""

    PREFIX = "kvfs-sealed-"
    WRITES = 400
    DELAY_MS = 50

    def test_one_page_per_close(self):
        rnd = random.Random(19)
        spec = self.node("a")
        size = 64 * MIB
        data = bytearray(size)
        data[0:MIB] = os.urandom(MIB)
        pages = rnd.sample(range(size // 4096), self.WRITES + 3)
        offs, (pa, pb, pc) = [q * 4096 for q in pages[:self.WRITES]], [q * 4096 for q in pages[self.WRITES:]]
        env = {"KVFS_TEST_COMMIT_DELAY_MS": str(self.DELAY_MS)}
        a, _, _ = self.stack.enter_context(kf.mounted(backing=spec, node_id="a", peer_poll_ms=100, env=env))
        p = os.path.join(a, "pages.bin")
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.pwrite(fd, bytes(data[0:MIB]), 0)
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        time.sleep(0.5)
        st0 = kf.stats(a)
        for off in offs:
            bb = os.urandom(4096)
            fd = os.open(p, os.O_RDWR)
            try:
                self.assertEqual(os.pwrite(fd, bb, off), 4096)
            finally:
                os.close(fd)
            data[off:off + 4096] = bb
        time.sleep(0.5)
        st = kf.stats(a)
        wrote = 4096 * self.WRITES
        export = st["backing_bytes_written"] - st0["backing_bytes_written"]
        f0, f = st0["fuse"], st["fuse"]
        sealed = f.get("sealed_closes", 0) - f0.get("sealed_closes", 0)
        records = f.get("sealed_flushes", 0) - f0.get("sealed_flushes", 0)
        flushes = f["extent_flushes"] - f0["extent_flushes"]
        sys.stderr.write("extents_test: %d one-page closes wrote %d bytes to the export (%.3fx); %d sealed, "
                         "%d sealed records, %d extent flushes\n"
                         % (self.WRITES, export, export / wrote, sealed, records, flushes))
        self.assertLessEqual(export, 1.2 * wrote)  # before: 2.04x
        self.assertGreaterEqual(sealed, self.WRITES * 9 // 10)
        self.assertLessEqual(flushes, self.WRITES // 4)
        self.assertTrue(kf.read_file(p) == data)

        b, _, _ = self.stack.enter_context(kf.mounted(backing=self.node("b"), node_id="b", peer_poll_ms=100))
        q = os.path.join(b, "pages.bin")
        self.assertTrue(wait_for(lambda: os.path.exists(q) and kf.read_file(q) == data, 10.0), "on node b")

        def peer_page(off):
            fd = os.open(q, os.O_RDONLY)
            try:
                return os.pread(fd, 4096, off)
            finally:
                os.close(fd)

        for phase, (first, second) in enumerate(((pa, pb), (pc, pc))):
            # A close of one page (sealed), then a writer that joins at once and writes `second` (another
            # page; then the sealed page itself, which appends the sealed one first) and stays open.
            st1 = kf.stats(a)["fuse"]
            closed, unclosed = os.urandom(4096), os.urandom(4096)
            fd = os.open(p, os.O_RDWR)
            os.pwrite(fd, closed, first)
            os.close(fd)
            fd2 = os.open(p, os.O_RDWR)
            try:
                os.pwrite(fd2, unclosed, second)
                self.assertTrue(wait_for(lambda: peer_page(first) == closed, 10.0), "phase %d: the close" % phase)
                old = bytes(data[second:second + 4096]) if second != first else closed
                for _ in range(5):
                    self.assertEqual(peer_page(second), old, "phase %d: a joined writer's unclosed page" % phase)
                    time.sleep(0.1)
                st2 = kf.stats(a)["fuse"]
                self.assertGreater(st2["sealed_closes"], st1["sealed_closes"], phase)
                self.assertGreater(st2["sealed_flushes"], st1["sealed_flushes"], phase)
                self.assertGreater(st2["closes_committed_open"], st1["closes_committed_open"], phase)
            finally:
                os.close(fd2)
            data[first:first + 4096] = closed
            data[second:second + 4096] = unclosed
            self.assertTrue(wait_for(lambda: peer_page(second) == unclosed, 10.0), "phase %d: closed" % phase)
        self.assertTrue(kf.read_file(p) == data)
        self.assertTrue(wait_for(lambda: kf.read_file(q) == data, 10.0), "on node b at the end")


def fsck_binary():
    b = os.environ.get("KVFS_FSCK")
    return b if b else os.path.join(os.path.dirname(kf.kvfs_binary()), "kvfs-fsck")


def fsck(*args):
    import subprocess
    return subprocess.run([fsck_binary()] + [str(a) for a in args], capture_output=True, text=True, timeout=300)


def segment_bytes(backing, node):
    """Sum of the sizes of node's segment files on the export (what it occupies there)."""
    d = os.path.join(backing, ".kvfs", "v1", "nodes", node, "seg")
    total = 0
    for f in os.listdir(d):
        if not f.endswith(".kseg"):
            continue
        try:
            total += os.path.getsize(os.path.join(d, f))
        except FileNotFoundError:
            pass  # unlinked by the cleaner between the listing and the stat: it occupies nothing now
    return total


@kf.skip_unless_fuse
class SegmentCleaner(kf.SharedBackingCase):
    """Preallocated slot files rewritten 2 MiB at a time (vLLM SimpleCPUOffloadConnector's disk backend:
    open O_RDWR|O_DIRECT, pwrite a slot, close) with no --capacity: every slot record still live pins its
    whole segment, so without a cleaner the export held ~10x the live bytes (design.md §6 "Segment
    cleaner"). The cleaner re-appends the live records of segments under 1/4 live (MOVE) and drops them:
    the node's segment files settle under 2.5x the live bytes, and every byte is exact after a remount and
    on a second node. Counts bytes, not time."""

    PREFIX = "kvfs-cleaner-"

    def test_slot_rewrites_keep_segment_bytes_bounded(self):
        spec = self.node("a")
        flags = dict(segment_size="16MiB")
        env = {"KVFS_TEST_DEAD_SEGMENT_AGE_MS": "500"}
        files, size, slot, rewrites = 8, 16 * MIB, 2 * MIB, int(os.environ.get("KVFS_CLEANER_REWRITES", "400"))
        slots = size // slot
        live = files * size
        rng = random.Random(18)
        models = [bytearray(size) for _ in range(files)]
        buf = kf.aligned_buffer(slot)

        def write_slot(mnt, f, s):
            data = rng.randbytes(slot)
            buf[:] = data
            fd = os.open(os.path.join(mnt, "slots-%d.bin" % f), os.O_RDWR | os.O_DIRECT)
            try:
                self.assertEqual(os.pwrite(fd, buf, s * slot), slot)
            finally:
                os.close(fd)
            models[f][s * slot:(s + 1) * slot] = data

        with kf.mounted(backing=spec, node_id="a", env=env, **flags) as (mnt, backing, _):
            for f in range(files):
                fd = os.open(os.path.join(mnt, "slots-%d.bin" % f), os.O_RDWR | os.O_CREAT, 0o644)
                os.ftruncate(fd, size)
                os.close(fd)
            for f in range(files):
                for s in range(slots):
                    write_slot(mnt, f, s)
            # Skewed, as a cache's slots are: 9 rewrites in 10 go to 2 hot slots of each file, the rest
            # to any slot; the rarely rewritten ones stay live scattered over the segments.
            for _ in range(rewrites):
                f = rng.randrange(files)
                write_slot(mnt, f, rng.randrange(2) if rng.random() < 0.9 else rng.randrange(slots))
            peak = segment_bytes(backing, "a")
            bound = 2.5 * live
            settled = wait_for(lambda: segment_bytes(backing, "a") <= bound, 60)
            used = segment_bytes(backing, "a")
            ev = kf.stats(mnt)["eviction"]
            sys.stderr.write("extents_test: %d slot rewrites, live %d, segment bytes %d at the end of the loop, "
                             "%d settled (%.2fx live); cleaner %s\n"
                             % (rewrites, live, peak, used, used / live,
                                {k: v for k, v in ev.items() if k.startswith("cleaned")}))
            self.assertTrue(settled, "segment bytes %d > %.0f (2.5x live)" % (used, bound))
            self.assertGreater(ev["cleaned_segments"], 0, ev)
            # Bytes copied per byte freed <= 1/3 (segments under 1/4 live; whole records copied).
            self.assertLessEqual(3 * ev["cleaned_bytes_copied"], ev["cleaned_bytes_freed"], ev)
            for f in range(files):
                self.assertTrue(kf.read_file(os.path.join(mnt, "slots-%d.bin" % f)) == bytes(models[f]),
                                "read-back of slots-%d.bin" % f)
        with kf.mounted(backing=spec, node_id="a", **flags) as (mnt, _, _):
            peer = self.node("b")
            with kf.mounted(backing=peer, node_id="b", **flags) as (mnt_b, _, _):
                for f in range(files):
                    name = "slots-%d.bin" % f
                    self.assertTrue(kf.read_file(os.path.join(mnt, name)) == bytes(models[f]),
                                    "after a remount: " + name)
                    self.assertTrue(kf.read_file(os.path.join(mnt_b, name)) == bytes(models[f]),
                                    "on a second node: " + name)


@kf.skip_unless_fuse
class ExtentFileDamage(unittest.TestCase):
    """kvfs-fsck on extent files (design.md §13 step 5, operations.md "fsck"): each record an extent file
    uses must exist, hold the extent's value range and (--verify-data) verify. Two 8 MiB files each get a
    1 MiB slot rewritten by a later mount (so the slot's record is in a segment of its own); one slot's
    record is corrupted (one byte), the other's segment truncated in the middle of it. fsck reports a
    dangling entry naming each file (the truncation without --verify-data, the corruption with it), the
    mount's reads of the damaged ranges fail with EIO (never other bytes) while the file's other extents
    and an untouched file read right, and --repair unlinks exactly those two files, after which fsck is
    clean."""

    def setUp(self):
        self.b = kf.Backing(prefix="kvfs-extent-fsck-")
        self.node_dir = os.path.join(self.b.backing, ".kvfs", "v1", "nodes", "n1")

    def tearDown(self):
        self.b.cleanup()

    def dump(self):
        r = fsck("--dump-index", self.b.index, "--node", "n1")
        self.assertEqual(r.returncode, 0, r.stderr)
        import json
        return json.loads(r.stdout)

    def seg_path(self, e):
        return os.path.join(self.node_dir, "seg", "%020d-%020d.kseg" % (e["generation"], e["seq"]))

    def findings(self, *args):
        import json
        r = fsck(self.b.backing, "--json", *args)
        self.assertIn(r.returncode, (0, 1), r.stdout + r.stderr)
        return r.returncode, json.loads(r.stdout)["findings"]

    def test_damaged_extent_record_is_found_fails_reads_and_is_repaired(self):
        x, y, z = os.urandom(8 * MIB), os.urandom(8 * MIB), os.urandom(1 * MIB)
        sx, sy = os.urandom(1 * MIB), os.urandom(1 * MIB)
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            for name, data in (("x", x), ("y", y), ("z", z)):
                kf.write_file(os.path.join(mnt, name), data)
        for name, off, slot in (("x", 2 * MIB, sx), ("y", 5 * MIB, sy)):  # each slot by a mount of its own
            with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
                fd = os.open(os.path.join(mnt, name), os.O_RDWR)
                try:
                    self.assertEqual(os.pwrite(fd, slot, off), len(slot))
                finally:
                    os.close(fd)
        x = x[:2 * MIB] + sx + x[3 * MIB:]
        y = y[:5 * MIB] + sy + y[6 * MIB:]
        d = self.dump()
        slot_ext = {}
        for name, off in (("/x", 2 * MIB), ("/y", 5 * MIB)):
            ext = d[name]["extents"]
            self.assertEqual([(e["file_offset"], e["length"]) for e in ext],
                             [(0, off), (off, MIB), (off + MIB, 8 * MIB - off - MIB)], name)
            self.assertEqual(ext[0]["generation"], ext[2]["generation"])
            self.assertNotEqual(ext[1]["generation"], ext[0]["generation"], name)  # a segment of its own
            slot_ext[name] = ext[1]
        code, _ = self.findings("--verify-data")
        self.assertEqual(code, 0)
        # x: one byte of its slot's value flipped; y: its slot's segment cut half-way through the value.
        ex, ey = slot_ext["/x"], slot_ext["/y"]
        with open(self.seg_path(ex), "r+b") as f:
            f.seek(ex["record_value_offset"] + ex["value_offset"] + 300000)
            c = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([c[0] ^ 0x55]))
        os.truncate(self.seg_path(ey), ey["record_value_offset"] + ey["value_offset"] + 500000)

        def dangling(findings):
            return {f["path"]: f for f in findings if f["kind"] == "dangling-entry"}
        code, f = self.findings()
        self.assertEqual(code, 1)
        self.assertEqual(sorted(dangling(f)), ["/y"])  # a value's bytes are read with --verify-data only
        self.assertIn("torn tail", dangling(f)["/y"]["detail"])
        self.assertIn("extent file of 3 extents, 1 of them (1048576 bytes) in this record", dangling(f)["/y"]["detail"])
        code, f = self.findings("--verify-data")
        self.assertEqual(code, 1)
        dx = dangling(f)
        self.assertEqual(sorted(dx), ["/x", "/y"])
        self.assertIn("value checksum mismatch", dx["/x"]["detail"])
        self.assertEqual(dx["/x"]["offset"], ex["record_offset"])
        self.assertEqual(dx["/x"]["repair"], "UNLINK")

        # The mount before any repair: the damaged ranges fail with EIO, the rest reads right.
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            fd = os.open(os.path.join(mnt, "x"), os.O_RDONLY)
            try:
                self.assertEqual(os.pread(fd, MIB, 0), x[:MIB])
                self.assertEqual(os.pread(fd, MIB, 6 * MIB), x[6 * MIB:7 * MIB])
                with self.assertRaises(OSError) as cm:
                    os.pread(fd, MIB, 2 * MIB)
                self.assertEqual(cm.exception.errno, errno.EIO)
            finally:
                os.close(fd)
            with self.assertRaises(OSError) as cm:
                kf.read_file(os.path.join(mnt, "x"))
            self.assertEqual(cm.exception.errno, errno.EIO)
            # y: its slot's record is lost with the cut segment (an older generation's: the mount lists
            # the file as journaled): EIO on that range, its other extents read; never other bytes.
            fd = os.open(os.path.join(mnt, "y"), os.O_RDONLY)
            try:
                self.assertEqual(os.pread(fd, MIB, 0), y[:MIB])
                self.assertEqual(os.pread(fd, MIB, 7 * MIB), y[7 * MIB:])
                with self.assertRaises(OSError) as cm:
                    os.pread(fd, MIB, 5 * MIB)
                self.assertEqual(cm.exception.errno, errno.EIO)
            finally:
                os.close(fd)
            self.assertEqual(kf.read_file(os.path.join(mnt, "z")), z)
        r = fsck(self.b.backing, "--node", "n1", "--verify-data", "--repair")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("REPAIRED", r.stdout)
        code, f = self.findings("--verify-data")
        self.assertEqual(code, 0, f)
        self.assertEqual(dangling(f), {})
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            self.assertEqual(sorted(os.listdir(mnt)), ["z"])
            self.assertEqual(kf.read_file(os.path.join(mnt, "z")), z)


if __name__ == "__main__":
    unittest.main()
