"""A failed close publishes nothing (issue #16 part 3, docs/semantics.md "A failed close or fsync").

A file written under its final name whose close(2) (or fsync(2)) fails must leave the name as it was
before the open: absent for a new file, the previous complete content for a rewrite; `kvfs stats` counts
it (fuse.failed_publishes). The backing store is a small tmpfs that a 32 MiB record cannot fit in, with a
staging budget large enough that nothing spills before the close. Real FUSE mounts (kvfs_fixture);
python3 stdlib only.
"""
import errno
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402

MIB = 1 << 20
BIG = 32 * MIB  # one record larger than the whole backing tmpfs


def pattern(seed, size):
    block = bytes((seed * 131 + i * 7) & 0xFF for i in range(4096))
    return (block * (size // 4096 + 1))[:size]


def eventually(pred, timeout=10.0):
    """The kernel drops its cached dentry when the daemon's notifier thread tells it (asynchronous)."""
    deadline = time.time() + timeout
    while True:
        if pred():
            return True
        if time.time() > deadline:
            return False
        time.sleep(0.05)


def failed_publishes(mnt):
    return kf.stats(mnt)["fuse"].get("failed_publishes", 0)


def write_big(fd, seed):
    chunk = pattern(seed, MIB)
    for k in range(BIG // MIB):
        os.pwrite(fd, chunk, k * MIB)


@kf.skip_unless_fuse
class FailedCloseTest(unittest.TestCase):
    def setUp(self):
        self.b = kf.Backing()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", self.b.backing], capture_output=True)
        if r.returncode != 0:
            self.b.cleanup()
            self.skipTest("cannot mount a tmpfs here: %s" % r.stderr.decode(errors="replace").strip())

    def tearDown(self):
        if kf.is_mounted(self.b.mnt):
            kf.unmount(self.b.mnt)
        subprocess.run(["umount", self.b.backing], capture_output=True)
        self.b.cleanup()

    def mount(self):
        self.log = os.path.join(self.b.root, "kvfs.log")  # off the small backing tmpfs
        return kf.mounted(backing=self.b, staging_size="128MiB", segment_size="4MiB", extra_args=["--log-file", self.log])

    def log_text(self):
        with open(self.log) as f:
            return f.read()

    def logged(self, needle):
        return eventually(lambda: needle in self.log_text())

    def assert_absent(self, mnt, name):
        p = os.path.join(mnt, name)
        self.assertTrue(eventually(lambda: not os.path.exists(p)), "%s still exists after a failed close" % name)
        self.assertNotIn(name, os.listdir(mnt))
        with self.assertRaises(FileNotFoundError):
            os.open(p, os.O_RDONLY)

    def test_new_file_whose_close_fails_is_absent(self):
        with self.mount() as (mnt, _, proc):
            keep = pattern(1, 256 * 1024)
            kf.write_file(os.path.join(mnt, "keep"), keep)
            before = failed_publishes(mnt)
            fd = os.open(os.path.join(mnt, "big"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            write_big(fd, 2)
            with self.assertRaises(OSError) as cm:
                os.close(fd)
            self.assertEqual(cm.exception.errno, errno.ENOSPC, cm.exception)
            self.assert_absent(mnt, "big")
            self.assertGreater(failed_publishes(mnt), before)
            # The log names the file by its path (never "(unlinked)": the user did not unlink it).
            self.assertTrue(self.logged(": not published ("), self.log_text())
            line = [l for l in self.log_text().splitlines() if ": not published (" in l][0]
            self.assertRegex(line, r" /big \(inode \d+\): not published \(.*\); the new file's name is removed$")
            self.assertTrue(kf.read_file(os.path.join(mnt, "keep")) == keep)
            # The name is free again: a small file fits and gets it.
            kf.write_file(os.path.join(mnt, "big"), b"small")
            self.assertEqual(kf.read_file(os.path.join(mnt, "big")), b"small")
            self.assertIsNone(proc.poll(), "the daemon died")

    def test_rewrite_whose_close_fails_keeps_the_previous_content(self):
        with self.mount() as (mnt, _, _):
            old = pattern(3, 64 * 1024)
            p = os.path.join(mnt, "chunk")
            kf.write_file(p, old)
            before = failed_publishes(mnt)
            fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
            write_big(fd, 4)
            with self.assertRaises(OSError) as cm:
                os.close(fd)
            self.assertEqual(cm.exception.errno, errno.ENOSPC, cm.exception)
            self.assertTrue(eventually(lambda: os.stat(p).st_size == len(old)), os.stat(p))
            self.assertTrue(kf.read_file(p) == old)
            self.assertEqual(os.listdir(mnt), ["chunk"])
            self.assertGreater(failed_publishes(mnt), before)
            self.assertTrue(self.logged(" /chunk (inode "), self.log_text())
            self.assertTrue(self.logged("; the name keeps what it had before the open"), self.log_text())

    def test_new_file_whose_fsync_fails_is_absent(self):
        with self.mount() as (mnt, _, _):
            before = failed_publishes(mnt)
            fd = os.open(os.path.join(mnt, "synced"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            write_big(fd, 5)
            with self.assertRaises(OSError) as cm:
                os.fsync(fd)
            self.assertEqual(cm.exception.errno, errno.ENOSPC, cm.exception)
            with self.assertRaises(OSError):  # the version is lost: its close fails too
                os.close(fd)
            self.assert_absent(mnt, "synced")
            self.assertGreater(failed_publishes(mnt), before)

    def test_failed_new_file_is_absent_after_remount(self):
        with self.mount() as (mnt, _, _):
            fd = os.open(os.path.join(mnt, "big"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            write_big(fd, 6)
            with self.assertRaises(OSError):
                os.close(fd)
        with self.mount() as (mnt, _, _):
            self.assertFalse(os.path.exists(os.path.join(mnt, "big")))


@kf.skip_unless_fuse
class FaultEnvFailedCloseTest(unittest.TestCase):
    """The same rule through the fault-injection Env (KVFS_TEST_POWER_CUT_SIGNAL=1, tools/power_cut.h:
    SIGUSR1 toggles EIO on every backing write and fdatasync of node A), seen by A and by a peer B of the
    same export (which tails A's journal): a close or fsync that fails with EIO publishes nothing on
    either node, a rewrite keeps its previous content on both, `kvfs stats` counts each failure, and
    once the backing works again the names take new files."""

    def setUp(self):
        self.a = kf.Backing(prefix="kvfs-fc-a-")
        self.b = kf.Backing(prefix="kvfs-fc-b-")
        self.b.backing = self.a.backing  # one export, two nodes

    def tearDown(self):
        for x in (self.a, self.b):
            x.cleanup()

    def test_eio_close_and_fsync_publish_nothing_here_or_on_a_peer(self):
        saved = os.environ.get("KVFS_TEST_POWER_CUT_SIGNAL")
        os.environ["KVFS_TEST_POWER_CUT_SIGNAL"] = "1"
        try:
            actx = kf.mounted(backing=self.a, node_id="A", peer_poll_ms="50")
            mnt_a, _, proc_a = actx.__enter__()
        finally:
            if saved is None:
                os.environ.pop("KVFS_TEST_POWER_CUT_SIGNAL", None)
            else:
                os.environ["KVFS_TEST_POWER_CUT_SIGNAL"] = saved
        try:
            with kf.mounted(backing=self.b, node_id="B", peer_poll_ms="50") as (mnt_b, _, _):
                old = pattern(7, 200 * 1024)
                kf.write_file(os.path.join(mnt_a, "chunk"), old)
                self.assertTrue(eventually(lambda: os.path.exists(os.path.join(mnt_b, "chunk")) and
                                           kf.read_file(os.path.join(mnt_b, "chunk")) == old))
                before = failed_publishes(mnt_a)
                os.kill(proc_a.pid, signal.SIGUSR1)  # A's backing fails from now on (EIO)
                time.sleep(0.2)  # the signal thread switches the rules
                # A new file whose close fails.
                fd = os.open(os.path.join(mnt_a, "new"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, pattern(8, 300 * 1024))
                with self.assertRaises(OSError) as cm:
                    os.close(fd)
                self.assertEqual(cm.exception.errno, errno.EIO, cm.exception)
                # A rewrite whose close fails.
                fd = os.open(os.path.join(mnt_a, "chunk"), os.O_WRONLY | os.O_TRUNC)
                os.write(fd, pattern(9, 300 * 1024))
                with self.assertRaises(OSError) as cm:
                    os.close(fd)
                self.assertEqual(cm.exception.errno, errno.EIO, cm.exception)
                # A new file whose fsync fails (and then its close).
                fd = os.open(os.path.join(mnt_a, "synced"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, pattern(10, 100 * 1024))
                with self.assertRaises(OSError) as cm:
                    os.fsync(fd)
                self.assertEqual(cm.exception.errno, errno.EIO, cm.exception)
                with self.assertRaises(OSError):
                    os.close(fd)
                for mnt in (mnt_a, mnt_b):
                    for name in ("new", "synced"):
                        p = os.path.join(mnt, name)
                        self.assertTrue(eventually(lambda: not os.path.exists(p)), "%s exists after a failed "
                                        "close (%s)" % (name, "A" if mnt == mnt_a else "B"))
                    p = os.path.join(mnt, "chunk")
                    self.assertTrue(eventually(lambda: os.stat(p).st_size == len(old)), os.stat(p))
                    self.assertTrue(kf.read_file(p) == old)
                self.assertEqual(failed_publishes(mnt_a) - before, 3, kf.stats(mnt_a)["fuse"])
                os.kill(proc_a.pid, signal.SIGUSR1)  # the backing works again
                time.sleep(0.2)
                time.sleep(1.0)  # B: nothing arrives late (the failed versions were never journaled)
                self.assertFalse(os.path.exists(os.path.join(mnt_b, "new")))
                self.assertTrue(kf.read_file(os.path.join(mnt_b, "chunk")) == old)
                # The names take new files again, on A and then on B.
                new = pattern(11, 64 * 1024)
                kf.write_file(os.path.join(mnt_a, "new"), new)
                self.assertEqual(kf.read_file(os.path.join(mnt_a, "new")), new)
                self.assertTrue(eventually(lambda: os.path.exists(os.path.join(mnt_b, "new")) and
                                           kf.read_file(os.path.join(mnt_b, "new")) == new))
        finally:
            actx.__exit__(None, None, None)


if __name__ == "__main__":
    unittest.main()
