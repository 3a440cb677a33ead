"""Shared fixture for kvfs mount-level integration tests (python3 stdlib only).

Usage:

    from kvfs_fixture import mounted, Backing

    with mounted() as (mnt, backing, proc):          # fresh temp backing + index dir
        ...
    b = Backing()                                      # keep one backing + index across remounts
    with mounted(backing=b) as (mnt, _, _): ...
    with mounted(backing=b) as (mnt, _, _): ...        # remount: same data
    b.cleanup()

mounted(**flags) runs `$KVFS_BINARY mount MNT --backing DIR --index-dir IDX --foreground ...` in a
subprocess, waits until MNT is a FUSE mount, yields (mountpoint, backing_dir, proc) and ALWAYS unmounts
(fusermount3 -u, falling back to a lazy unmount) and reaps/kills only the pid it started.

Keyword flags become command-line flags: threads=4 -> `--threads 4`, direct_io=True -> `--direct-io`,
o="allow_other" -> `-o allow_other`, extra_args=[...] are appended verbatim.

Environment: KVFS_BINARY (path of the kvfs binary; default: build/tools/kvfs next to this repo),
KVFS_TEST_KEEP=1 keeps temp dirs for debugging, KVFS_TEST_LOG=1 streams the daemon's stderr.
"""
import contextlib
import errno
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def kvfs_binary():
    b = os.environ.get("KVFS_BINARY")
    if b:
        return b
    for d in ("build", "build-fuse"):
        p = os.path.join(REPO, d, "tools", "kvfs")
        if os.path.exists(p):
            return p
    raise RuntimeError("set KVFS_BINARY to the kvfs binary")


def fuse_available():
    return os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None


def is_mounted(path):
    """True when `path` is a mount point listed in /proc/self/mountinfo. Never accesses `path` itself
    (only its parent): a FUSE mount whose daemon does not answer (yet) would block the caller."""
    path = os.path.normpath(os.path.abspath(path))
    path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mp = fields[4].encode().decode("unicode_escape")
            if mp == path:
                return True
    return False


class Backing:
    """A temp backing dir + index dir that outlive one mount (for remount tests)."""

    def __init__(self, prefix="kvfs-test-"):
        self.root = tempfile.mkdtemp(prefix=prefix)
        self.backing = os.path.join(self.root, "backing")
        self.index = os.path.join(self.root, "index")
        self.mnt = os.path.join(self.root, "mnt")
        os.mkdir(self.backing)
        os.mkdir(self.mnt)

    def cleanup(self):
        if os.environ.get("KVFS_TEST_KEEP"):
            sys.stderr.write("kvfs_fixture: keeping %s\n" % self.root)
            return
        if is_mounted(self.mnt):
            unmount(self.mnt)
        shutil.rmtree(self.root, ignore_errors=True)


def is_served(path):
    """True when `path` is mounted and its daemon answers: kvfs mounts FUSE before it opens its store, and
    a stat of the mountpoint waits until the store is open (it fails if the daemon gives up instead)."""
    if not is_mounted(path):
        return False
    try:
        os.stat(path)
    except OSError:
        return False
    return is_mounted(path)


def unmount(mnt, timeout=20.0):
    """fusermount3 -u with retries (EBUSY while a test's fd closes), then a lazy unmount."""
    deadline = time.time() + timeout
    while is_mounted(mnt):
        r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
        if r.returncode == 0:
            break
        if time.time() > deadline:
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
            break
        time.sleep(0.1)


def flags_to_args(flags):
    args = []
    for k, v in flags.items():
        if k == "extra_args":
            args += list(v)
            continue
        if k == "o":
            args += ["-o", str(v)]
            continue
        name = "--" + k.replace("_", "-")
        if v is True:
            args.append(name)
        elif v is False or v is None:
            continue
        else:
            args += [name, str(v)]
    return args


_log_seq = itertools.count()


def daemon_log(proc, tail=60):
    """The last `tail` lines the daemon of `proc` (started by mounted()) logged so far: for a failure
    message. Empty with KVFS_TEST_LOG=1 (the log went to the test's stderr)."""
    path = getattr(proc, "log_path", None)
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-tail:])


@contextlib.contextmanager
def mounted(backing=None, timeout=30.0, env=None, **flags):
    """Mount kvfs in the foreground; yield (mountpoint, backing_dir, proc) once it serves (store open);
    always unmount. env: variables added to the daemon's environment (the KVFS_TEST_* knobs)."""
    own = backing is None
    b = backing or Backing()
    cmd = [kvfs_binary(), "mount", b.mnt, "--backing", b.backing, "--index-dir", b.index,
           "--foreground"] + flags_to_args(flags)
    # The daemon's log goes to a file in the backing's temp dir (proc.log_path), read back through
    # proc.stderr (from its start: what a pipe read after the exit gives). Not a pipe: nobody reads one
    # while the mount serves, and a daemon that logged 64 KiB would block in write(2).
    log_path = None
    stderr = None
    if not os.environ.get("KVFS_TEST_LOG"):
        log_dir = getattr(b, "root", None) or os.path.dirname(b.mnt)
        log_path = os.path.join(log_dir, "daemon-%d.log" % next(_log_seq))
        stderr = open(log_path, "wb")
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr,
                                env=dict(os.environ, **env) if env else None)
    finally:
        if stderr:
            stderr.close()
    proc.log_path = log_path
    if log_path:
        proc.stderr = open(log_path, "rb")
    try:
        deadline = time.time() + timeout
        while not is_served(b.mnt):
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError("kvfs mount exited with %s: %s" % (proc.returncode, err.strip()))
            if time.time() > deadline:
                raise RuntimeError("kvfs mount did not appear within %.0fs" % timeout)
            time.sleep(0.02)
        yield b.mnt, b.backing, proc
    finally:
        try:
            unmount(b.mnt)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)  # only the pid we started
                proc.wait()
        finally:
            if proc.stderr:
                proc.stderr.close()
            if own:
                b.cleanup()


def pid_alive(pid):
    """True while `pid` runs: False once it has exited, also while it is a zombie nobody reaped yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def wait_gone(pid, timeout=30.0):
    """Waits up to `timeout` s for `pid` to exit; True if it did."""
    deadline = time.time() + timeout
    while pid_alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    return not pid_alive(pid)


def run_kvfs(*args, timeout=60):
    """Runs `kvfs ARGS...`; returns CompletedProcess (text)."""
    return subprocess.run([kvfs_binary()] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout)


def stats(mnt):
    """The daemon's stats (the JSON of the virtual xattr user.kvfs.stats on the mount root)."""
    return json.loads(os.getxattr(mnt, "user.kvfs.stats").decode())


def write_file(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644):
    fd = os.open(path, flags, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def read_file(path, flags=os.O_RDONLY):
    fd = os.open(path, flags)
    try:
        chunks = []
        while True:
            c = os.read(fd, 1 << 20)
            if not c:
                break
            chunks.append(c)
        return b"".join(chunks)
    finally:
        os.close(fd)


def aligned_buffer(size, fill=None):
    """A page-aligned anonymous mmap buffer (what O_DIRECT needs); fill: bytes to copy in."""
    import mmap
    buf = mmap.mmap(-1, max(size, 1))
    if fill is not None:
        buf[:len(fill)] = fill
    return buf


def skip_unless_fuse(testcase_cls):
    import unittest
    if not fuse_available():
        return unittest.skip("needs /dev/fuse and fusermount3")(testcase_cls)
    return testcase_cls


class SharedBackingCase(unittest.TestCase):
    """Several nodes over one backing directory in a temp root: node(name) gives the paths of one node
    (backing, index, mnt, root) for mounted(); mounts go on self.stack, closed (unmounted) in tearDown.
    KVFS_TEST_KEEP keeps the root."""

    PREFIX = "kvfs-nodes-"

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix=self.PREFIX)
        self.backing = os.path.join(self.root, "backing")
        os.mkdir(self.backing)
        self.stack = contextlib.ExitStack()

    def tearDown(self):
        self.stack.close()
        if os.environ.get("KVFS_TEST_KEEP"):
            sys.stderr.write("%s: keeping %s\n" % (type(self).__name__, self.root))
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def node(self, name):
        class Spec:
            pass
        s = Spec()
        s.backing = self.backing
        s.index = os.path.join(self.root, "idx-" + name)
        s.mnt = os.path.join(self.root, "mnt-" + name)
        s.root = self.root
        os.makedirs(s.mnt, exist_ok=True)
        return s
