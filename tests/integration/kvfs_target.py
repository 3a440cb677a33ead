"""Where an integration test runs: a plain directory or a kvfs mount (python3 stdlib only).

A test body takes a `Target` and does real syscalls under `target.root`. The same body runs against
  - "plain": a fresh temp directory (mkdtemp under $KVFS_TEST_TMP or /tmp), removed afterwards;
  - "mount": a fresh kvfs mount from tests/integration/kvfs_fixture.py (`mounted(**flags)` yields
    (mountpoint, backing_dir, proc) and always unmounts), used when KVFS_BINARY names an existing
    binary, the fixture is importable and /dev/fuse exists.
`mount_unavailable()` says why the mount cannot be used (None when it can). Set KVFS_REQUIRE_MOUNT=1 to
turn "mount unavailable" into a test failure instead of a skip (CI with a built kvfs).
KVFS_TARGETS=plain (or =mount) restricts the targets a suite runs against.

`other_kind(kind)` is the reference for differential checks: the mount is compared with a plain
directory; a plain directory with a second, independent plain directory (which validates that the
workload itself is deterministic).
"""

import contextlib
import ctypes
import errno
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

KINDS = ("plain", "mount")


def test_data_dir():
    d = os.environ.get("KVFS_TEST_DATA")
    if d and os.path.isdir(d):
        return d
    return os.path.join(os.path.dirname(HERE), "data")


def tmp_parent():
    return os.environ.get("KVFS_TEST_TMP") or tempfile.gettempdir()


def _fixture():
    try:
        import kvfs_fixture  # written by the mount helper
        return kvfs_fixture, None
    except Exception as e:  # pragma: no cover - depends on the tree state
        return None, "tests/integration/kvfs_fixture.py not importable: %r" % (e,)


def mount_unavailable():
    """None if a kvfs mount can be made here, else the reason."""
    wanted = os.environ.get("KVFS_TARGETS")
    if wanted and "mount" not in wanted.split(","):
        return "KVFS_TARGETS=%s excludes the mount" % wanted
    fx, why = _fixture()
    if fx is None:
        return why
    if not hasattr(fx, "mounted"):
        return "kvfs_fixture has no mounted()"
    try:
        binary = fx.kvfs_binary()
    except Exception as e:
        return "no kvfs binary: %s" % e
    if not os.path.exists(binary):
        return "kvfs binary %s does not exist" % binary
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse missing"
    return None


def kind_enabled(kind):
    wanted = os.environ.get("KVFS_TARGETS")
    if wanted and kind not in wanted.split(","):
        return False
    return True


class Target:
    """One place to run a workload. root: the directory to work in (exists, empty at start)."""

    def __init__(self, kind, root, backing=None, proc=None, mountpoint=None, flags=None):
        self.kind = kind
        self.root = root
        self.backing = backing
        self.proc = proc
        self.mountpoint = mountpoint
        self.flags = flags or {}
        self._remount = None

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def alive(self):
        """False if the kvfs process has exited (a crashed mount)."""
        return self.proc is None or self.proc.poll() is None

    def remount(self):
        """Unmount and mount again over the same backing dir (no-op for a plain dir)."""
        if self._remount is not None:
            self._remount(self)

    def __repr__(self):
        return "Target(%s, %s)" % (self.kind, self.root)


@contextlib.contextmanager
def _plain(name="plain"):
    d = tempfile.mkdtemp(prefix="kvfs-%s-" % name, dir=tmp_parent())
    try:
        yield Target(name if name != "plain2" else "plain", d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def _mount(flags):
    why = mount_unavailable()
    if why:
        if os.environ.get("KVFS_REQUIRE_MOUNT") == "1":
            raise AssertionError("kvfs mount required but unavailable: " + why)
        raise unittest.SkipTest("kvfs mount unavailable: " + why)
    fx, _ = _fixture()
    backing = fx.Backing()  # one backing + index dir for the target's life (remount keeps the data)
    state = {"cm": None}

    def enter():
        state["cm"] = fx.mounted(backing=backing, **flags)
        return state["cm"].__enter__()

    def leave():
        cm, state["cm"] = state["cm"], None
        if cm is not None:
            cm.__exit__(None, None, None)

    try:
        mp, backing_dir, proc = enter()
        t = Target("mount", mp, backing=backing_dir, proc=proc, mountpoint=mp, flags=flags)

        def remount(target):
            # Callers must hold no fd under the mountpoint.
            leave()
            mp2, backing2, proc2 = enter()
            target.root = target.mountpoint = mp2
            target.backing = backing2
            target.proc = proc2

        t._remount = remount
        yield t
    finally:
        try:
            leave()
        finally:
            backing.cleanup()


@contextlib.contextmanager
def target(kind, **flags):
    """Context manager yielding a fresh Target of `kind` ("plain", "plain2" or "mount")."""
    if kind in ("plain", "plain2"):
        with _plain(kind) as t:
            yield t
    elif kind == "mount":
        with _mount(flags) as t:
            yield t
    else:
        raise ValueError(kind)


def reference_kind(kind):
    """The kind to compare `kind` with in a differential check."""
    return "plain2" if kind == "plain" else "plain"


def make_target_classes(base, module_globals, kinds=KINDS):
    """Create `<Base>_plain` and `<Base>_mount` unittest classes from a mixin with KIND."""
    for kind in kinds:
        name = "%s_%s" % (base.__name__.lstrip("_"), kind)
        cls = type(name, (base, unittest.TestCase), {"KIND": kind, "__module__": module_globals["__name__"]})
        module_globals[name] = cls


def skip_if_disabled(testcase, kind):
    if not kind_enabled(kind):
        testcase.skipTest("KVFS_TARGETS excludes %s" % kind)
    if kind == "mount":
        why = mount_unavailable()
        if why:
            if os.environ.get("KVFS_REQUIRE_MOUNT") == "1":
                testcase.fail("kvfs mount required but unavailable: " + why)
            testcase.skipTest("kvfs mount unavailable: " + why)


# ----------------------------------------------------------------------------------------------
# Small syscall helpers shared by the suites.

_libc = ctypes.CDLL(None, use_errno=True)
_libc.access.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.access.restype = ctypes.c_int


def access_errno(path, mode=os.F_OK):
    """access(2): 0 or the errno name (os.access hides the errno)."""
    r = _libc.access(os.fsencode(path), mode)
    if r == 0:
        return 0
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def aligned_buffer(size):
    """A page-aligned, zeroed, writable buffer (anonymous mmap) usable for O_DIRECT I/O."""
    import mmap
    return mmap.mmap(-1, max(size, 1))


def tree_digest(root, with_mode=False):
    """{relative path: ("dir",) | ("reg", size, sha256) | ("lnk", target)} of everything under root."""
    import hashlib
    import stat as st
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            s = os.lstat(p)
            mode = (st.S_IMODE(s.st_mode),) if with_mode else ()
            if st.S_ISDIR(s.st_mode):
                out[rel] = ("dir",) + mode
            elif st.S_ISREG(s.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                out[rel] = ("reg", s.st_size, h.hexdigest()) + mode
            elif st.S_ISLNK(s.st_mode):
                out[rel] = ("lnk", os.readlink(p)) + mode
            else:
                out[rel] = ("other", st.S_IFMT(s.st_mode)) + mode
    return out


def diff_trees(a, b, label_a="a", label_b="b", limit=20):
    """Human-readable differences between two tree_digest() results ([] when identical)."""
    msgs = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            msgs.append("%s: %s=%s %s=%s" % (k, label_a, a.get(k), label_b, b.get(k)))
            if len(msgs) >= limit:
                msgs.append("...")
                break
    return msgs


def first_diff(seq_a, seq_b, label_a="a", label_b="b", context=3):
    """Describe the first index where two observation lists differ, or None."""
    n = min(len(seq_a), len(seq_b))
    for i in range(n):
        if seq_a[i] != seq_b[i]:
            lines = ["first difference at observation %d:" % i]
            for j in range(max(0, i - context), i):
                lines.append("   same   %r" % (seq_a[j],))
            lines.append("   %-6s %r" % (label_a, seq_a[i]))
            lines.append("   %-6s %r" % (label_b, seq_b[i]))
            return "\n".join(lines)
    if len(seq_a) != len(seq_b):
        return "lengths differ: %s=%d %s=%d (next: %r / %r)" % (
            label_a, len(seq_a), label_b, len(seq_b),
            seq_a[n] if n < len(seq_a) else None, seq_b[n] if n < len(seq_b) else None)
    return None
