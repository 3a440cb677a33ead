#!/usr/bin/env python3
"""The rest of POSIX's namespace on a real mount (issue 18, docs/semantics.md §2): FIFOs, sockets and
character / block devices as index-only entries, and renameat2(RENAME_EXCHANGE). python3 stdlib only.

What is asserted (two daemons over one backing directory, as in multinode_test.py):

  special files  mkfifo + a writer/reader pair through the FIFO on the mount; bind/connect of a unix
                 socket on the mount; os.mknod of a socket and
                 (as root) a character and a block device: st_mode and st_rdev on the creating node, on
                 a peer, after a clean remount and after SIGKILL + remount (replay of the journal);
                 rename, chmod and unlink of them reach the peer; link(2) of one makes a new node of the
                 same type and rdev
  exchange       renameat2(RENAME_EXCHANGE) of two files, two directories and a file with a directory:
                 the names swap atomically on the node, on the peer and after SIGKILL + remount; a
                 missing name is ENOENT and nothing moves
"""

import contextlib
import ctypes
import errno
import os
import signal
import stat
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvfs_fixture as kf  # noqa: E402

VISIBLE_S = 10.0
RENAME_EXCHANGE = 2
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


def renameat2(old, new, flags):
    r = _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), ctypes.c_uint(flags))
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


def wait_for(fn, timeout=VISIBLE_S):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > deadline:
            return v
        time.sleep(0.01)


def lstat_or_none(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def is_fifo(path):
    st = lstat_or_none(path)
    return st is not None and stat.S_ISFIFO(st.st_mode)


class NodeSpec:
    def __init__(self, root, backing, name):
        self.backing = backing
        self.index = os.path.join(root, "idx-" + name)
        self.mnt = os.path.join(root, "mnt-" + name)
        os.makedirs(self.mnt, exist_ok=True)


@kf.skip_unless_fuse
class SpecialFilesTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="kvfs-nsx-")
        self.backing = os.path.join(self.root, "backing")
        os.mkdir(self.backing)
        self.stack = contextlib.ExitStack()

    def tearDown(self):
        self.stack.close()
        import shutil
        shutil.rmtree(self.root, ignore_errors=True)

    def mount(self, name):
        spec = NodeSpec(self.root, self.backing, name)
        mnt, _, proc = self.stack.enter_context(kf.mounted(
            backing=spec, node_id=name, peer_poll_ms=100, group_commit_ms=20, o="default_permissions"))
        return mnt, proc

    def crash_and_remount(self, name, proc):
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kf.unmount(os.path.join(self.root, "mnt-" + name))
        return self.mount(name)

    def expect_node(self, path, fmt, perm, rdev=None, what=""):
        st = wait_for(lambda: lstat_or_none(path))
        self.assertIsNotNone(st, "%s: %s missing" % (what, path))
        self.assertEqual(stat.S_IFMT(st.st_mode), fmt, "%s: type of %s" % (what, path))
        self.assertEqual(stat.S_IMODE(st.st_mode), perm, "%s: permissions of %s" % (what, path))
        self.assertEqual(st.st_size, 0, "%s: size of %s" % (what, path))
        if rdev is not None:
            self.assertEqual(st.st_rdev, rdev, "%s: rdev of %s" % (what, path))

    def expect_gone(self, path, what):
        self.assertTrue(wait_for(lambda: lstat_or_none(path) is None), "%s: %s still exists" % (what, path))

    def test_special_files(self):
        a, proc = self.mount("A")
        b, _ = self.mount("B")
        os.umask(0)
        d = os.path.join(a, "d")
        os.mkdir(d)
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo, 0o640)
        # A writer/reader pair through the FIFO: the kernel serves it (a pipe), kvfs only names it.
        payload = os.urandom(200000)  # more than a pipe buffer: the two sides must interleave
        got = []
        reader = threading.Thread(target=lambda: got.append(kf.read_file(fifo)))
        reader.start()
        with open(fifo, "wb") as w:
            w.write(payload)
        reader.join(10)
        self.assertFalse(reader.is_alive(), "FIFO reader did not finish")
        self.assertEqual(got, [payload], "bytes through the FIFO")

        sock = os.path.join(d, "sock")
        os.mknod(sock, stat.S_IFSOCK | 0o755)
        devs = []
        if os.geteuid() == 0:  # CAP_MKNOD
            devs = [("null", stat.S_IFCHR, 0o666, os.makedev(1, 3)), ("sda9", stat.S_IFBLK, 0o660, os.makedev(8, 9))]
            for n, t, perm, rdev in devs:
                os.mknod(os.path.join(d, n), t | perm, rdev)
        with self.assertRaises(FileExistsError):
            os.mknod(sock, stat.S_IFIFO | 0o600)
        if devs:  # the mount is nodev (FUSE's default): the device node exists but does not open
            with self.assertRaises(PermissionError):
                os.close(os.open(os.path.join(d, "null"), os.O_RDWR))
        # bind(2) of a unix socket makes a socket node through mknod; connect(2) through the name works.
        import socket
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(os.path.join(d, "bound"))
        srv.listen()
        cli = socket.socket(socket.AF_UNIX)
        cli.connect(os.path.join(d, "bound"))
        conn, _ = srv.accept()
        cli.sendall(b"over the socket")
        self.assertEqual(conn.recv(100), b"over the socket")
        for x in (conn, cli, srv):
            x.close()
        self.assertTrue(stat.S_ISSOCK(os.lstat(os.path.join(d, "bound")).st_mode))
        os.unlink(os.path.join(d, "bound"))

        def check(mnt, what, fifo_name="fifo"):
            dd = os.path.join(mnt, "d")
            self.expect_node(os.path.join(dd, fifo_name), stat.S_IFIFO, 0o640, 0, what)
            self.expect_node(os.path.join(dd, "sock"), stat.S_IFSOCK, 0o755, 0, what)
            for n, t, perm, rdev in devs:
                self.expect_node(os.path.join(dd, n), t, perm, rdev, what)

        check(a, "node A")
        check(b, "peer B")
        # The peer's FIFO works too (a second pipe, on B's kernel).
        bf = os.path.join(b, "d", "fifo")
        got = []
        reader = threading.Thread(target=lambda: got.append(kf.read_file(bf)))
        reader.start()
        with open(bf, "wb") as w:
            w.write(b"through B")
        reader.join(10)
        self.assertEqual(got, [b"through B"])

        # Rename, chmod, link and unlink on B reach A.
        os.rename(os.path.join(b, "d", "fifo"), os.path.join(b, "d", "fifo2"))
        os.chmod(os.path.join(b, "d", "sock"), 0o700)
        if devs:
            os.link(os.path.join(b, "d", "null"), os.path.join(b, "d", "null2"))
            self.expect_node(os.path.join(b, "d", "null2"), stat.S_IFCHR, 0o666, os.makedev(1, 3), "link on B")
            self.expect_node(os.path.join(a, "d", "null2"), stat.S_IFCHR, 0o666, os.makedev(1, 3), "link on B, A")
            os.unlink(os.path.join(b, "d", "null2"))
            self.expect_gone(os.path.join(a, "d", "null2"), "unlink on B")
        self.expect_gone(os.path.join(a, "d", "fifo"), "rename on B (old name)")
        self.expect_node(os.path.join(a, "d", "fifo2"), stat.S_IFIFO, 0o640, 0, "rename on B")
        self.assertTrue(wait_for(lambda: stat.S_IMODE(os.lstat(os.path.join(a, "d", "sock")).st_mode) == 0o700),
                        "chmod on B of the socket")
        os.chmod(os.path.join(b, "d", "sock"), 0o755)
        self.assertTrue(wait_for(lambda: stat.S_IMODE(os.lstat(os.path.join(a, "d", "sock")).st_mode) == 0o755),
                        "second chmod on B of the socket")

        # A clean remount of B (its index reopened), a SIGKILL + remount of A (its journal replayed).
        a, proc = self.crash_and_remount("A", proc)
        check(a, "A after SIGKILL + remount", "fifo2")
        check(b, "B", "fifo2")
        self.assertEqual(sorted(os.listdir(os.path.join(a, "d"))),
                         sorted(["fifo2", "sock"] + [n for n, *_ in devs]))
        # A node joining later rebuilds its index from the journals.
        c, _ = self.mount("C")
        check(c, "node C joining later", "fifo2")


    def test_rename_exchange(self):
        a, proc = self.mount("A")
        b, _ = self.mount("B")
        r = os.path.join(a, "r")
        os.makedirs(os.path.join(r, "d1", "in1"))
        os.makedirs(os.path.join(r, "d2"))
        one, two = os.urandom(70000), os.urandom(3000)
        kf.write_file(os.path.join(r, "f1"), one)
        kf.write_file(os.path.join(r, "d2", "f2"), two)
        kf.write_file(os.path.join(r, "d1", "in1", "x"), b"x")
        fd = os.open(os.path.join(r, "f1"), os.O_RDONLY)  # an open reader keeps its file across the swap
        # Two files in different directories.
        renameat2(os.path.join(r, "f1"), os.path.join(r, "d2", "f2"), RENAME_EXCHANGE)
        self.assertEqual(os.read(fd, 100000), one)
        os.close(fd)
        # Two directories, then a file with a directory.
        renameat2(os.path.join(r, "d1"), os.path.join(r, "d2"), RENAME_EXCHANGE)
        renameat2(os.path.join(r, "f1"), os.path.join(r, "d2", "in1"), RENAME_EXCHANGE)
        # Refusals: a missing name (ENOENT), a directory into its own subtree (EINVAL); nothing moves.
        with self.assertRaises(FileNotFoundError):
            renameat2(os.path.join(r, "f1"), os.path.join(r, "nope"), RENAME_EXCHANGE)
        with self.assertRaises(OSError) as cm:
            renameat2(os.path.join(r, "f1"), os.path.join(r, "f1", "x"), RENAME_EXCHANGE)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        # Expected now:
        #   step 1: r/f1 = two, r/d2/f2 = one
        #   step 2: r/d1 = old d2 (holding f2 = one), r/d2 = old d1 (holding in1/x)
        #   step 3: r/f1 = in1 (holding x), r/d2/in1 = two
        def check(mnt, what, extra=()):
            rr = os.path.join(mnt, "r")
            ok = wait_for(lambda: os.path.isdir(os.path.join(rr, "f1")))
            self.assertTrue(ok, "%s: r/f1 is not the exchanged directory" % what)
            self.assertEqual(sorted(os.listdir(rr)), sorted(["d1", "d2", "f1"] + list(extra)), what)
            self.assertEqual(kf.read_file(os.path.join(rr, "d1", "f2")), one, what)
            self.assertEqual(kf.read_file(os.path.join(rr, "d2", "in1")), two, what)
            self.assertEqual(kf.read_file(os.path.join(rr, "f1", "x")), b"x", what)
            self.assertEqual(os.listdir(os.path.join(rr, "d2")), ["in1"], what)
            self.assertEqual(os.lstat(os.path.join(rr, "d2")).st_nlink, 2, "%s: nlink of r/d2" % what)

        check(a, "node A")
        check(b, "peer B")
        # Exchange on B (a symlink with a FIFO), seen by A; then A's index rebuilt after SIGKILL.
        os.symlink("d1", os.path.join(b, "r", "ln"))
        os.mkfifo(os.path.join(b, "r", "p"))
        renameat2(os.path.join(b, "r", "ln"), os.path.join(b, "r", "p"), RENAME_EXCHANGE)
        self.assertTrue(wait_for(lambda: is_fifo(os.path.join(a, "r", "ln"))), "exchange on B: r/ln is not the FIFO on A")
        self.assertEqual(os.readlink(os.path.join(a, "r", "p")), "d1")
        a, proc = self.crash_and_remount("A", proc)
        check(a, "A after SIGKILL + remount", ["ln", "p"])
        self.assertEqual(os.readlink(os.path.join(a, "r", "p")), "d1")
        self.assertTrue(stat.S_ISFIFO(os.lstat(os.path.join(a, "r", "ln")).st_mode))


if __name__ == "__main__":
    unittest.main()
