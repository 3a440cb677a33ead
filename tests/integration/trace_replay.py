#!/usr/bin/env python3
"""Replays a kvfs connector syscall trace (tests/data/traces/README.md, "kvfs connector trace v1")
against a directory and records every observable result. python3 stdlib only.

Usage:  trace_replay.py TRACE EMPTY_DIR [--concurrent] [--quiet]
Exit status 0 when every result matches the recording (see "compared with the recording" below).

What a replay does
  - Substitutes EMPTY_DIR for $ROOT and re-executes every operation with real syscalls, in file order
    (sequential mode, which the trace guarantees reproduces every recorded result) or with one thread per
    recorded tid and a barrier at each `# phase:` marker (concurrent mode: racing calls may then differ).
  - Every data buffer is a page-aligned anonymous mmap (one per thread, reused), so O_DIRECT reads and
    writes work. read/readv use readv(2) and pread64 uses preadv(2) into that buffer (os.read would pass
    an unaligned buffer); write/pwrite64/writev use write(2)/pwrite(2)/writev(2) from it.
  - Write content: pattern blkN[@OFF] = little-endian uint64 words, word k = (N << 32) + k, counted from
    offset 0 of the file; `zero`; `b64:`. Read content is hashed (sha256) and checked against `expect=`.
  - Ops: the table in tests/data/traces/README.md ("Format"); openat/mkdirat/faccessat also take
    `hDIR NAME` (relative to a directory handle), link is link(2), fallocate is fallocate(2).

Observations (`Replayer.observations`): one tuple per op, (line number, tid, op, result) where result is
the trace's notation: a number, a handle `hN`, an errno name, `0 type=reg size=N` / `0 type=dir` for the
stat family (directory sizes are not part of the contract), `N sha256=<hex>` for reads, hex for F_GETFL,
`bsize=N` for statfs, and `R accept=E` for an op recorded `-> R accept=E` that gave R or E (both are
correct, e.g. fallocate's EOPNOTSUPP). Two replays of one trace are equivalent when their observation
lists are equal.

Compared with the recording (`Replayer.mismatches`): every result, except F_GETFL values, directory sizes
and statfs values (they depend on the file system, as the trace README says); read content must equal the
expected pattern. In concurrent mode lookups that race with other threads (stat, lstat, access, mkdir)
are not compared with the recording.
"""

import argparse
import array
import base64
import ctypes
import errno
import fcntl
import hashlib
import os
import stat as st
import sys
import termios
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from kvfs_target import access_errno, aligned_buffer  # noqa: E402

DATA_OPS = {"read", "readv", "pread64", "write", "writev", "pwrite64"}
RACY_LOOKUPS = {"stat", "lstat", "access", "mkdir", "faccessat", "mkdirat"}
# Ops that create, rename or remove the names they are given (for the concurrent mode's path order).
NAME_CHANGES = {"mkdir", "mkdirat", "rmdir", "rename", "unlink", "link"}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int
_libc.faccessat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
_libc.faccessat.restype = ctypes.c_int
FALLOC_FLAGS = {"FALLOC_FL_KEEP_SIZE": 0x01, "FALLOC_FL_PUNCH_HOLE": 0x02, "FALLOC_FL_COLLAPSE_RANGE": 0x08,
                "FALLOC_FL_ZERO_RANGE": 0x10, "FALLOC_FL_INSERT_RANGE": 0x20, "FALLOC_FL_UNSHARE_RANGE": 0x40}
ACCESS_MODES = {"F_OK": os.F_OK, "R_OK": os.R_OK, "W_OK": os.W_OK, "X_OK": os.X_OK}


def _libc_result(r):
    if r == 0:
        return "0"
    e = ctypes.get_errno()
    return errno.errorcode.get(e, str(e))


def _falloc_mode(text):
    v = 0
    for name in text.split("|"):
        v |= FALLOC_FLAGS[name] if name in FALLOC_FLAGS else int(name, 0)
    return v


def _access_mode(text):
    v = 0
    for m in text.split("|"):
        v |= ACCESS_MODES[m]
    return v


class TraceOp:
    __slots__ = ("lineno", "tid", "name", "args", "result", "kv", "phase")

    def __init__(self, lineno, tid, name, args, result, kv, phase):
        self.lineno, self.tid, self.name, self.args = lineno, tid, name, args
        self.result, self.kv, self.phase = result, kv, phase

    def __repr__(self):
        return "line %d: %s %s %s -> %s%s" % (
            self.lineno, self.tid, self.name, " ".join(_short(a) for a in self.args), self.result,
            "".join(" %s=%s" % (k, _short(v)) for k, v in self.kv.items()))


def _short(s, n=96):
    return s if len(s) <= n else s[:n] + "..."


def parse_trace(path):
    """Returns (phases in order, [TraceOp])."""
    ops, phases, phase = [], [], None
    with open(path, "r") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if line.startswith("#"):
                if line.startswith("# phase:"):
                    phase = line.split(":", 1)[1].strip()
                    phases.append(phase)
                continue
            body = line.split("  # ", 1)[0]
            if " -> " not in body:
                raise ValueError("%s:%d: no ' -> ' in %r" % (path, lineno, line))
            lhs, rhs = body.rsplit(" -> ", 1)
            toks = lhs.split()
            tid, name, args = toks[0], toks[1], toks[2:]
            kv = {}
            plain_args = []
            for a in args:
                if a.startswith("pattern=") or a.startswith("expect="):
                    k, v = a.split("=", 1)
                    kv[k] = v
                else:
                    plain_args.append(a)
            rtoks = rhs.split()
            result = rtoks[0]
            for t in rtoks[1:]:
                k, _, v = t.partition("=")
                kv[k] = v
            ops.append(TraceOp(lineno, tid, name, plain_args, result, kv, phase))
    return phases, ops


# ------------------------------------------------------------------------------------------------
# Content patterns.

_TEMPLATE = [b""]  # little-endian uint64 words k = 0, 1, 2, ... (blk0 from offset 0), grown on demand
_TEMPLATE_LOCK = threading.Lock()


def _template(nbytes):
    """At least `nbytes` of the blk0 sequence (built once per process, then sliced)."""
    with _TEMPLATE_LOCK:
        t = _TEMPLATE[0]
        if len(t) < nbytes:
            words = array.array("Q", range(max(nbytes, 2 * len(t)) // 8 + 1))
            if sys.byteorder != "little":
                words.byteswap()
            t = _TEMPLATE[0] = words.tobytes()
        return t


def fill_pattern(dst, spec, length, skip=0):
    """Writes bytes [OFF + skip, OFF + skip + length) of `spec` (blkN[@OFF] | zero[@OFF] | b64:...) into
    dst[:length] (a writable buffer: memoryview, mmap, bytearray)."""
    if spec.startswith("b64:"):
        data = base64.b64decode(spec[4:])
        if skip == 0 and len(data) != length:
            raise ValueError("b64 pattern has %d bytes, op has %d" % (len(data), length))
        dst[:length] = data[skip:skip + length]
        return
    base, _, off = spec.partition("@")
    off = (int(off) if off else 0) + skip
    if base == "zero":
        dst[:length] = bytes(length)
        return
    if not base.startswith("blk"):
        raise ValueError("unsupported pattern %r" % spec)
    n = int(base[3:])
    if not 0 <= n < (1 << 32):
        raise ValueError("block number out of range in %r" % spec)
    if off % 8:
        # Rare (unaligned start): build whole words, then cut.
        first = off // 8
        tmp = bytearray(((off + length + 7) // 8 - first) * 8)
        fill_pattern(tmp, "blk%d@%d" % (n, first * 8), len(tmp))
        dst[:length] = tmp[off - first * 8:off - first * 8 + length]
        return
    # Word k = (n << 32) + k with k < 2**32: the low 4 bytes of each word come from the blk0 template,
    # the high 4 bytes are n's (little-endian), set with strided slice assignments.
    t = _template(off + length)
    dst[:length] = memoryview(t)[off:off + length]
    for j in range(4):
        b = (n >> (8 * j)) & 0xFF
        if b:
            cnt = len(range(4 + j, length, 8))
            if cnt:
                dst[4 + j:length:8] = bytes((b,)) * cnt


def pattern_bytes(spec, length):
    """Bytes of `spec` (blkN[@OFF] | zero[@OFF] | b64:...) for an op of `length` bytes."""
    out = bytearray(length)
    fill_pattern(out, spec, length)
    return bytes(out)


class PatternCache:
    """sha256 of patterns, so a read is verified without regenerating the pattern."""

    def __init__(self):
        self._sha = {}
        self._lock = threading.Lock()

    def sha(self, spec, length, data=None):
        """sha256 hex of `length` bytes of `spec`; `data`: those bytes (or a list of buffers holding them
        in order), when the caller has them."""
        key = (spec if not spec.startswith("b64:") else hashlib.sha1(spec.encode()).hexdigest(), length)
        with self._lock:
            h = self._sha.get(key)
        if h is None:
            if data is None:
                data = pattern_bytes(spec, length)
            hs = hashlib.sha256()
            for piece in (data if isinstance(data, list) else [data]):
                hs.update(piece)
            h = hs.hexdigest()
            with self._lock:
                self._sha[key] = h
        return h


# ------------------------------------------------------------------------------------------------
# Replay.

def _flags(text):
    v = 0
    for name in text.split("|"):
        if name in ("O_RDONLY", "0"):
            continue
        if name.startswith("0x"):
            v |= int(name, 16)
            continue
        if not hasattr(os, name):
            raise ValueError("unknown open flag %s" % name)
        v |= getattr(os, name)
    return v


def _stat_result(s):
    if st.S_ISDIR(s.st_mode):
        return "0 type=dir"
    if st.S_ISREG(s.st_mode):
        return "0 type=reg size=%d" % s.st_size
    if st.S_ISLNK(s.st_mode):
        return "0 type=lnk size=%d" % s.st_size
    return "0 type=other"


def _normalize_recorded(op):
    """The recorded result in observation notation (what a correct replay must produce)."""
    r = op.result
    if "accept" in op.kv:
        return "%s accept=%s" % (r, op.kv["accept"])
    if op.name in ("stat", "lstat", "fstat") and r == "0":
        t = op.kv.get("type")
        if t == "dir":
            return "0 type=dir"
        if t == "reg":
            return "0 type=reg size=%s" % op.kv.get("size")
        return "0 type=%s size=%s" % (t, op.kv.get("size"))
    return r


class Replayer:
    """Replays parsed ops under `root`. After run(): observations, mismatches, handles_left."""

    def __init__(self, root, patterns=None):
        self.root = root.rstrip("/") or "/"
        self.patterns = patterns or PatternCache()
        self.fds = {}            # "hN" -> real fd
        self.lock = threading.Lock()
        self.observations = []   # (lineno, tid, op, result)
        self.mismatches = []     # human-readable
        self.handles_left = []
        self._local = threading.local()

    # -- helpers
    def _path(self, p):
        if p == "$ROOT":
            return self.root
        if p.startswith("$ROOT/"):
            return os.path.join(self.root, p[len("$ROOT/"):])
        raise ValueError("path outside $ROOT: %r" % p)

    def _at(self, a):
        """(dir fd, path) of a path argument: `$ROOT/...` (dir fd AT_FDCWD) or `hDIR NAME` (2 args)."""
        if a[0].startswith("h"):
            return self._fd(a[0]), a[1]
        return None, self._path(a[0])

    def _buffer(self, size):
        """This thread's page-aligned scratch buffer of at least `size` bytes (reused: no page faults
        and no munmap per op)."""
        b = getattr(self._local, "buf", None)
        if b is None or len(b) < size:
            if b is not None:
                b.close()
            b = self._local.buf = aligned_buffer(max(size, 1 << 20))
        return b

    def _fd(self, h):
        with self.lock:
            fd = self.fds.get(h)
        if fd is None:
            raise _NoHandle(h)
        return fd

    def _bind(self, handle_name, fd):
        with self.lock:
            if handle_name.startswith("h") and handle_name not in self.fds:
                self.fds[handle_name] = fd
                return True
        return False

    # -- one op; returns the observed result string
    def execute(self, op):
        a = op.args
        n = op.name
        try:
            if n == "openat":
                dfd, path = self._at(a)
                rest = a[2:] if dfd is not None else a[1:]
                flags = _flags(rest[0])
                mode = int(rest[1], 8) if len(rest) > 1 else 0o666
                fd = os.open(path, flags, mode, dir_fd=dfd)
                if op.result.startswith("h") and self._bind(op.result, fd):
                    return op.result
                # The recording says this open failed (or the handle is taken): keep no fd.
                os.close(fd)
                return "h?"
            if n == "close":
                fd = self._fd(a[0])
                with self.lock:
                    self.fds.pop(a[0], None)
                os.close(fd)
                return "0"
            if n == "stat":
                return _stat_result(os.stat(self._path(a[0])))
            if n == "lstat":
                return _stat_result(os.lstat(self._path(a[0])))
            if n == "fstat":
                return _stat_result(os.fstat(self._fd(a[0])))
            if n == "access":
                r = access_errno(self._path(a[0]), _access_mode(a[1]))
                return str(r)
            if n == "faccessat":
                return _libc_result(_libc.faccessat(self._fd(a[0]), os.fsencode(a[1]), _access_mode(a[2]), 0))
            if n == "mkdir":
                os.mkdir(self._path(a[0]), int(a[1], 8) if len(a) > 1 else 0o777)
                return "0"
            if n == "mkdirat":
                os.mkdir(a[1], int(a[2], 8) if len(a) > 2 else 0o777, dir_fd=self._fd(a[0]))
                return "0"
            if n == "link":
                # link(2) does not follow a symlink source (linkat flags 0).
                os.link(self._path(a[0]), self._path(a[1]), follow_symlinks=False)
                return "0"
            if n == "rmdir":
                os.rmdir(self._path(a[0]))
                return "0"
            if n == "unlink":
                os.unlink(self._path(a[0]))
                return "0"
            if n == "rename":
                os.rename(self._path(a[0]), self._path(a[1]))
                return "0"
            if n in ("statfs", "fstatfs"):
                s = os.statvfs(self._path(a[0]) if n == "statfs" else self._fd(a[0]))
                return "bsize=%d" % s.f_bsize
            if n in ("write", "pwrite64", "writev"):
                return self._write(op)
            if n in ("read", "readv", "pread64"):
                return self._read(op)
            if n == "lseek":
                whence = {"SEEK_SET": os.SEEK_SET, "SEEK_CUR": os.SEEK_CUR, "SEEK_END": os.SEEK_END}[a[2]]
                return str(os.lseek(self._fd(a[0]), int(a[1]), whence))
            if n == "fcntl":
                fd = self._fd(a[0])
                cmd = a[1]
                if cmd in ("F_DUPFD", "F_DUPFD_CLOEXEC"):
                    nfd = fcntl.fcntl(fd, getattr(fcntl, cmd), int(a[2]) if len(a) > 2 else 0)
                    if op.result.startswith("h") and self._bind(op.result, nfd):
                        return op.result
                    os.close(nfd)
                    return "h?"
                if cmd == "F_GETFL":
                    return hex(fcntl.fcntl(fd, fcntl.F_GETFL))
                if cmd == "F_GETFD":
                    return str(fcntl.fcntl(fd, fcntl.F_GETFD))
                if cmd in ("F_SETFL", "F_SETFD"):
                    return str(fcntl.fcntl(fd, getattr(fcntl, cmd), int(a[2], 0)))
                raise NotImplementedError("fcntl %s" % cmd)
            if n == "dup":
                nfd = os.dup(self._fd(a[0]))
                if op.result.startswith("h") and self._bind(op.result, nfd):
                    return op.result
                os.close(nfd)
                return "h?"
            if n == "ioctl":
                req = getattr(termios, a[1])
                fcntl.ioctl(self._fd(a[0]), req, bytes(64))
                return "0"
            if n == "ftruncate":
                os.ftruncate(self._fd(a[0]), int(a[1]))
                return "0"
            if n == "truncate":
                os.truncate(self._path(a[0]), int(a[1]))
                return "0"
            if n == "fsync":
                os.fsync(self._fd(a[0]))
                return "0"
            if n == "fallocate":
                return _libc_result(_libc.fallocate(self._fd(a[0]), _falloc_mode(a[1]), int(a[2]), int(a[3])))
            if n == "fdatasync":
                os.fdatasync(self._fd(a[0]))
                return "0"
            raise NotImplementedError("op %s (line %d)" % (n, op.lineno))
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))
        except _NoHandle as e:
            return "NOHANDLE(%s)" % e.args[0]

    def _lengths(self, op):
        if op.name == "writev" or op.name == "readv":
            return [int(x) for x in op.args[1].strip("[]").split(",") if x]
        return [int(op.args[1])]

    @staticmethod
    def _layout(lens):
        """Page-aligned offsets of the iovecs in one scratch buffer, and the buffer size."""
        offs, pos = [], 0
        for ln in lens:
            offs.append(pos)
            pos += (ln + 4095) // 4096 * 4096
        return offs, pos

    def _write(self, op):
        fd = self._fd(op.args[0])
        lens = self._lengths(op)
        spec = op.kv["pattern"]
        offs, size = self._layout(lens)
        buf = self._buffer(size)
        mv = memoryview(buf)
        views, pos = [], 0
        try:
            for o, ln in zip(offs, lens):
                v = mv[o:o + ln]
                fill_pattern(v, spec, ln, pos)
                views.append(v)
                pos += ln
            self.patterns.sha(spec, pos, views)
            if op.name == "write":
                r = os.write(fd, views[0])
            elif op.name == "pwrite64":
                r = os.pwrite(fd, views[0], int(op.args[2]))
            else:
                r = os.writev(fd, views)
            return str(r)
        finally:
            for v in views:
                v.release()
            mv.release()

    def _read(self, op):
        fd = self._fd(op.args[0])
        lens = self._lengths(op)
        offs, size = self._layout(lens)
        buf = self._buffer(size)
        mv = memoryview(buf)
        views = [mv[o:o + ln] for o, ln in zip(offs, lens)]
        try:
            if op.name == "pread64":
                r = os.preadv(fd, views, int(op.args[2]))
            else:
                r = os.readv(fd, views)
            h = hashlib.sha256()
            left = r
            for v in views:
                take = min(left, len(v))
                h.update(v[:take])
                left -= take
            return "%d sha256=%s" % (r, h.hexdigest())
        finally:
            for v in views:
                v.release()
            mv.release()

    def _check(self, op, observed, concurrent):
        if concurrent and op.name in RACY_LOOKUPS:
            return
        expected = _normalize_recorded(op)
        if op.name == "fcntl" and op.args[1] == "F_GETFL":
            return  # fs-dependent per the trace README
        if op.name in ("statfs", "fstatfs"):
            return
        if op.name in ("read", "readv", "pread64"):
            want_n = op.result
            got_n = observed.split()[0]
            spec = op.kv.get("expect")
            if got_n != want_n:
                self.mismatches.append("%r: got %s" % (op, observed))
                return
            if spec and spec != "unknown" and want_n.isdigit():
                want_sha = self.patterns.sha(spec, int(want_n))
                if observed.split("sha256=")[1] != want_sha:
                    self.mismatches.append("%r: content differs from %s (got %s)" % (op, spec, observed))
            return
        if observed != expected:
            self.mismatches.append("%r: got %s" % (op, observed))

    def run_op(self, op, concurrent=False):
        observed = self.execute(op)
        if "accept" in op.kv and observed in [op.result] + op.kv["accept"].split(","):
            # An accepted alternative (fallocate: 0 or EOPNOTSUPP) is recorded as the rule itself, so that
            # two correct file systems give equal observations.
            observed = _normalize_recorded(op)
        rec = (op.lineno, op.tid, op.name, observed)
        with self.lock:
            self.observations.append(rec)
        self._check(op, observed, concurrent)
        return observed

    def run(self, ops):
        for op in ops:
            self.run_op(op)
        self._close_leftovers()
        return self

    def run_concurrent(self, ops, phases):
        """One thread per tid, a barrier between phases (the driver waited for its jobs there).

        Cross-thread causality is kept where the recorded control flow depends on it: an op that names a
        path waits until every earlier (file-order) op of another thread that created, renamed or removed
        that path or one of its ancestors has completed (e.g. thread A's mkdir of `<M>_r0` that thread B's
        recorded `stat <M>_r0 -> 0` relied on). Waiting only on earlier ops keeps this deadlock-free.
        """
        tids = sorted({op.tid for op in ops}, key=lambda t: int(t[1:]))
        done = [threading.Event() for _ in ops]
        deps = _path_dependencies(ops)
        by_phase = {}
        order = []
        for i, op in enumerate(ops):
            if op.phase not in by_phase:
                by_phase[op.phase] = {}
                order.append(op.phase)
            by_phase[op.phase].setdefault(op.tid, []).append(i)
        errors = []
        for ph in order:
            per_tid = by_phase[ph]

            def worker(seq):
                try:
                    for i in seq:
                        for d in deps[i]:
                            if not done[d].wait(120):
                                raise RuntimeError("line %d waited 120 s for line %d" % (
                                    ops[i].lineno, ops[d].lineno))
                        try:
                            self.run_op(ops[i], concurrent=True)
                        finally:
                            done[i].set()
                except Exception as e:  # pragma: no cover
                    errors.append(repr(e))
                    for i in seq:
                        done[i].set()

            threads = [threading.Thread(target=worker, args=(per_tid[t],)) for t in tids if t in per_tid]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if errors:
            raise RuntimeError("; ".join(errors))
        self._close_leftovers()
        # Observations of one tid are in program order; sort the whole list deterministically.
        self.observations.sort()
        return self

    def _close_leftovers(self):
        with self.lock:
            left = sorted(self.fds.items())
            self.fds.clear()
        for h, fd in left:
            self.handles_left.append(h)
            try:
                os.close(fd)
            except OSError:
                pass


def _op_paths(op, handle_paths):
    """The `$ROOT/...` names an op refers to; `hDIR NAME` pairs resolved through the directory handle's
    path (handle_paths: handle -> path it was opened with)."""
    out = [a for a in op.args if a == "$ROOT" or a.startswith("$ROOT/")]
    if op.args and op.args[0].startswith("h") and len(op.args) > 1 and op.name in (
            "openat", "mkdirat", "faccessat"):
        d = handle_paths.get(op.args[0])
        if d is not None:
            out.append(d + "/" + op.args[1])
    return out


def _ancestors(p):
    out = [p]
    while "/" in p:
        p = p.rsplit("/", 1)[0]
        out.append(p)
    return out


def _path_dependencies(ops):
    """For each op, indices of earlier ops of other threads that changed its path or an ancestor."""
    last_change = {}  # path -> index of the last op that created/renamed/removed it
    handle_paths = {}
    deps = []
    for i, op in enumerate(ops):
        paths = _op_paths(op, handle_paths)
        d = set()
        for p in paths:
            for a in _ancestors(p):
                j = last_change.get(a)
                if j is not None and ops[j].tid != op.tid:
                    d.add(j)
        deps.append(sorted(d))
        if op.name == "openat" and op.result.startswith("h") and paths:
            handle_paths[op.result] = paths[-1]
        flags = op.args[2] if op.name == "openat" and op.args[0].startswith("h") else (
            op.args[1] if op.name == "openat" else "")
        if op.name in NAME_CHANGES or "O_CREAT" in flags:
            for p in paths:
                last_change[p] = i
    return deps


class _NoHandle(Exception):
    pass


def replay(trace_path, root, concurrent=False, patterns=None):
    phases, ops = parse_trace(trace_path)
    r = Replayer(root, patterns)
    if concurrent:
        r.run_concurrent(ops, phases)
    else:
        r.run(ops)
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("dir")
    ap.add_argument("--concurrent", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    r = replay(args.trace, args.dir, args.concurrent)
    if not args.quiet:
        for m in r.mismatches[:50]:
            print("MISMATCH", m)
    print("%s: %d ops, %d mismatches, %d handles left open" % (
        os.path.basename(args.trace), len(r.observations), len(r.mismatches), len(r.handles_left)))
    return 1 if r.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
