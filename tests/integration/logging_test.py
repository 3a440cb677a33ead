"""Logging: the log file (outside the index dir, rotated by size), and: an I/O error line names the file's path in the mount and the errno; repeated identical errors
are rate-limited (at most 5 lines per kind per 10 s; blockstore/log.h), while the counters count all.

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/logging_test.py [-v]
"""
import errno
import glob
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402


@kf.skip_unless_fuse
class Logging(unittest.TestCase):
    def test_corrupt_value_read_logs_path_and_errno_rate_limited(self):
        if os.environ.get("KVFS_TEST_LOG"):
            self.skipTest("KVFS_TEST_LOG streams the daemon's stderr: nothing to read back")
        b = kf.Backing()
        try:
            size = 1 << 20
            data = os.urandom(size)
            # A 1 MiB cache keeps only values <= 64 KiB: every read of f goes to the segment.
            with kf.mounted(backing=b, cache_size="1MiB") as (mnt, backing, proc):
                kf.write_file(os.path.join(mnt, "f.bin"), data)
                deadline = time.time() + 10
                while kf.stats(mnt)["journal_entries"] < 1 and time.time() < deadline:
                    time.sleep(0.01)
                segs = glob.glob(os.path.join(backing, ".kvfs", "v1", "nodes", "*", "seg", "*.kseg"))
                self.assertEqual(len(segs), 1, segs)
                with open(segs[0], "r+b") as f:  # flip value bytes (the value starts at 8192)
                    f.seek(8192 + 100)
                    f.write(bytes(x ^ 0xFF for x in f.read(16)))
                failures = 0
                buf = kf.aligned_buffer(size)
                for _ in range(20):
                    fd = os.open(os.path.join(mnt, "f.bin"), os.O_RDONLY | os.O_DIRECT)
                    try:
                        with self.assertRaises(OSError) as cm:
                            os.readv(fd, [buf])
                        self.assertEqual(cm.exception.errno, errno.EIO)
                        failures += 1
                    finally:
                        os.close(fd)
                st = kf.stats(mnt)
                os.set_blocking(proc.stderr.fileno(), False)  # what the daemon logged so far
                log = (proc.stderr.read() or b"").decode(errors="replace")
        finally:
            b.cleanup()
        self.assertEqual(failures, 20)
        self.assertGreaterEqual(st["checksum_failures"], 20)  # every failed read counted
        reads = [l for l in log.splitlines() if "read of /f.bin (inode " in l]
        self.assertEqual(len(reads), 5, log)  # the burst; the rest suppressed
        for l in reads:
            self.assertIn("[errno 5 EIO]", l)
            self.assertIn(".kseg", l)  # the backing file
        self.assertLessEqual(len([l for l in log.splitlines() if " E kvfs[" in l]), 10, log)


@kf.skip_unless_fuse
class LogFile(unittest.TestCase):
    """Issue #17: a daemon's log is <index-dir>.log, outside the index directory that a remount after a
    crash rebuilds, so the crash's lines survive; it rotates by size; `kvfs umount` clears the dead mount
    a killed daemon leaves."""

    def setUp(self):
        self.b = kf.Backing()
        self.log = self.b.index + ".log"

    def tearDown(self):
        self.b.cleanup()

    def mount(self, *extra):
        r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index, *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        return int(os.getxattr(self.b.mnt, "user.kvfs.pid"))

    def read_log(self):
        with open(self.log) as f:
            return f.read()

    def test_log_survives_crash_and_index_rebuild(self):
        pid1 = self.mount()
        kf.write_file(os.path.join(self.b.mnt, "f"), b"x" * 5000)
        deadline = time.time() + 10  # journaled (durable) before the kill
        while kf.stats(self.b.mnt)["journal_entries"] < 1 and time.time() < deadline:
            time.sleep(0.01)
        self.assertTrue(os.path.exists(self.log))
        self.assertFalse(os.path.exists(os.path.join(self.b.index, "kvfs.log")))
        self.assertEqual(os.stat(self.log).st_mode & 0o777, 0o600)
        ino = os.stat(self.log).st_ino
        os.kill(pid1, signal.SIGKILL)  # a crash: the index is not closed cleanly
        self.assertTrue(kf.wait_gone(pid1))
        self.assertTrue(kf.is_mounted(self.b.mnt))  # a dead mount
        with self.assertRaises(OSError) as cm:
            os.listdir(self.b.mnt)
        # ENOTCONN once the kernel has seen the daemon die; ECONNABORTED for a request that raced the death.
        self.assertIn(cm.exception.errno, (errno.ENOTCONN, errno.ECONNABORTED))
        # kvfs stats names a dead mount and how to clear it (one line, exit 1).
        st = kf.run_kvfs("stats", self.b.mnt)
        self.assertEqual(st.returncode, 1, st.stderr)
        self.assertIn("dead mount", st.stderr)
        self.assertIn("kvfs umount", st.stderr)
        self.assertEqual(len(st.stderr.strip().splitlines()), 1, st.stderr)
        # kvfs umount clears the dead mount (lazy unmount) and says so.
        u = kf.run_kvfs("umount", self.b.mnt)
        self.assertEqual(u.returncode, 0, u.stderr)
        self.assertIn("lazy unmount", u.stderr)
        self.assertEqual(len(u.stderr.strip().splitlines()), 1, u.stderr)
        self.assertFalse(kf.is_mounted(self.b.mnt))
        pid2 = self.mount()  # rebuilds the index (not closed cleanly)
        try:
            self.assertEqual(kf.read_file(os.path.join(self.b.mnt, "f")), b"x" * 5000)
        finally:
            self.assertEqual(kf.run_kvfs("umount", self.b.mnt).returncode, 0)
        self.assertEqual(os.stat(self.log).st_ino, ino)  # the same file, never removed
        log = self.read_log()
        self.assertIn("kvfs[%d]" % pid1, log)  # the crashed daemon's lines are still there
        self.assertIn("kvfs[%d]" % pid2, log)
        self.assertEqual(log.count("] mounted " + self.b.mnt), 2, log)

    def test_log_rotates_by_size(self):
        with open(self.log, "w") as f:  # an old log already at the limit
            f.write(("x" * 99 + "\n") * 11000)
        self.mount("--log-max-size", "1MiB")
        self.assertEqual(kf.run_kvfs("umount", self.b.mnt).returncode, 0)
        rotated = self.b.index + ".1.log"
        self.assertTrue(os.path.exists(rotated), os.listdir(self.b.root))
        with open(rotated) as f:
            self.assertIn("x" * 99, f.read())
        self.assertNotIn("x" * 99, self.read_log())
        self.assertIn("mounted " + self.b.mnt, self.read_log())
        r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                        "--log-file", os.path.join(self.b.index, "k.log"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--log-file must not be inside the index dir", r.stderr)


if __name__ == "__main__":
    unittest.main()
