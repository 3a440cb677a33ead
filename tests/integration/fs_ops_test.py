"""Every FUSE operation of kvfs through real syscalls on a real mount (python3 stdlib unittest).

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/fs_ops_test.py [-v] [Class.test]
The rules checked here are written down in docs/semantics.md.
"""
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import json
import mmap
import multiprocessing
import os
import stat
import subprocess
import sys
import termios
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
SEEK_DATA = getattr(os, "SEEK_DATA", 3)
SEEK_HOLE = getattr(os, "SEEK_HOLE", 4)
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
FALLOC_FL_ZERO_RANGE = 0x10


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def renameat2(old, new, flags):
    r = libc.renameat2(AT_FDCWD, old.encode(), AT_FDCWD, new.encode(), ctypes.c_uint(flags))
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


def utimensat(path, atime, mtime):
    """atime/mtime: (sec, nsec) or UTIME_NOW / UTIME_OMIT (as nsec with sec 0)."""
    ts = (Timespec * 2)()
    for i, t in enumerate((atime, mtime)):
        if isinstance(t, tuple):
            ts[i].tv_sec, ts[i].tv_nsec = t
        else:
            ts[i].tv_sec, ts[i].tv_nsec = 0, t
    r = libc.utimensat(AT_FDCWD, path.encode(), ts, 0)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def fallocate(fd, mode, off, length):
    r = libc.fallocate(fd, ctypes.c_int(mode), ctypes.c_long(off), ctypes.c_long(length))
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def pattern(tag, size):
    """Deterministic bytes for (tag, size): a mix of two patterns is detectable at any 64-byte grain."""
    seed = hashlib.sha256(str(tag).encode()).digest()
    block = (seed * 2)[:64]
    return (block * (size // 64 + 1))[:size]


@kf.skip_unless_fuse
class MountedTestCase(unittest.TestCase):
    """One mount for the whole class (mounting costs a Store open); each test uses its own subdir."""

    flags = {}

    @classmethod
    def setUpClass(cls):
        cls._cm = kf.mounted(**cls.flags)
        cls.mnt, cls.backing, cls.proc = cls._cm.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls._cm.__exit__(None, None, None)

    def setUp(self):
        self.d = os.path.join(self.mnt, self._testMethodName)
        os.mkdir(self.d)

    def p(self, *names):
        return os.path.join(self.d, *names)

    def assertErrno(self, err, fn, *args, **kw):
        with self.assertRaises(OSError) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.errno, err, "%s: %s" % (errno.errorcode.get(cm.exception.errno),
                                                             cm.exception))


class BasicOps(MountedTestCase):
    def test_create_write_read_stat(self):
        for size in (0, 1, 28, 4095, 4096, 4097, 147456, (1 << 20) + 1, 3 * (1 << 20) + 17):
            data = pattern(size, size)
            path = self.p("f%d" % size)
            kf.write_file(path, data)
            st = os.stat(path)
            self.assertTrue(stat.S_ISREG(st.st_mode))
            self.assertEqual(st.st_size, size)
            self.assertEqual(kf.read_file(path), data)

    def test_exact_size_while_writing(self):
        path = self.p("growing")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            total = 0
            for i in range(8):
                total += os.write(fd, pattern(i, 65536))
                self.assertEqual(os.fstat(fd).st_size, total)
                self.assertEqual(os.stat(path).st_size, total)  # another lookup path
        finally:
            os.close(fd)
        self.assertEqual(os.stat(path).st_size, 8 * 65536)

    def test_read_offsets_and_tail_slice(self):
        data = pattern("tail", 5 * 65536 + 123)
        path = self.p("t")
        kf.write_file(path, data)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.lseek(fd, 0, os.SEEK_END), len(data))  # llm-d finds the size this way
            for off, n in ((0, 10), (65530, 20), (len(data) - 100, 1000), (len(data), 10), (len(data) + 5, 1)):
                self.assertEqual(os.pread(fd, n, off), data[off:off + n])
        finally:
            os.close(fd)

    def test_overwrite_in_place_and_append(self):
        path = self.p("rw")
        kf.write_file(path, b"A" * 10000)
        fd = os.open(path, os.O_RDWR)  # non-truncating writable open of a committed file: copy-on-write
        os.pwrite(fd, b"BBBB", 5000)
        self.assertEqual(os.pread(fd, 10, 4998), b"AABBBBAAAA")
        os.close(fd)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"tail")
        os.close(fd)
        want = b"A" * 5000 + b"BBBB" + b"A" * (10000 - 5004) + b"tail"
        self.assertEqual(kf.read_file(path), want)

    def test_write_beyond_end_zero_fills(self):
        path = self.p("gap")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(fd, b"xy", 100000)
        os.close(fd)
        got = kf.read_file(path)
        self.assertEqual(len(got), 100002)
        self.assertEqual(got[:100000], b"\0" * 100000)
        self.assertEqual(got[100000:], b"xy")

    def test_o_excl(self):
        path = self.p("x")
        kf.write_file(path, b"1")
        self.assertErrno(errno.EEXIST, os.open, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)

    def test_mkdir_rmdir(self):
        os.mkdir(self.p("a"))
        os.makedirs(self.p("a", "b", "c"))
        self.assertTrue(stat.S_ISDIR(os.stat(self.p("a", "b")).st_mode))
        self.assertErrno(errno.EEXIST, os.mkdir, self.p("a"))
        self.assertErrno(errno.ENOTEMPTY, os.rmdir, self.p("a"))
        kf.write_file(self.p("a", "file"), b"z")
        self.assertErrno(errno.ENOTDIR, os.rmdir, self.p("a", "file"))
        self.assertErrno(errno.ENOTDIR, os.mkdir, self.p("a", "file", "sub"))
        os.rmdir(self.p("a", "b", "c"))
        os.rmdir(self.p("a", "b"))
        self.assertErrno(errno.ENOENT, os.stat, self.p("a", "b"))
        self.assertErrno(errno.ENOENT, os.rmdir, self.p("nope"))
        self.assertErrno(errno.EISDIR, os.unlink, self.p("a"))

    def test_lookup_misses(self):
        self.assertErrno(errno.ENOENT, os.stat, self.p("absent"))
        self.assertFalse(os.access(self.p("absent"), os.F_OK))
        self.assertFalse(os.path.exists(self.p("absent", "deeper")))
        kf.write_file(self.p("now"), b"1")  # negative dentry replaced by the create
        self.assertTrue(os.access(self.p("now"), os.F_OK))
        self.assertTrue(os.access(self.p("now"), os.R_OK | os.W_OK))

    def test_unlink(self):
        kf.write_file(self.p("u"), b"data")
        os.unlink(self.p("u"))
        self.assertErrno(errno.ENOENT, os.stat, self.p("u"))
        self.assertErrno(errno.ENOENT, os.unlink, self.p("u"))
        self.assertEqual(os.listdir(self.d), [])

    def test_readdir(self):
        names = set("n%04d" % i for i in range(500))
        for n in names:
            kf.write_file(self.p(n), n.encode())
        os.mkdir(self.p("subdir"))
        self.assertEqual(set(os.listdir(self.d)), names | {"subdir"})
        seen = {}
        with os.scandir(self.d) as it:
            for e in it:
                seen[e.name] = (e.is_dir(), e.stat().st_size)
        self.assertEqual(set(seen), names | {"subdir"})
        self.assertEqual(seen["n0007"], (False, 5))
        self.assertTrue(seen["subdir"][0])
        # . and .. are there (ls -f shows N + 2)
        fd = os.open(self.d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            import subprocess
            out = subprocess.run(["ls", "-f", self.d], capture_output=True, text=True, check=True).stdout.split()
            self.assertEqual(len(out), len(names) + 1 + 2)
            self.assertIn(".", out)
            self.assertIn("..", out)
        finally:
            os.close(fd)

    def test_readdir_while_creating(self):
        for i in range(300):
            kf.write_file(self.p("old%d" % i), b"x")
        stop = threading.Event()

        def churn():
            i = 0
            while not stop.is_set():
                kf.write_file(self.p("new%d" % i), b"y")
                i += 1

        t = threading.Thread(target=churn)
        t.start()
        try:
            for _ in range(5):
                listing = os.listdir(self.d)
                self.assertEqual(len(listing), len(set(listing)), "an entry repeated")
                self.assertTrue(set("old%d" % i for i in range(300)) <= set(listing), "an entry skipped")
        finally:
            stop.set()
            t.join()

    def test_symlink_readlink(self):
        kf.write_file(self.p("target"), b"T")
        os.symlink("target", self.p("ln"))
        self.assertEqual(os.readlink(self.p("ln")), "target")
        self.assertTrue(stat.S_ISLNK(os.lstat(self.p("ln")).st_mode))
        self.assertEqual(kf.read_file(self.p("ln")), b"T")
        os.symlink("/does/not/exist", self.p("dangling"))
        self.assertEqual(os.readlink(self.p("dangling")), "/does/not/exist")
        self.assertErrno(errno.EEXIST, os.symlink, "x", self.p("ln"))
        os.unlink(self.p("ln"))
        self.assertFalse(os.path.lexists(self.p("ln")))

    def test_link(self):
        # a second file over the same content (docs/semantics.md §2 "link"; link_publish_test has the rest)
        kf.write_file(self.p("a"), b"1")
        os.link(self.p("a"), self.p("b"))
        self.assertEqual(kf.read_file(self.p("b")), b"1")
        self.assertErrno(errno.EEXIST, os.link, self.p("a"), self.p("b"))
        os.mkdir(self.p("d"))
        self.assertErrno(errno.EPERM, os.link, self.p("d"), self.p("d2"))

    def test_mknod(self):
        os.mknod(self.p("reg"), 0o600 | stat.S_IFREG)
        st = os.stat(self.p("reg"))
        self.assertTrue(stat.S_ISREG(st.st_mode))
        self.assertEqual(st.st_size, 0)
        os.mkfifo(self.p("fifo"), 0o600)  # an index-only node (posix_namespace_test.py goes further)
        self.assertTrue(stat.S_ISFIFO(os.lstat(self.p("fifo")).st_mode))

    def test_dup_and_double_close(self):
        # numpy.tofile: write through a dup'd descriptor, close both (two FLUSHes, one version).
        path = self.p("dup")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        fd2 = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0)
        os.write(fd2, pattern("dup", 9437))
        os.close(fd2)
        self.assertEqual(kf.read_file(path), pattern("dup", 9437))
        os.close(fd)
        os.rename(path, self.p("final"))
        self.assertEqual(kf.read_file(self.p("final")), pattern("dup", 9437))

    def test_two_handles_one_version(self):
        path = self.p("shared")
        a = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        b = os.open(path, os.O_RDWR)
        os.pwrite(a, b"hello", 0)
        self.assertEqual(os.pread(b, 5, 0), b"hello")  # handles of one version see each other's writes
        os.pwrite(b, b"world", 5)
        self.assertEqual(os.pread(a, 10, 0), b"helloworld")
        r = os.open(path, os.O_RDONLY)
        self.assertEqual(os.pread(r, 10, 0), b"helloworld")  # readers of a file being written: staged bytes
        os.close(r)
        os.close(a)
        os.close(b)
        self.assertEqual(kf.read_file(path), b"helloworld")

    def test_fsync_and_fsyncdir(self):
        path = self.p("s")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"durable")
        os.fsync(fd)
        os.fdatasync(fd)
        os.write(fd, b"+more")
        os.fsync(fd)
        os.close(fd)
        self.assertEqual(kf.read_file(path), b"durable+more")
        dfd = os.open(self.d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        rfd = os.open(path, os.O_RDONLY)
        os.fsync(rfd)
        os.close(rfd)

    def test_ioctl_enotty(self):
        kf.write_file(self.p("tty"), b"x")
        fd = os.open(self.p("tty"), os.O_RDONLY)
        try:
            self.assertFalse(os.isatty(fd))
            with self.assertRaises(OSError) as cm:
                fcntl.ioctl(fd, termios.TCGETS, bytes(64))
            self.assertEqual(cm.exception.errno, errno.ENOTTY)
        finally:
            os.close(fd)

    def test_seek_data_hole(self):
        path = self.p("sk")
        kf.write_file(path, pattern("sk", 10000))
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.lseek(fd, 0, SEEK_DATA), 0)
            self.assertEqual(os.lseek(fd, 1234, SEEK_DATA), 1234)
            self.assertEqual(os.lseek(fd, 0, SEEK_HOLE), 10000)
            self.assertEqual(os.lseek(fd, 9999, SEEK_HOLE), 10000)
            self.assertErrno(errno.ENXIO, os.lseek, fd, 10000, SEEK_DATA)
            self.assertErrno(errno.ENXIO, os.lseek, fd, 20000, SEEK_HOLE)
        finally:
            os.close(fd)
        # also on a file being written (staged size)
        fd = os.open(self.p("sk2"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"abc")
            self.assertEqual(os.lseek(fd, 0, SEEK_HOLE), 3)
            self.assertEqual(os.lseek(fd, 2, SEEK_DATA), 2)
            self.assertErrno(errno.ENXIO, os.lseek, fd, 3, SEEK_DATA)
        finally:
            os.close(fd)
        kf.write_file(self.p("empty"), b"")
        fd = os.open(self.p("empty"), os.O_RDONLY)
        try:
            self.assertErrno(errno.ENXIO, os.lseek, fd, 0, SEEK_DATA)
            self.assertErrno(errno.ENXIO, os.lseek, fd, 0, SEEK_HOLE)
        finally:
            os.close(fd)

    def test_fallocate(self):
        path = self.p("fa")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"xyz")
            os.posix_fallocate(fd, 0, 8192)  # mode 0 within the staged version: extends with zeros
            self.assertEqual(os.fstat(fd).st_size, 8192)
            fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20)
            self.assertEqual(os.fstat(fd).st_size, 8192)
            # PUNCH_HOLE (with KEEP_SIZE, as the kernel requires): the range reads zeros, the size stays.
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1, 1)
            self.assertEqual(os.fstat(fd).st_size, 8192)
            self.assertEqual(os.pread(fd, 4, 0), b"x\0z\0")
            with self.assertRaises(OSError) as cm:  # PUNCH_HOLE without KEEP_SIZE: refused, as on Linux
                fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096)
            self.assertEqual(cm.exception.errno, errno.EOPNOTSUPP)
            # ZERO_RANGE: the range reads zeros; without KEEP_SIZE the file grows to its end, with it not.
            os.pwrite(fd, b"abcdef", 8192 - 6)
            fallocate(fd, FALLOC_FL_ZERO_RANGE, 8192 - 4, 2)
            self.assertEqual(os.fstat(fd).st_size, 8192)
            self.assertEqual(os.pread(fd, 6, 8192 - 6), b"ab\0\0ef")
            fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 8192 - 1, 4096)
            self.assertEqual(os.fstat(fd).st_size, 8192)
            self.assertEqual(os.pread(fd, 6, 8192 - 6), b"ab\0\0e\0")
            fallocate(fd, FALLOC_FL_ZERO_RANGE, 8192 + 100, 50)
            self.assertEqual(os.fstat(fd).st_size, 8192 + 150)
            for mode in (0x8, 0x20):  # COLLAPSE_RANGE, INSERT_RANGE
                with self.assertRaises(OSError) as cm:
                    fallocate(fd, mode, 0, 4096)
                self.assertEqual(cm.exception.errno, errno.EOPNOTSUPP)
        finally:
            os.close(fd)
        self.assertEqual(kf.read_file(path), b"x\0z" + b"\0" * (8192 - 9) + b"ab\0\0e" + b"\0" * 151)


class AttrOps(MountedTestCase):
    def test_truncate_path(self):
        path = self.p("t")
        kf.write_file(path, pattern("t", 8192))
        os.truncate(path, 100)
        self.assertEqual(os.stat(path).st_size, 100)
        self.assertEqual(kf.read_file(path), pattern("t", 8192)[:100])
        os.truncate(path, 300)
        self.assertEqual(kf.read_file(path), pattern("t", 8192)[:100] + b"\0" * 200)
        os.truncate(path, 0)
        self.assertEqual(os.stat(path).st_size, 0)
        self.assertEqual(kf.read_file(path), b"")

    def test_shrink_open_file_case3(self):
        # docs/design.md §11 case 3: write 8192 bytes; open O_RDWR; ftruncate(100); pread(8192) -> 100 bytes; fstat/stat 100.
        path = self.p("f")
        kf.write_file(path, os.urandom(8192))
        fd = os.open(path, os.O_RDWR)
        try:
            os.ftruncate(fd, 100)
            self.assertEqual(len(os.pread(fd, 8192, 0)), 100)
            self.assertEqual(os.fstat(fd).st_size, 100)
            self.assertEqual(os.stat(path).st_size, 100)
            pid = os.fork()
            if pid == 0:
                os._exit(0 if os.stat(path).st_size == 100 else 1)
            self.assertEqual(os.waitpid(pid, 0)[1], 0)
        finally:
            os.close(fd)
        self.assertEqual(os.stat(path).st_size, 100)
        self.assertEqual(len(kf.read_file(path)), 100)

    def test_ftruncate_grow_and_o_trunc(self):
        path = self.p("g")
        kf.write_file(path, b"abc")
        fd = os.open(path, os.O_WRONLY)
        os.ftruncate(fd, 5000)
        os.close(fd)
        self.assertEqual(kf.read_file(path), b"abc" + b"\0" * 4997)
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        # A truncating rewrite of a committed file is a hidden version: stat shows the size being written
        # (exact, one i_size per inode), readers keep reading the committed bytes whole until close.
        self.assertEqual(os.stat(path).st_size, 0)
        self.assertEqual(os.fstat(fd).st_size, 0)
        self.assertEqual(os.lseek(fd, 0, os.SEEK_END), 0)
        os.write(fd, b"new")
        self.assertEqual(os.fstat(fd).st_size, 3)
        self.assertEqual(kf.read_file(path), b"abc" + b"\0" * 4997)
        os.close(fd)
        self.assertEqual(os.stat(path).st_size, 3)
        self.assertEqual(kf.read_file(path), b"new")

    def test_chmod_chown(self):
        path = self.p("m")
        kf.write_file(path, b"1")
        os.chmod(path, 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        os.chmod(path, 0o4755)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o4755)
        os.chown(path, 1234, 5678)
        st = os.stat(path)
        self.assertEqual((st.st_uid, st.st_gid), (1234, 5678))
        os.chown(path, -1, 42)
        st = os.stat(path)
        self.assertEqual((st.st_uid, st.st_gid), (1234, 42))
        os.mkdir(self.p("dir"))
        os.chmod(self.p("dir"), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(self.p("dir")).st_mode), 0o700)

    def test_setgid_directory(self):
        # Linux (ext4) rule: entries created in a setgid directory get its group; subdirectories keep S_ISGID.
        d = self.p("shared")
        os.mkdir(d)
        os.chown(d, -1, 65534)
        os.chmod(d, 0o2775)
        kf.write_file(os.path.join(d, "f"), b"1")
        os.mkdir(os.path.join(d, "sub"), 0o755)
        os.symlink("f", os.path.join(d, "ln"))
        fd = os.open(os.path.join(d, "n"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        for name in ("f", "sub", "ln", "n"):
            self.assertEqual(os.lstat(os.path.join(d, name)).st_gid, 65534, name)
        sub = os.stat(os.path.join(d, "sub"))
        self.assertEqual(stat.S_IMODE(sub.st_mode), 0o2755)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(d, "f")).st_mode) & stat.S_ISGID, 0)
        # Inherited down the tree, and not applied outside it.
        kf.write_file(os.path.join(d, "sub", "g"), b"2")
        self.assertEqual(os.stat(os.path.join(d, "sub", "g")).st_gid, 65534)
        kf.write_file(self.p("plain"), b"3")
        os.mkdir(self.p("plaindir"), 0o755)
        self.assertEqual(os.stat(self.p("plain")).st_gid, os.getegid())
        self.assertEqual(stat.S_IMODE(os.stat(self.p("plaindir")).st_mode), 0o755)

    def test_fchmod_on_open_writer_then_mmap_case7(self):
        path = self.p("c7")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, pattern("c7", 8192))
            os.fchmod(fd, 0o444)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o444)
            pid = os.fork()
            if pid == 0:
                try:
                    r = os.open(path, os.O_RDONLY)
                    m = mmap.mmap(r, 8192, mmap.MAP_SHARED, mmap.PROT_READ)
                    ok = m[0] == pattern("c7", 8192)[0] and m[8191] == pattern("c7", 8192)[8191]
                    ok = ok and os.fstat(r).st_size == 8192
                    m.close()
                    os.close(r)
                    os._exit(0 if ok else 1)
                except BaseException:
                    os._exit(2)
            self.assertEqual(os.waitpid(pid, 0)[1], 0)
            os.utime(path, (1, 2))
            os.truncate(path, 8192)
            self.assertEqual(os.stat(path).st_size, 8192)
        finally:
            os.close(fd)
        st = os.stat(path)
        self.assertEqual(st.st_size, 8192)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o444)
        self.assertEqual(kf.read_file(path), pattern("c7", 8192))

    def test_utimens(self):
        path = self.p("u")
        kf.write_file(path, b"1")
        os.utime(path, ns=(1_000_000_123, 2_000_000_456))
        st = os.stat(path)
        self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (1_000_000_123, 2_000_000_456))
        utimensat(path, UTIME_OMIT, (5, 7))
        st = os.stat(path)
        self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (1_000_000_123, 5_000_000_007))
        before = time.time_ns()
        utimensat(path, UTIME_NOW, UTIME_OMIT)
        st = os.stat(path)
        self.assertGreaterEqual(st.st_atime_ns, before - 1_000_000_000)
        self.assertEqual(st.st_mtime_ns, 5_000_000_007)
        utimensat(path, UTIME_OMIT, UTIME_NOW)
        self.assertGreaterEqual(os.stat(path).st_mtime_ns, before - 1_000_000_000)

    def test_utime_on_open_file_survives_close(self):
        path = self.p("uo")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"abc")
        os.utime(path, ns=(10**9, 3 * 10**9))
        os.close(fd)
        st = os.stat(path)
        self.assertEqual(st.st_size, 3)
        self.assertEqual(st.st_atime_ns, 10**9)

    def test_mtime_advances_on_write(self):
        path = self.p("mt")
        kf.write_file(path, b"1")
        os.utime(path, ns=(10**9, 10**9))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"2")
        os.close(fd)
        self.assertGreater(os.stat(path).st_mtime_ns, 10**9)

    def test_xattrs(self):
        path = self.p("x")
        kf.write_file(path, b"1")
        os.setxattr(path, "user.a", b"va")
        os.setxattr(path, "user.b", b"")
        self.assertEqual(os.getxattr(path, "user.a"), b"va")
        self.assertEqual(os.getxattr(path, "user.b"), b"")
        self.assertEqual(sorted(os.listxattr(path)), ["user.a", "user.b"])
        self.assertErrno(errno.EEXIST, os.setxattr, path, "user.a", b"x", os.XATTR_CREATE)
        self.assertErrno(errno.ENODATA, os.setxattr, path, "user.zz", b"x", os.XATTR_REPLACE)
        os.setxattr(path, "user.a", b"v2", os.XATTR_REPLACE)
        self.assertEqual(os.getxattr(path, "user.a"), b"v2")
        os.removexattr(path, "user.a")
        self.assertErrno(errno.ENODATA, os.getxattr, path, "user.a")
        self.assertErrno(errno.ENODATA, os.removexattr, path, "user.a")
        self.assertEqual(os.listxattr(path), ["user.b"])
        for ns in ("trusted.t", "security.s"):
            self.assertErrno(errno.EOPNOTSUPP, os.setxattr, path, ns, b"v")
        self.assertErrno(errno.EOPNOTSUPP, os.getxattr, path, "trusted.t")
        os.mkdir(self.p("d"))
        os.setxattr(self.p("d"), "user.dir", b"yes")
        self.assertEqual(os.getxattr(self.p("d"), "user.dir"), b"yes")

    def test_virtual_xattrs_hidden(self):
        st = kf.stats(self.mnt)
        self.assertIn("files", st)
        self.assertIn("records_written", st)
        self.assertEqual(int(os.getxattr(self.mnt, "user.kvfs.pid")), self.proc.pid)
        self.assertNotIn("user.kvfs.stats", os.listxattr(self.mnt))
        self.assertErrno(errno.EPERM, os.setxattr, self.mnt, "user.kvfs.stats", b"x")

    def test_statfs(self):
        sv = os.statvfs(self.mnt)
        self.assertEqual(sv.f_bsize, 4096)
        self.assertEqual(sv.f_frsize, 4096)
        self.assertGreater(sv.f_blocks, 0)
        self.assertLessEqual(sv.f_bavail, sv.f_blocks)
        used0 = (sv.f_blocks - sv.f_bfree) * sv.f_frsize
        kf.write_file(self.p("big"), pattern("big", 8 << 20))
        time.sleep(0.1)
        sv = os.statvfs(self.mnt)
        used1 = (sv.f_blocks - sv.f_bfree) * sv.f_frsize
        self.assertGreaterEqual(used1 - used0, (8 << 20) - (1 << 20), (used0, used1))
        os.unlink(self.p("big"))
        sv = os.statvfs(self.mnt)
        used2 = (sv.f_blocks - sv.f_bfree) * sv.f_frsize
        self.assertLess(used2, used1 - (4 << 20), "usage must fall right after unlink")
        fd = os.open(self.d, os.O_RDONLY)
        try:
            self.assertEqual(os.fstatvfs(fd).f_bsize, 4096)
        finally:
            os.close(fd)


class RenameUnlink(MountedTestCase):
    def test_rename_replaces(self):
        kf.write_file(self.p("a"), b"new")
        kf.write_file(self.p("b"), b"old content")
        os.rename(self.p("a"), self.p("b"))
        self.assertFalse(os.path.exists(self.p("a")))
        self.assertEqual(kf.read_file(self.p("b")), b"new")
        self.assertEqual(os.stat(self.p("b")).st_size, 3)
        os.mkdir(self.p("d1"))
        os.mkdir(self.p("d2"))
        os.rename(self.p("b"), self.p("d1", "moved"))  # across directories
        self.assertEqual(kf.read_file(self.p("d1", "moved")), b"new")
        self.assertErrno(errno.ENOENT, os.rename, self.p("nope"), self.p("x"))
        self.assertErrno(errno.EISDIR, os.rename, self.p("d1", "moved"), self.p("d2"))

    def test_rename_noreplace_and_exchange(self):
        kf.write_file(self.p("a"), b"A")
        kf.write_file(self.p("b"), b"B")
        self.assertErrno(errno.EEXIST, renameat2, self.p("a"), self.p("b"), RENAME_NOREPLACE)
        renameat2(self.p("a"), self.p("c"), RENAME_NOREPLACE)
        self.assertEqual(kf.read_file(self.p("c")), b"A")
        # RENAME_EXCHANGE swaps two files, and a file with a directory, either side (posix_namespace_test.py:
        # across nodes; docs/semantics.md §2); a missing name is ENOENT and nothing moves.
        renameat2(self.p("c"), self.p("b"), RENAME_EXCHANGE)
        self.assertEqual(kf.read_file(self.p("b")), b"A")
        self.assertEqual(kf.read_file(self.p("c")), b"B")
        os.mkdir(self.p("dir"))
        kf.write_file(self.p("dir", "in"), b"inside")
        renameat2(self.p("c"), self.p("dir"), RENAME_EXCHANGE)
        self.assertEqual(kf.read_file(self.p("dir")), b"B")
        self.assertEqual(kf.read_file(self.p("c", "in")), b"inside")
        renameat2(self.p("c"), self.p("dir"), RENAME_EXCHANGE)
        self.assertErrno(errno.ENOENT, renameat2, self.p("c"), self.p("none"), RENAME_EXCHANGE)
        self.assertEqual(kf.read_file(self.p("c")), b"B")
        self.assertEqual(kf.read_file(self.p("dir", "in")), b"inside")

    def test_rename_directory(self):
        os.makedirs(self.p("d", "e"))
        kf.write_file(self.p("d", "e", "f"), b"F")
        try:
            os.rename(self.p("d"), self.p("d2"))
        except OSError as e:
            self.assertEqual(e.errno, errno.EXDEV)  # docs/design.md §3: directory rename may answer EXDEV
            return
        self.assertEqual(kf.read_file(self.p("d2", "e", "f")), b"F")

    def test_write_after_rename_of_open_file_case1(self):
        fd = os.open(self.p("a"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.rename(self.p("a"), self.p("b"))
        os.write(fd, b"0123456789")
        os.close(fd)
        self.assertEqual(kf.read_file(self.p("b")), b"0123456789")
        self.assertFalse(os.path.exists(self.p("a")))
        # variant: rename onto an existing b
        kf.write_file(self.p("c"), b"old")
        fd = os.open(self.p("a2"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.rename(self.p("a2"), self.p("c"))
        os.write(fd, b"0123456789")
        os.close(fd)
        self.assertEqual(kf.read_file(self.p("c")), b"0123456789")

    def test_unlink_open_file(self):
        data = pattern("uo", 300000)
        kf.write_file(self.p("r"), data)
        rfd = os.open(self.p("r"), os.O_RDONLY)
        os.unlink(self.p("r"))
        self.assertFalse(os.path.exists(self.p("r")))
        self.assertEqual(os.pread(rfd, len(data) + 10, 0), data)  # reader keeps its version
        self.assertEqual(os.fstat(rfd).st_size, len(data))
        os.close(rfd)
        # a writer whose name is unlinked keeps working; the version is discarded
        wfd = os.open(self.p("w"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(wfd, b"abc")
        os.unlink(self.p("w"))
        os.write(wfd, b"def")
        self.assertEqual(os.pread(wfd, 10, 0), b"abcdef")
        os.close(wfd)
        self.assertFalse(os.path.exists(self.p("w")))
        self.assertEqual(os.listdir(self.d), [])

    def test_o_direct_probe_pattern(self):
        # vLLM start-up probe: create .o_direct_probe_<rand>.tmp, one 4 KiB O_DIRECT write, unlink.
        path = self.p(".o_direct_probe_1234.tmp")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o644)
        buf = kf.aligned_buffer(4096, b"p" * 4096)
        try:
            self.assertEqual(os.write(fd, buf), 4096)
        finally:
            os.close(fd)
        os.unlink(path)
        self.assertFalse(os.path.exists(path))

    def test_replace_while_reader_open(self):
        kf.write_file(self.p("v"), pattern("v1", 100000))
        rfd = os.open(self.p("v"), os.O_RDONLY)
        kf.write_file(self.p("v.tmp"), pattern("v2", 50000))
        os.replace(self.p("v.tmp"), self.p("v"))
        self.assertEqual(os.pread(rfd, 200000, 0), pattern("v1", 100000))  # the old version, whole
        os.close(rfd)
        self.assertEqual(kf.read_file(self.p("v")), pattern("v2", 50000))


class DirectAndMmap(MountedTestCase):
    def test_o_direct_aligned(self):
        size = 2359296  # a vLLM 16-token chunk
        data = pattern("dio", size)
        tmp, final = self.p("blk.bin_1.tmp"), self.p("blk.bin")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_DIRECT, 0o644)
        buf = kf.aligned_buffer(size, data)
        try:
            self.assertEqual(os.write(fd, buf), size)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        fd = os.open(final, os.O_RDONLY | os.O_DIRECT)
        rbuf = kf.aligned_buffer(size)
        try:
            self.assertEqual(os.readv(fd, [rbuf]), size)
        finally:
            os.close(fd)
        self.assertEqual(bytes(rbuf), data)
        # 4 KiB at a time, pread at offsets
        fd = os.open(final, os.O_RDONLY | os.O_DIRECT)
        small = kf.aligned_buffer(4096)
        try:
            for off in (0, 4096, size - 4096):
                self.assertEqual(os.preadv(fd, [small], off), 4096)
                self.assertEqual(bytes(small), data[off:off + 4096])
        finally:
            os.close(fd)

    def test_write_only_truncating_writer_costs_no_getxattr(self):
        """A write-only O_TRUNC handle gets direct_io: the kernel's buffered write path asks GETXATTR
        security.capability before every write(2) (file_remove_privs), the direct_io path does not. Readers
        that open while it writes read through direct_io and see every write."""
        def getxattrs():
            return kf.stats(self.mnt)["fuse_ops"].get("getxattr", {"count": 0})["count"]
        path = self.p("w")
        data = pattern("wo", 64 * 4096)
        g0 = getxattrs()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for i in range(64):
                self.assertEqual(os.write(fd, data[i * 4096:(i + 1) * 4096]), 4096)
        finally:
            os.close(fd)
        # Two stats reads and one GETXATTR of the open; a page-cache writer costs 64 more (one per write).
        self.assertLessEqual(getxattrs() - g0, 4)
        self.assertEqual(kf.read_file(path), data)
        # A new file written while a reader has it open (the reader opened after the writer): exact bytes.
        path = self.p("w2")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"A" * 8192)
            r = os.open(path, os.O_RDONLY)
            try:
                self.assertEqual(os.pread(r, 8192, 0), b"A" * 8192)
                os.pwrite(fd, b"B" * 100, 4000)
                self.assertEqual(os.pread(r, 8192, 0), b"A" * 4000 + b"B" * 100 + b"A" * 4092)
                os.write(fd, b"C" * 10)
                self.assertEqual(os.pread(r, 9000, 0), b"A" * 4000 + b"B" * 100 + b"A" * 4092 + b"C" * 10)
            finally:
                os.close(r)
        finally:
            os.close(fd)
        want = b"A" * 4000 + b"B" * 100 + b"A" * 4092 + b"C" * 10
        self.assertEqual(kf.read_file(path), want)
        self.assertEqual(os.stat(path).st_size, len(want))

    def test_o_direct_unaligned_accepted(self):
        path = self.p("una")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        buf = kf.aligned_buffer(8192, pattern("una", 8192))
        try:
            self.assertEqual(os.pwrite(fd, memoryview(buf)[:1000], 0), 1000)
            self.assertEqual(os.pwrite(fd, memoryview(buf)[:28], 1000), 28)  # LMCache's 28-byte header size
            self.assertEqual(os.pread(fd, 2000, 3), (pattern("una", 8192)[:1000] + pattern("una", 28))[3:])
        finally:
            os.close(fd)
        self.assertEqual(os.stat(path).st_size, 1028)

    def test_o_direct_4k_pwrites(self):
        # LMCache nixl POSIX: one pwrite per 4 KiB page, then 4 KiB preads.
        pages = 256
        data = pattern("nixl", pages * 4096)
        path = self.p("nixl")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        buf = kf.aligned_buffer(4096)
        try:
            for i in range(pages):
                buf[:] = data[i * 4096:(i + 1) * 4096]
                self.assertEqual(os.pwrite(fd, buf, i * 4096), 4096)
        finally:
            os.close(fd)
        fd = os.open(path, os.O_RDWR | os.O_DIRECT)
        try:
            for i in (0, 17, pages - 1):
                self.assertEqual(os.preadv(fd, [buf], i * 4096), 4096)
                self.assertEqual(bytes(buf), data[i * 4096:(i + 1) * 4096])
        finally:
            os.close(fd)

    def test_buffered_and_direct_readers_agree(self):
        data = pattern("mix", 1 << 20)
        kf.write_file(self.p("m"), data)
        self.assertEqual(kf.read_file(self.p("m")), data)
        fd = os.open(self.p("m"), os.O_RDONLY | os.O_DIRECT)
        buf = kf.aligned_buffer(1 << 20)
        try:
            self.assertEqual(os.readv(fd, [buf]), 1 << 20)
        finally:
            os.close(fd)
        self.assertEqual(bytes(buf), data)

    def test_mmap_shared_write_then_close(self):
        path = self.p("mm")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, 3 * 4096)
        m = mmap.mmap(fd, 3 * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        m[0:5] = b"hello"
        os.close(fd)  # FLUSH happens here; the mapping still holds the file open
        m[4096:4101] = b"world"  # dirtied after close: written back at munmap, before RELEASE
        m[-3:] = b"end"
        m.close()
        got = kf.read_file(path)
        self.assertEqual(len(got), 3 * 4096)
        self.assertEqual(got[0:5], b"hello")
        self.assertEqual(got[4096:4101], b"world")
        self.assertEqual(got[-3:], b"end")

    def test_mmap_msync_and_read(self):
        data = pattern("mr", 5 * 4096)
        kf.write_file(self.p("r"), data)
        fd = os.open(self.p("r"), os.O_RDONLY)
        m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
        try:
            self.assertEqual(m[:], data)
        finally:
            m.close()
            os.close(fd)
        fd = os.open(self.p("r"), os.O_RDWR)
        m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        m[100:104] = b"MMAP"
        m.flush()
        self.assertEqual(os.pread(fd, 4, 100), b"MMAP")
        m.close()
        os.close(fd)
        self.assertEqual(kf.read_file(self.p("r")), data[:100] + b"MMAP" + data[104:])

    def _committed(self, n0, n):
        """Waits until n more versions were committed and none is staged any more (out of `writing`)."""
        def done():
            st = kf.stats(self.mnt)["fuse"]
            return st["versions_committed"] - n0 >= n and st["staged_versions"] == 0
        deadline = time.time() + 10
        while not done() and time.time() < deadline:
            time.sleep(0.01)
        self.assertTrue(done())

    def _map_read(self, path):
        """A read-only MAP_SHARED mapping of the whole file, as a loader that mmaps does."""
        fd = os.open(path, os.O_RDONLY)
        try:
            m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
            try:
                return m[:]
            finally:
                m.close()
        finally:
            os.close(fd)

    def test_mmap_after_in_place_rewrite(self):
        # A file rewritten in place (O_RDWR pwrite + close: renumbered, the retry writes on the fresh
        # number) maps again once the writer closed and the number was quiet for 2 s (Impl::
        # kFreshQuietNs). Before, readers of a renumbered number were served direct_io until remount:
        # mmap failed with ENODEV.
        path = self.p("slot")
        data = bytearray(pattern("ip", 64 * 1024))
        c0 = kf.stats(self.mnt)["fuse"]["versions_committed"]
        kf.write_file(path, bytes(data))
        self._committed(c0, 1)  # committed: the writable open below renumbers it
        self.assertEqual(self._map_read(path), bytes(data))
        st0 = kf.stats(self.mnt)["fuse"]
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, b"B" * 4096, 8192)
        finally:
            os.close(fd)
        data[8192:12288] = b"B" * 4096
        self.assertErrno(errno.ENODEV, self._map_read, path)  # within the quiet time: direct_io
        time.sleep(2.1)
        self.assertEqual(self._map_read(path), bytes(data))
        st1 = kf.stats(self.mnt)["fuse"]
        self.assertEqual(st1["inodes_renumbered"] - st0["inodes_renumbered"], 1)
        self.assertEqual(st1["fresh_forgotten"] - st0["fresh_forgotten"], 1)
        # A writer joining afterwards still gets a version of its own: the number moves again.
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, b"C" * 10, 0)
        finally:
            os.close(fd)
        data[0:10] = b"C" * 10
        time.sleep(2.1)
        self.assertEqual(self._map_read(path), bytes(data))
        self.assertEqual(kf.read_file(path), bytes(data))

    def test_mmap_after_o_trunc_rewrite(self):
        # An O_TRUNC rewrite of a committed file writes a hidden version; once it is closed and
        # nothing else is open, the next read-only open makes the inode ordinary again (mmap works).
        path = self.p("obj")
        c0 = kf.stats(self.mnt)["fuse"]["versions_committed"]
        kf.write_file(path, pattern("t1", 100000))
        self._committed(c0, 1)  # committed: the O_TRUNC open below writes a hidden replacement
        h0 = kf.stats(self.mnt)["fuse"]["hidden_reset"]
        new = pattern("t2", 50000)
        wfd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        # Held by an O_PATH descriptor (no OPEN reaches the daemon) opened while the writer holds the
        # new number: the kernel keeps that inode, so the reset below is the daemon's. Without it, under
        # load, the kernel could drop the name's dentry (the renumber's late invalidation of the old
        # number's name) and FORGET the inode once the writer closed; the reader's LOOKUP then gets a
        # fresh inode object, which never had a hidden version (nothing to reset: hidden_reset stayed
        # 0, seen 2 in 15 runs under load).
        pfd = os.open(path, os.O_PATH)
        try:
            self.assertEqual(os.fstat(pfd).st_ino, os.fstat(wfd).st_ino)
            self.assertEqual(os.write(wfd, new), len(new))
            os.close(wfd)
            wfd = None
            time.sleep(2.1)
            self.assertEqual(self._map_read(path), new)
            self.assertEqual(kf.stats(self.mnt)["fuse"]["hidden_reset"] - h0, 1)
        finally:
            if wfd is not None:
                os.close(wfd)
            os.close(pfd)
        # A reader that opened the old content keeps it whole (direct_io) while the new one is mapped.
        fd = os.open(path, os.O_RDONLY)
        try:
            newer = pattern("t3", 70000)
            kf.write_file(path, newer)
            self.assertEqual(os.pread(fd, 60000, 0), new)
            time.sleep(2.1)
            self.assertEqual(self._map_read(path), newer)
        finally:
            os.close(fd)


def _proc_writer(path, final, tag, size, rounds, q):
    """One LMCache-like writer process: open(<key>.tmp, O_TRUNC), write, close, rename."""
    try:
        data = pattern(tag, size)
        for _ in range(rounds):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            for off in range(0, size, 65536):
                os.write(fd, data[off:off + 65536])
            os.close(fd)
            try:
                os.rename(path, final)
            except FileNotFoundError:
                pass  # the other writer renamed the shared temp name first (ext4 does the same)
        q.put(None)
    except BaseException as e:  # noqa: BLE001
        q.put(repr(e))


class DirectReads(MountedTestCase):
    """O_DIRECT readers of a committed file get a page-cache handle (no FOPEN_DIRECT_IO): the kernel's
    O_DIRECT path still sends every byte to the daemon, and sends the 1 MiB READs of one read(2) at once
    (FUSE_CAP_ASYNC_DIO). TEST ONLY env (tools/mount_cmd.cc): KVFS_TEST_READ_DELAY_MS makes each READ wait,
    so requests sent together are in the daemon together (fuse.reads_in_flight_max)."""

    @classmethod
    def setUpClass(cls):
        saved = os.environ.get("KVFS_TEST_READ_DELAY_MS")
        os.environ["KVFS_TEST_READ_DELAY_MS"] = "30"
        try:
            super().setUpClass()
        finally:
            if saved is None:
                del os.environ["KVFS_TEST_READ_DELAY_MS"]
            else:
                os.environ["KVFS_TEST_READ_DELAY_MS"] = saved

    def dread(self, path, n, off):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            return os.pread(fd, n, off)
        finally:
            os.close(fd)

    def test_o_direct_reads(self):
        size = 2359296  # a vLLM 16-token chunk: READs of 1 MiB, 1 MiB, 256 KiB
        data = pattern("par", size)
        final = self.p("blk.bin")
        kf.write_file(final, data)
        self.assertEqual(kf.stats(self.mnt)["fuse"]["reads_in_flight_max"], 0)
        fd = os.open(final, os.O_RDONLY | os.O_DIRECT)
        rbuf = kf.aligned_buffer(size)
        try:
            self.assertEqual(os.readv(fd, [rbuf]), size)
        finally:
            os.close(fd)
        self.assertEqual(bytes(rbuf), data)
        # Only this read(2) ran: its three READs overlapped (FOPEN_DIRECT_IO would send them one by one).
        self.assertGreaterEqual(kf.stats(self.mnt)["fuse"]["reads_in_flight_max"], 2)

        # Odd sizes and offsets, inside, across and past the end of file; every byte exact.
        for n in (1, 4095, 4097, (1 << 20) + 1, size + 123):
            path = self.p("odd%d" % n)
            d = pattern("odd%d" % n, n)
            kf.write_file(path, d)
            for off, ln in ((0, n), (0, n + 5000), (1, n), (n - 1, 3), (n // 2, 1 << 20), (4093, 2 << 20),
                            (n, 10), (n + 4096, 4096)):
                if off < 0:
                    continue
                self.assertEqual(self.dread(path, ln, off), d[off:off + ln], (n, off, ln))

        # Rewrites: in place (O_TRUNC, shorter then longer) and by rename over it, after buffered and
        # O_DIRECT readers of the old bytes: no stale byte and no stale size.
        path = self.p("rw")
        old = pattern("old", size)
        kf.write_file(path, old)
        self.assertEqual(kf.read_file(path), old)  # the old bytes in the page cache
        self.assertEqual(self.dread(path, size, 0), old)
        for tag, n in (("short", 300000), ("long", size + 5000), ("odd", 12345)):
            d = pattern(tag, n)
            kf.write_file(path, d)
            self.assertEqual(self.dread(path, size + 10000, 0), d, tag)
            self.assertEqual(self.dread(path, 5000, n - 100), d[n - 100:], tag)
            self.assertEqual(kf.read_file(path), d, tag)
            self.assertEqual(os.stat(path).st_size, n, tag)
        tmp = self.p("rw.tmp")
        d = pattern("renamed", size - 1)
        kf.write_file(tmp, d)
        os.rename(tmp, path)
        self.assertEqual(self.dread(path, size + 10000, 0), d)
        self.assertEqual(kf.read_file(path), d)

        # An O_DIRECT reader open while a writer rewrites in place, then a fresh O_DIRECT open: new bytes.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            self.assertEqual(os.pread(fd, 100, 0), d[:100])
            d2 = pattern("while-open", 70000)
            kf.write_file(path, d2)
            self.assertEqual(self.dread(path, size, 0), d2)
        finally:
            os.close(fd)


class SameTempWriters(MountedTestCase):
    """LMCache's deterministic <key>.tmp: concurrent O_TRUNC writers must never publish a mix.

    One round per key (what LMCache does: a key is stored once, two racing stores at most): every read
    of the final name is one whole version. Looping writers that re-create the shared temp name while
    another writer renames it can move a file that is still being written (ext4 has the same race):
    then a reader may see a prefix of ONE version, still never a mix (docs/semantics.md).
    """

    SIZE = 256 * 1024 + 28

    def versions(self, tags):
        return {pattern(t, self.SIZE) for t in tags}

    def classify(self, got, wanted):
        if got in wanted:
            return "whole"
        if any(v.startswith(got) for v in wanted):
            return "prefix"
        return "mix"

    def reader_loop(self, finals, tags, stop, bad, allow_prefix):
        wanted = self.versions(tags)
        while not stop.is_set():
            for final in finals():
                try:
                    got = kf.read_file(final)
                except FileNotFoundError:
                    continue
                kind = self.classify(got, wanted)
                if kind == "mix" or (kind == "prefix" and not allow_prefix):
                    bad.append((final, kind, len(got)))

    @staticmethod
    def store_once(tmp, final, data):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for off in range(0, len(data), 65536):
            os.write(fd, data[off:off + 65536])
        os.close(fd)
        try:
            os.rename(tmp, final)
        except FileNotFoundError:
            pass  # the other writer renamed the shared temp name first (ext4 does the same)

    def test_threads_one_round_per_key(self):
        tags = ("A", "B")
        keys = 25
        current = [0]
        bad, stop = [], threading.Event()
        reader = threading.Thread(target=self.reader_loop,
                                  args=(lambda: [self.p("key%d" % current[0])], tags, stop, bad, False))
        reader.start()
        errors = []
        try:
            for k in range(keys):
                current[0] = k
                barrier = threading.Barrier(2)

                def writer(tag):
                    try:
                        barrier.wait()
                        self.store_once(self.p("key%d.tmp" % k), self.p("key%d" % k), pattern(tag, self.SIZE))
                    except BaseException as e:  # noqa: BLE001
                        errors.append(repr(e))

                ws = [threading.Thread(target=writer, args=(t,)) for t in tags]
                for w in ws:
                    w.start()
                for w in ws:
                    w.join()
                self.assertIn(kf.read_file(self.p("key%d" % k)), self.versions(tags))
        finally:
            stop.set()
            reader.join()
        self.assertEqual(errors, [])
        self.assertEqual(bad, [], "a reader saw a partial or mixed version")
        self.assertEqual(sorted(os.listdir(self.d)), sorted("key%d" % k for k in range(keys)))

    def test_threads_looping(self):
        tmp, final = self.p("key.tmp"), self.p("key")
        tags = ("A", "B", "C")
        bad, stop = [], threading.Event()
        reader = threading.Thread(target=self.reader_loop, args=(lambda: [final], tags, stop, bad, True))
        reader.start()
        results = []

        def writer(tag):
            try:
                for _ in range(15):
                    self.store_once(tmp, final, pattern(tag, self.SIZE))
                results.append(None)
            except BaseException as e:  # noqa: BLE001
                results.append(repr(e))

        ws = [threading.Thread(target=writer, args=(t,)) for t in tags]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        stop.set()
        reader.join()
        self.assertEqual(results, [None] * 3)
        self.assertEqual(bad, [], "a reader saw a mix of versions")
        self.assertIn(kf.read_file(final), self.versions(tags))

    def test_processes(self):
        ctx = multiprocessing.get_context("fork")
        tags = ("P1", "P2")
        keys = 10
        current = [0]
        bad, stop = [], threading.Event()
        reader = threading.Thread(target=self.reader_loop,
                                  args=(lambda: [self.p("k%d" % current[0])], tags, stop, bad, False))
        reader.start()
        try:
            for k in range(keys):
                current[0] = k
                q = ctx.Queue()
                ps = [ctx.Process(target=_proc_writer,
                                  args=(self.p("k%d.tmp" % k), self.p("k%d" % k), t, self.SIZE, 1, q))
                      for t in tags]
                for p in ps:
                    p.start()
                res = [q.get(timeout=120) for _ in ps]
                for p in ps:
                    p.join()
                self.assertEqual(res, [None, None])
                self.assertIn(kf.read_file(self.p("k%d" % k)), self.versions(tags))
            # and looping processes on one key: never a mix
            q = ctx.Queue()
            ps = [ctx.Process(target=_proc_writer, args=(self.p("loop.tmp"), self.p("loop"), t, self.SIZE, 10, q))
                  for t in tags]
            for p in ps:
                p.start()
            res = [q.get(timeout=120) for _ in ps]
            for p in ps:
                p.join()
            self.assertEqual(res, [None, None])
            self.assertIn(kf.read_file(self.p("loop")), self.versions(tags))
        finally:
            stop.set()
            reader.join()
        self.assertEqual(bad, [])

    def test_two_truncating_handles_in_one_process(self):
        # Two O_TRUNC opens of one name, writes interleaved: each close publishes a whole version.
        tmp = self.p("k.tmp")
        a = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        b = None
        try:
            os.write(a, pattern("A", self.SIZE)[:100000])
            b = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(b, pattern("B", self.SIZE)[:50000])
            os.write(a, pattern("A", self.SIZE)[100000:])
            os.close(a)
            a = None
            # A is whole; B (a shadow version) stays invisible until it commits
            self.assertEqual(kf.read_file(tmp), pattern("A", self.SIZE))
            os.write(b, pattern("B", self.SIZE)[50000:])
            os.close(b)
            b = None
            self.assertEqual(kf.read_file(tmp), pattern("B", self.SIZE))
            self.assertEqual(os.stat(tmp).st_size, self.SIZE)
        finally:
            for fd in (a, b):
                if fd is not None:
                    os.close(fd)

    def test_rewrite_of_committed_file_is_atomic(self):
        # O_TRUNC of a committed file (LMCache local_disk): readers see the old version whole until close.
        path = self.p("final")
        kf.write_file(path, pattern("old", self.SIZE))
        fd = os.open(path, os.O_RDWR | os.O_TRUNC)
        try:
            os.write(fd, pattern("new", self.SIZE)[:70000])
            self.assertEqual(kf.read_file(path), pattern("old", self.SIZE))  # whole, never truncated
            self.assertEqual(os.stat(path).st_size, 70000)  # st_size is exact: the size being written
            os.listdir(self.d)  # READDIRPLUS must not reset the writer's size
            self.assertEqual(os.pread(fd, 100, 69950), pattern("new", self.SIZE)[69950:70000])
            os.write(fd, pattern("new", self.SIZE)[70000:])
        finally:
            os.close(fd)
        self.assertEqual(kf.read_file(path), pattern("new", self.SIZE))
        # O_APPEND rewrite with a listing in the middle (differential_test regression)
        kf.write_file(path, b"old")
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_APPEND)
        try:
            os.write(fd, b"A" * 5000)
            os.listdir(self.d)
            os.stat(path)
            os.write(fd, b"B" * 100)
        finally:
            os.close(fd)
        self.assertEqual(kf.read_file(path), b"A" * 5000 + b"B" * 100)


class NewContentNewInode(MountedTestCase):
    """docs/design.md §3: new content of a committed file gets a new inode number (docs/semantics.md §1)."""

    def settle(self):
        """Runs the commits deferred after close (fsyncdir drains them): the files are plain committed."""
        fd = os.open(self.d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def test_reader_across_in_place_shrink(self):
        # The known bug this fixes: a reader opened before an in-place O_TRUNC rewrite to a shorter size
        # read the old bytes cut to the new size (one kernel i_size for both versions).
        path = self.p("f")
        old = pattern("old", 1000000)
        kf.write_file(path, old)
        time.sleep(0.3)  # the commit (deferred 5 ms after close) is long done: a plain committed file
        self.settle()  # (even on a loaded machine)
        before = os.stat(path)
        r = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.pread(r, 4096, 0), old[:4096])  # page cache of the old inode populated
            new = pattern("new", 3000)
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.write(fd, new)
            os.close(fd)
            got = os.pread(r, 2 << 20, 0)
            self.assertEqual(len(got), len(old))
            self.assertEqual(got, old)  # the old version, whole
            fr = os.fstat(r)
            self.assertEqual((fr.st_size, fr.st_ino), (1000000, before.st_ino))
            n = os.open(path, os.O_RDONLY)
            try:
                self.assertEqual(os.pread(n, 2 << 20, 0), new)
                fn = os.fstat(n)
                self.assertEqual(fn.st_size, 3000)
                self.assertNotEqual(fn.st_ino, before.st_ino)
                self.assertEqual(os.stat(path).st_ino, fn.st_ino)
            finally:
                os.close(n)
            self.assertEqual(os.pread(r, 2 << 20, 0), old)  # still, after the new version is read
        finally:
            os.close(r)
        self.assertEqual(kf.read_file(path), new)

    def test_reader_across_truncate_path(self):
        path = self.p("f")
        old = pattern("old", 300000)
        kf.write_file(path, old)
        self.settle()
        r = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.read(r, 10), old[:10])
            os.truncate(path, 1000)
            self.assertEqual(os.stat(path).st_size, 1000)
            self.assertEqual(os.pread(r, 1 << 20, 0), old)
            self.assertEqual(os.fstat(r).st_size, 300000)
        finally:
            os.close(r)
        self.assertEqual(kf.read_file(path), old[:1000])

    def test_st_ino_changes_with_content_only(self):
        path = self.p("f")
        kf.write_file(path, b"one")
        os.setxattr(path, "user.k", b"v")
        self.settle()
        seen = [os.stat(path).st_ino]
        renumbered0 = kf.stats(self.mnt)["fuse"]["inodes_renumbered"]

        def changed(what):
            self.settle()  # committed: the next writer starts a new version (not joining this one)
            ino = os.stat(path).st_ino
            self.assertNotIn(ino, seen, what)
            seen.append(ino)
            self.assertEqual([e.inode() for e in os.scandir(self.d) if e.name == "f"], [ino], what)

        kf.write_file(path, b"two")  # O_TRUNC rewrite
        changed("O_TRUNC rewrite")
        fd = os.open(path, os.O_RDWR)  # in-place write without O_TRUNC
        os.pwrite(fd, b"T", 0)
        os.close(fd)
        changed("O_RDWR write")
        os.truncate(path, 2)
        changed("truncate(path)")
        with open(path, "ab") as f:
            f.write(b"xyz")
        changed("O_APPEND")
        self.assertEqual(kf.read_file(path), b"Twxyz")
        self.assertEqual(os.getxattr(path, "user.k"), b"v")  # xattrs move with the file
        self.assertEqual(kf.stats(self.mnt)["fuse"]["inodes_renumbered"] - renumbered0, 4)
        # Attribute changes, renames and reads keep the number.
        ino = seen[-1]
        os.chmod(path, 0o600)
        os.utime(path, (1, 2))
        os.setxattr(path, "user.k2", b"w")
        kf.read_file(path)
        os.rename(path, self.p("g"))
        self.assertEqual(os.stat(self.p("g")).st_ino, ino)
        # A file being written keeps its number: joins and ftruncate of an open writer.
        fd = os.open(self.p("h"), os.O_WRONLY | os.O_CREAT, 0o644)
        ino_h = os.fstat(fd).st_ino
        os.write(fd, b"abc")
        fd2 = os.open(self.p("h"), os.O_WRONLY)
        os.ftruncate(fd2, 1)
        os.close(fd2)
        os.close(fd)
        self.assertEqual(os.stat(self.p("h")).st_ino, ino_h)
        self.assertEqual(kf.read_file(self.p("h")), b"a")

    def test_rename_over_open_reader_then_rewrite(self):
        a, b = self.p("a"), self.p("b")
        kf.write_file(a, pattern("a", 50000))
        kf.write_file(b, pattern("b", 70000))
        self.settle()
        r = os.open(b, os.O_RDONLY)
        try:
            os.rename(a, b)
            kf.write_file(b, b"short")  # rewrite of the renamed file
            self.assertEqual(os.pread(r, 1 << 20, 0), pattern("b", 70000))
            self.assertEqual(os.fstat(r).st_size, 70000)
        finally:
            os.close(r)
        self.assertEqual(kf.read_file(b), b"short")


@kf.skip_unless_fuse
class Remount(unittest.TestCase):
    def test_persistence_byte_identical(self):
        b = kf.Backing()
        try:
            files = {}
            with kf.mounted(backing=b) as (mnt, _, _):
                os.makedirs(os.path.join(mnt, "m", "a1b", "c2_g0"))
                for i, size in enumerate((0, 1, 28, 4096, 147456, (1 << 20) + 3, 2359296)):
                    rel = "m/a1b/c2_g0/blk%d.bin" % i
                    data = os.urandom(size)
                    tmp = os.path.join(mnt, rel + "_x.tmp")
                    kf.write_file(tmp, data)
                    os.rename(tmp, os.path.join(mnt, rel))
                    files[rel] = data
                # case 1 file (write after rename of the open file)
                fd = os.open(os.path.join(mnt, "a"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.rename(os.path.join(mnt, "a"), os.path.join(mnt, "b"))
                os.write(fd, b"0123456789")
                os.close(fd)
                files["b"] = b"0123456789"
                # mmap-written file
                p = os.path.join(mnt, "mm")
                fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                os.ftruncate(fd, 8192)
                m = mmap.mmap(fd, 8192)
                m[:4] = b"MMAP"
                os.close(fd)
                m[8188:] = b"TAIL"
                m.close()
                files["mm"] = b"MMAP" + b"\0" * 8184 + b"TAIL"
                # an overwritten, then unlinked, then replaced file
                kf.write_file(os.path.join(mnt, "gone"), b"x")
                os.unlink(os.path.join(mnt, "gone"))
                kf.write_file(os.path.join(mnt, "rep"), b"first")
                kf.write_file(os.path.join(mnt, "rep.tmp"), b"second")
                os.replace(os.path.join(mnt, "rep.tmp"), os.path.join(mnt, "rep"))
                files["rep"] = b"second"
                os.chmod(os.path.join(mnt, "b"), 0o600)
                os.utime(os.path.join(mnt, "b"), ns=(10**9 + 5, 2 * 10**9 + 7))
                os.setxattr(os.path.join(mnt, "b"), "user.k", b"v")
                os.symlink("b", os.path.join(mnt, "ln"))
                fsynced = os.path.join(mnt, "synced")
                fd = os.open(fsynced, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, b"fsync me")
                os.fsync(fd)
                os.close(fd)
                files["synced"] = b"fsync me"
            with kf.mounted(backing=b) as (mnt, _, _):
                # before any read: reads update atime (relatime; this one is decades old)
                st = os.stat(os.path.join(mnt, "b"))
                self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
                self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (10**9 + 5, 2 * 10**9 + 7))
                t_read = time.time_ns()
                for rel, data in files.items():
                    p = os.path.join(mnt, rel)
                    self.assertEqual(os.stat(p).st_size, len(data), rel)
                    self.assertEqual(kf.read_file(p), data, rel)
                self.assertFalse(os.path.exists(os.path.join(mnt, "gone")))
                self.assertFalse(os.path.exists(os.path.join(mnt, "a")))
                self.assertFalse(os.path.exists(os.path.join(mnt, "rep.tmp")))
                st = os.stat(os.path.join(mnt, "b"))
                self.assertGreaterEqual(st.st_atime_ns, t_read)
                self.assertEqual(st.st_mtime_ns, 2 * 10**9 + 7)
                self.assertEqual(os.getxattr(os.path.join(mnt, "b"), "user.k"), b"v")
                self.assertEqual(os.readlink(os.path.join(mnt, "ln")), "b")
                self.assertEqual(sorted(os.listdir(os.path.join(mnt, "m", "a1b", "c2_g0"))),
                                 sorted("blk%d.bin" % i for i in range(7)))
        finally:
            b.cleanup()


class ProcFdReopen(MountedTestCase):
    """Writable reopens through /proc/self/fd and /dev/fd (issue #3): such an open follows a magic link to
    the inode, not a name, so its ESTALE retry would land on the same number again. They must succeed and
    write the file, as on ext4 (docs/semantics.md section 1, "Inode numbers")."""

    def write_file(self, path, data):
        with open(path, "wb") as f:
            f.write(data)

    def read_file(self, path):
        with open(path, "rb") as f:
            return f.read()

    def test_wronly_trunc_under_open_reader(self):
        path = self.p("bf")
        self.write_file(path, b"hello\n")
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, 100, 0), b"hello\n")  # page cache of the reader
            ino = os.fstat(fd).st_ino
            w = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY | os.O_TRUNC)
            try:
                self.assertEqual(os.pread(fd, 100, 0), b"")  # truncated under the reader, as on ext4
                self.assertEqual(os.write(w, b"x\n"), 2)
            finally:
                os.close(w)
            self.assertEqual(self.read_file(path), b"x\n")
            self.assertEqual(os.stat(path).st_ino, ino)  # the magic link's inode IS the file
            # Local-fs semantics for this fallback: the open reader sees the rewrite.
            self.assertEqual(os.fstat(fd).st_size, 2)
            self.assertEqual(os.pread(fd, 100, 0), b"x\n")
        finally:
            os.close(fd)
        self.assertEqual(self.read_file(path), b"x\n")

    def test_rdwr_in_place_under_open_reader(self):
        path = self.p("bf")
        self.write_file(path, b"hello\n")
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, 100, 0), b"hello\n")
            w = os.open("/proc/self/fd/%d" % fd, os.O_RDWR)
            try:
                self.assertEqual(os.pread(w, 100, 0), b"hello\n")
                self.assertEqual(os.pwrite(w, b"AB", 0), 2)
            finally:
                os.close(w)
            self.assertEqual(self.read_file(path), b"ABllo\n")
            self.assertEqual(os.pread(fd, 100, 0), b"ABllo\n")
        finally:
            os.close(fd)

    def test_dev_fd_redirect_from_shell(self):
        self.write_file(self.p("bf"), b"hello\n")
        r = subprocess.run(["bash", "-c", "exec 3<bf; echo x >/dev/fd/3"], cwd=self.d,
                           capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(self.read_file(self.p("bf")), b"x\n")

    def test_o_path_reopened_twice(self):
        path = self.p("bf")
        self.write_file(path, b"hello\n")
        fd = os.open(path, os.O_PATH)
        try:
            ino = os.fstat(fd).st_ino
            for data in (b"one", b"second"):
                w = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY | os.O_TRUNC)
                try:
                    self.assertEqual(os.write(w, data), len(data))
                finally:
                    os.close(w)
                self.assertEqual(self.read_file(path), data)
                self.assertEqual(os.stat(path).st_ino, ino)
        finally:
            os.close(fd)

    def test_o_path_reopen_after_a_rewrite_by_path(self):
        """A rewrite by path between two magic-link reopens (breaker helper, 2026-12-07): the path's
        rewrite moved the name to a new number; the reopen of the O_PATH descriptor then answered ESTALE
        every time (ext4 writes the file). Now it writes the file, in place, as the first reopen did."""
        path = self.p("bf")
        self.write_file(path, b"hello\n")
        fd = os.open(path, os.O_PATH)
        try:
            for i, (via, data) in enumerate((("fd", b"one"), ("path", b"second"), ("fd", b"third"),
                                              ("path", b"4"), ("fd", b"fifth!"))):
                w = os.open("/proc/self/fd/%d" % fd if via == "fd" else path, os.O_WRONLY | os.O_TRUNC)
                try:
                    self.assertEqual(os.write(w, data), len(data))
                finally:
                    os.close(w)
                self.assertEqual(self.read_file(path), data, "after step %d (%s)" % (i, via))
        finally:
            os.close(fd)
        self.assertEqual(self.read_file(path), b"fifth!")

    def test_o_path_reopen_with_a_reader_of_the_rewrite_by_path(self):
        """The same with a reader of the rewrite by path still open: the reopen writes the file; that
        reader keeps the content it opened, whole (it holds the number the rewrite by path gave the name;
        on ext4 it would see the rewrite: one inode), and its fstat answers st_nlink 0."""
        path = self.p("bf")
        self.write_file(path, b"hello\n")
        fd = os.open(path, os.O_PATH)
        try:
            self.write_file("/proc/self/fd/%d" % fd, b"one")
            self.write_file(path, b"second")
            r = os.open(path, os.O_RDONLY)
            try:
                self.assertEqual(os.pread(r, 100, 0), b"second")
                w = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY | os.O_TRUNC)
                try:
                    self.assertEqual(os.write(w, b"third"), 5)
                finally:
                    os.close(w)
                self.assertEqual(self.read_file(path), b"third")
                self.assertEqual(os.stat(path).st_ino, os.fstat(fd).st_ino)
                self.assertEqual(os.pread(r, 100, 0), b"second")
                st = os.fstat(r)
                self.assertEqual((st.st_size, st.st_nlink), (6, 0))
            finally:
                os.close(r)
        finally:
            os.close(fd)
        self.assertEqual(self.read_file(path), b"third")


def bdi_read_ahead_kb(mnt):
    """read_ahead_kb of the FUSE mount at mnt (its device number from /proc/self/mountinfo)."""
    dev = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == os.path.realpath(mnt):
                dev = fields[2]
    with open("/sys/class/bdi/%s/read_ahead_kb" % dev) as f:
        return int(f.read())


@kf.skip_unless_fuse
class ReadAhead(unittest.TestCase):
    """`--read-ahead` (default 4MiB) raises the mount's bdi read-ahead, which the kernel keeps at 128 KiB
    for FUSE whatever INIT's max_readahead says: a buffered sequential read(2) of a large value then
    reaches the daemon as 1 MiB READs (max_write), not 128 KiB ones. `--read-ahead 0` keeps the kernel's."""

    SIZE = 16 << 20

    def setUp(self):
        if os.geteuid() != 0 or os.statvfs("/sys").f_flag & os.ST_RDONLY:
            self.skipTest("raising a bdi's read_ahead_kb needs root and a writable /sys")

    def read_cold(self, mnt, name):
        """Writes SIZE bytes, drops the file's pages, reads it back buffered in one read(2); (READs, ok)."""
        path = os.path.join(mnt, name)
        data = pattern(name, self.SIZE)
        kf.write_file(path, data)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            before = kf.stats(mnt)["fuse_ops"].get("read", {}).get("count", 0)  # listed once counted
            got = b""
            while len(got) < self.SIZE:
                chunk = os.read(fd, self.SIZE - len(got))
                if not chunk:
                    break
                got += chunk
            reads = kf.stats(mnt)["fuse_ops"].get("read", {}).get("count", 0) - before
        finally:
            os.close(fd)
        return reads, got == data

    def test_default_read_ahead_sends_1mib_reads(self):
        with kf.mounted() as (mnt, _, _):
            self.assertEqual(bdi_read_ahead_kb(mnt), 4096)
            self.assertEqual(kf.stats(mnt)["config"]["read_ahead_bytes"], 4 << 20)
            reads, exact = self.read_cold(mnt, "big")
            self.assertTrue(exact)
            # 16 READs of 1 MiB (a few more if a window edge splits one); 128 KiB READs would be 128.
            self.assertGreaterEqual(reads, 16)
            self.assertLessEqual(reads, 24)

    def test_header_then_body_loads_each_byte_once(self):
        """LMCache fs's load: a 28-byte header read(2), then the body in one read(2). The read-ahead windows
        then start 16 KiB past each 1 MiB boundary, so every 4th 1 MiB READ spans two of the store's 4 MiB
        cache pieces; such a READ is answered from both pieces (Store::ReadUnitEnd). Counted: the bytes
        the daemon loads from the export for a cold read of the whole file (kvfs stats read_loaded_bytes)
        are the file's size; before, those READs were read on their own too (1.24x)."""
        size = 36 * (1 << 20) + 28
        data = pattern("lmcache", size)
        b = kf.Backing()
        try:
            with kf.mounted(backing=b) as (mnt, _, _):
                kf.write_file(os.path.join(mnt, "chunk"), data)
            with kf.mounted(backing=b) as (mnt, _, _):  # a remount: the daemon's cache is empty
                before = kf.stats(mnt)["read_loaded_bytes"]
                fd = os.open(os.path.join(mnt, "chunk"), os.O_RDONLY)
                try:
                    got = os.read(fd, 28)
                    while len(got) < size:
                        chunk = os.read(fd, size - len(got))
                        if not chunk:
                            break
                        got += chunk
                finally:
                    os.close(fd)
                loaded = kf.stats(mnt)["read_loaded_bytes"] - before
            self.assertEqual(got, data)
            self.assertGreaterEqual(loaded, size)
            self.assertLessEqual(loaded, size + (1 << 20), "bytes loaded from the export for one cold read")
        finally:
            b.cleanup()

    def test_daemon_without_sysfs_warns_on_the_terminal(self):
        """A read-only /sys (an unprivileged container): the daemon still mounts (exit 0, 128 KiB READs), and
        the warning reaches the terminal with the "mounted" line, not only the daemon's log file. Run in a
        private mount namespace (unshare -m), where /sys is remounted read-only and the mount lives."""
        b = kf.Backing()
        try:
            script = ('mount -o remount,bind,ro /sys || exit 9; "$K" mount "$M" --backing "$B" --index-dir "$I"; '
                      'echo "rc=$?" >&2; "$K" stats "$M" --json; "$K" umount "$M" >/dev/null 2>&1 || fusermount3 -u "$M"')
            r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                               capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, K=kf.kvfs_binary(), M=b.mnt, B=b.backing, I=b.index))
            if "rc=" not in r.stderr:
                self.skipTest("cannot remount /sys read-only in a private mount namespace: %r" % r.stderr)
            self.assertIn("rc=0", r.stderr)
            warn = [ln for ln in r.stderr.splitlines() if ln.startswith("kvfs: warning: read-ahead")]
            self.assertEqual(len(warn), 1, r.stderr)
            self.assertIn("Read-only file system", warn[0])
            self.assertIn("kvfs: mounted", r.stdout)
            self.assertEqual(json.loads(r.stdout[r.stdout.index("{"):])["config"]["read_ahead_bytes"], 128 << 10)
        finally:
            b.cleanup()

    def test_read_ahead_option(self):
        with kf.mounted(read_ahead="8MiB") as (mnt, _, _):
            self.assertEqual(bdi_read_ahead_kb(mnt), 8192)
        with kf.mounted(read_ahead="0") as (mnt, _, _):
            self.assertEqual(bdi_read_ahead_kb(mnt), 128)
            self.assertEqual(kf.stats(mnt)["config"]["read_ahead_bytes"], 128 << 10)
            reads, exact = self.read_cold(mnt, "big")
            self.assertTrue(exact)
            self.assertGreaterEqual(reads, 120)  # the kernel's 128 KiB window: 128 READs
        b = kf.Backing()
        try:
            for bad in ("3000", "64KiB", "8192", "512MiB", "x"):
                r = subprocess.run([kf.kvfs_binary(), "mount", b.mnt, "--backing", b.backing, "--index-dir",
                                    b.index, "--read-ahead", bad], capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("--read-ahead", r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertFalse(kf.is_mounted(b.mnt))
        finally:
            b.cleanup()


if __name__ == "__main__":
    unittest.main()
