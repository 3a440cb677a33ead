"""Which content a file has after rewrites that are ordered by close(2), whatever order the kernel's
RELEASEs reach the daemon in (docs/semantics.md §1: the version whose last change was closed last is the
file; a close that changed nothing does not move its version later).

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/close_order_test.py [-v] [Class.test]

Each case is a sequence a breaker helper found (2026-12-07) where kvfs ended with the replaced content,
on the node, on a peer and after a remount, while ext4 gives the newer one. KVFS_TEST_RELEASE_DELAY_MS
holds the RELEASE of direct_io writer handles (O_WRONLY|O_TRUNC, O_DIRECT) as a loaded machine can.
Every case runs a few names in a row and compares each name with what a local fs gives; the last one
also checks the content after a clean remount (the index and journal, not only the daemon's memory).
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402

ROUNDS = 3


def write_new(path, data):
    with open(path, "wb") as f:  # O_WRONLY|O_CREAT|O_TRUNC: a direct_io writer
        f.write(data)


@kf.skip_unless_fuse
class CloseOrder(unittest.TestCase):

    def run_rounds(self, seq, env=None, settle=None):
        """seq(path) runs the syscalls on one name and returns what ext4 would leave; each name is then
        read after `settle` seconds (its RELEASEs and commits)."""
        with kf.mounted(env=env) as (mnt, _, _):
            want = {}
            for i in range(ROUNDS):
                path = os.path.join(mnt, "f%d" % i)
                want[path] = seq(path)
            time.sleep(settle if settle is not None else 0.5)
            for path, data in want.items():
                self.assertEqual(kf.read_file(path), data, path)
            return kf.stats(mnt)["fuse"]

    def test_a_loader_that_wrote_nothing_does_not_bring_the_old_content_back(self):
        """O_RDWR loader open across a rewrite, closed after it without writing, then a chmod: the
        loader's version (a copy of the old content) became the file at its close and the chmod
        committed it (10/10 before; no test knob needed)."""
        def seq(path):
            write_new(path, b"one")
            time.sleep(0.1)
            r = os.open(path, os.O_RDWR)
            write_new(path, b"two")
            os.close(r)
            self.assertEqual(kf.read_file(path), b"two")  # before: b'one' until the loader's release
            os.chmod(path, 0o600)
            return b"two"
        self.run_rounds(seq)

    def test_a_writer_joining_a_late_released_version_does_not_outlive_a_later_rewrite(self):
        """A new file's writer is released late; an O_RDWR writer joins that version, writes, closes;
        an O_TRUNC rewrite follows and closes. The joiner's close was committed with a fresh order
        (after the rewrite's): the file became its content once the delay passed (10/10 before)."""
        def seq(path):
            write_new(path, b"zero")
            fd = os.open(path, os.O_RDWR)
            os.write(fd, b"0123456789ABCDEF")
            os.close(fd)
            write_new(path, b"xy")
            return b"xy"
        self.run_rounds(seq, env={"KVFS_TEST_RELEASE_DELAY_MS": "150"}, settle=1.0)

    def test_a_reopen_does_not_join_a_version_older_than_the_committed_content(self):
        """An empty new file (released late), then an O_RDWR|O_TRUNC rewrite of 5001 bytes, then an
        O_RDWR reopen through /proc/self/fd writing one byte: the reopen joined the stale empty version
        and the file became 1 byte (10/10 before)."""
        def seq(path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            fd = os.open(path, os.O_RDWR | os.O_TRUNC)
            os.write(fd, b"a" * 100)
            os.pwrite(fd, b"b" * 5000, 1)
            os.close(fd)
            self.assertEqual(len(kf.read_file(path)), 5001)
            o = os.open(path, os.O_PATH)
            try:
                fd = os.open("/proc/self/fd/%d" % o, os.O_RDWR)
                os.write(fd, b"X")
                os.close(fd)
            finally:
                os.close(o)
            return b"X" + b"b" * 5000
        self.run_rounds(seq, env={"KVFS_TEST_RELEASE_DELAY_MS": "60"}, settle=1.0)

    def test_a_truncate_after_two_rewrites_is_kept(self):
        """A committed file rewritten through /proc/self/fd (O_TRUNC, ftruncate 50) and then by path,
        then truncate(path, 3): the truncate landed on the first rewrite's late-released version and
        was lost (5/5 before)."""
        def seq(path):
            write_new(path, b"zero")
            time.sleep(0.3)
            o = os.open(path, os.O_PATH)
            try:
                fd = os.open("/proc/self/fd/%d" % o, os.O_WRONLY | os.O_TRUNC)
                os.ftruncate(fd, 50)
                os.close(fd)
            finally:
                os.close(o)
            write_new(path, b"second")
            kf.read_file(path)
            os.truncate(path, 3)
            self.assertEqual(os.stat(path).st_size, 3)
            return b"sec"
        self.run_rounds(seq, env={"KVFS_TEST_RELEASE_DELAY_MS": "60"}, settle=1.0)

    def test_a_close_after_fsync_does_not_show_the_older_content(self):
        """A rewrites and fsyncs; B rewrites and closes; A closes without writing since its fsync: A's
        content was visible again until A's release (10/10 before). Then a remount: B's content."""
        b = kf.Backing()
        try:
            with kf.mounted(backing=b) as (mnt, _, _):
                for i in range(ROUNDS):
                    path = os.path.join(mnt, "f%d" % i)
                    write_new(path, b"zero")
                    time.sleep(0.05)
                    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
                    os.write(fd, b"one")
                    os.fsync(fd)
                    write_new(path, b"two")
                    self.assertEqual(kf.read_file(path), b"two")
                    os.close(fd)
                    self.assertEqual(kf.read_file(path), b"two")  # before: b'one'
                time.sleep(0.5)
            with kf.mounted(backing=b) as (mnt, _, _):
                for i in range(ROUNDS):
                    self.assertEqual(kf.read_file(os.path.join(mnt, "f%d" % i)), b"two")
        finally:
            b.cleanup()


if __name__ == "__main__":
    unittest.main()
