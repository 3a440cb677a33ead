"""Logging: an I/O error line names the file's path in the mount and the errno; repeated identical errors
are rate-limited (at most 5 lines per kind per 10 s; blockstore/log.h), while the counters count all.

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/logging_test.py [-v]
"""
import errno
import glob
import os
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


if __name__ == "__main__":
    unittest.main()
