#!/usr/bin/env python3
"""Several kvfs daemons over ONE backing directory (issue 7, docs/design.md §2 and §5). python3 stdlib only.

Every daemon has its own --node-id, --index-dir and mountpoint; they share only the backing directory
(on this machine a local directory; tests/nfs/multinode_nfs.sh runs the same checks with each daemon on
its own NFS client). What is asserted:

  store/load        A writes a chunk, B (and C) read it byte-identical
  rename            a rename on B is visible on A (old name ENOENT, new name the same bytes)
  unlink            an unlink on B of A's file hides it on A and C: stat and open are ENOENT, never EIO
  lww               A and B write the same names concurrently: same bytes (content-addressed) everywhere;
                    with different bytes every node converges to one writer's whole value
  refusal           a second mount with a node id whose heartbeat is fresh exits 2 with a clear message
  takeover          SIGKILL + restart of a node: new generation, only new-generation files written,
                    old files untouched; peers read both old and new files
  visibility        A closes a chunk -> B's stat succeeds: p50/p99 over KVFS_MN_CHUNKS (50) chunks,
                    printed as a measurement (issue 7's target: p99 < 2 x poll + group commit); the test
                    asserts only that every chunk becomes visible within VISIBLE_S
  node cmd          `kvfs node list | retire | purge`: states, refusals (exit 2), purge makes the node's
                    files ENOENT on peers, and a later mount under the purged id works
  case 2            publish by replace (os.replace on A), B loops open/read: after the first success never
                    ENOENT, every read one complete published version
  case 5            A replaces f every 0.5 s (copy + append + mv, with a capacity that makes A drop
                    segments), B checksums f every 0.1 s: never ESTALE/EIO, every checksum published

Environment:
  KVFS_MN_CASE2_SECONDS  (default 10; design §11: 60)   KVFS_MN_CASE5_SECONDS (default 15; design §11: 300)
  KVFS_MN_LONG=1         both at the docs/design.md §11 durations
  KVFS_MN_CHUNKS         visibility samples (default 50)
  KVFS_MN_POLL_MS        --peer-poll-ms of every daemon (default 200, the kvfs default)
  plus kvfs_fixture's KVFS_BINARY, KVFS_TEST_KEEP, KVFS_TEST_LOG.
"""

import contextlib
import errno
import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvfs_fixture as kf  # noqa: E402

LONG = bool(os.environ.get("KVFS_MN_LONG"))
CASE2_S = float(os.environ.get("KVFS_MN_CASE2_SECONDS", "60" if LONG else "10"))
CASE5_S = float(os.environ.get("KVFS_MN_CASE5_SECONDS", "300" if LONG else "15"))
CHUNKS = int(os.environ.get("KVFS_MN_CHUNKS", "50"))
POLL_MS = int(os.environ.get("KVFS_MN_POLL_MS", "200"))
GC_MS = 20
# pause between visibility samples: "lo,hi" ms, uniform (default 0,300: not in phase with the poll timer)
GAP_MS = [float(x) for x in os.environ.get("KVFS_MN_GAP_MS", "0,300").split(",")]
VISIBLE_S = 10.0  # how long a test waits for a peer's change before calling it a failure


def sha(b):
    return hashlib.sha256(b).hexdigest()


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) else repr(e)


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


class NodeSpec:
    """One node's private dirs over a shared backing dir (what kvfs_fixture.mounted needs)."""

    def __init__(self, root, backing, name):
        self.name = name
        self.backing = backing
        self.index = os.path.join(root, "idx-" + name)
        self.mnt = os.path.join(root, "mnt-" + name)
        os.makedirs(self.mnt, exist_ok=True)


def wait_for(fn, timeout=VISIBLE_S, interval=0.005):
    """Calls fn() until it returns a true value; returns (value, seconds) or (None, timeout)."""
    t0 = time.monotonic()
    while True:
        v = fn()
        if v:
            return v, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            return None, time.monotonic() - t0
        time.sleep(interval)


def try_read(path):
    """(bytes, None) or (None, errno name)."""
    try:
        return kf.read_file(path), None
    except OSError as e:
        return None, errname(e)


def try_stat(path):
    try:
        os.stat(path)
        return None
    except OSError as e:
        return errname(e)


def fsyncdir(d):
    """fsync of a directory: kvfs runs its deferred commits now."""
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def node_files(backing, node):
    """{relative path: (size, sha)} of a node directory's journal and segment files."""
    out = {}
    d = os.path.join(backing, ".kvfs", "v1", "nodes", node)
    for sub in ("", "seg"):
        dd = os.path.join(d, sub)
        if not os.path.isdir(dd):
            continue
        for n in sorted(os.listdir(dd)):
            p = os.path.join(dd, n)
            if os.path.isfile(p) and (n.startswith("journal-") or n.endswith(".kseg")):
                with open(p, "rb") as f:
                    data = f.read()
                out[os.path.join(sub, n)] = (len(data), sha(data))
    return out


def owner_generation(backing, node):
    with open(os.path.join(backing, ".kvfs", "v1", "nodes", node, "OWNER")) as f:
        for line in f:
            if line.startswith("generation="):
                return int(line.split("=", 1)[1])
    return None


def file_generation(relpath):
    base = os.path.basename(relpath)
    if base.startswith("journal-"):
        return int(base.split("-")[1])
    return int(base.split("-")[0])


META_KINDS = ("open", "close", "mkdir", "rename", "remove", "stat", "list")  # backing metadata operations


class MissingLookups:
    """misses(seconds): stats a new missing name under mnt every 10 ms (each lookup miss asks the peer
    thread for an early poll); .count names so far."""

    def __init__(self, test, mnt):
        self.test, self.mnt, self.count = test, mnt, 0

    def __call__(self, seconds):
        t = time.monotonic()
        while time.monotonic() - t < seconds:
            self.test.assertFalse(os.path.exists(os.path.join(self.mnt, "miss-%d" % self.count)))
            self.count += 1
            time.sleep(0.01)


@kf.skip_unless_fuse
class MultiNodeTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="kvfs-mn-")
        self.backing = os.path.join(self.root, "backing")
        os.mkdir(self.backing)
        self.stack = contextlib.ExitStack()

    def tearDown(self):
        self.stack.close()  # unmounts every node (the fixture reaps only the pids it started)
        if os.environ.get("KVFS_TEST_KEEP"):
            sys.stderr.write("multinode_test: keeping %s\n" % self.root)
        else:
            import shutil
            shutil.rmtree(self.root, ignore_errors=True)

    def spec(self, name):
        return NodeSpec(self.root, self.backing, name)

    def mount(self, name, index=None, **flags):
        """Mounts node `name` (index: another index dir); returns (mountpoint, proc). Unmounted in tearDown."""
        flags.setdefault("peer_poll_ms", POLL_MS)
        flags.setdefault("group_commit_ms", GC_MS)
        flags.setdefault("o", "default_permissions")
        spec = self.spec(name)
        if index:
            spec.index = os.path.join(self.root, index)
        mnt, _, proc = self.stack.enter_context(kf.mounted(backing=spec, node_id=name, **flags))
        return mnt, proc

    # ---- helpers that turn a wrong observation into a precise failure ----

    def expect_bytes(self, node, path, want, what):
        got, _ = wait_for(lambda: try_read(path)[0] is not None)
        data, err = try_read(path)
        if data is None:
            self.fail("%s: read %s on node %s: expected %d bytes (sha %s), got %s after %.1f s"
                      % (what, path, node, len(want), sha(want)[:12], err, VISIBLE_S))
        if data != want:
            self.fail("%s: read %s on node %s: expected %d bytes sha %s, got %d bytes sha %s"
                      % (what, path, node, len(want), sha(want)[:12], len(data), sha(data)[:12]))

    def expect_enoent(self, node, path, what):
        _, t = wait_for(lambda: try_stat(path) == "ENOENT")
        st = try_stat(path)
        if st != "ENOENT":
            self.fail("%s: stat %s on node %s: expected ENOENT within %.0f s, got %s"
                      % (what, path, node, VISIBLE_S, st or "success"))
        try:
            fd = os.open(path, os.O_RDONLY)
            os.close(fd)
            self.fail("%s: open %s on node %s: expected ENOENT, got success" % (what, path, node))
        except OSError as e:
            if e.errno != errno.ENOENT:
                self.fail("%s: open %s on node %s: expected ENOENT, got %s" % (what, path, node, errname(e)))
        return t

    # ---- tests ----

    def test_two_nodes_store_load_rename_unlink(self):
        a, _ = self.mount("A")
        b, _ = self.mount("B")
        data = os.urandom(1 << 20) + b"tail"
        os.makedirs(os.path.join(a, "kv", "ab"))
        kf.write_file(os.path.join(a, "kv", "ab", "chunk0"), data)
        self.expect_bytes("B", os.path.join(b, "kv", "ab", "chunk0"), data, "store on A, load on B")
        # rename on B, visible on A
        os.rename(os.path.join(b, "kv", "ab", "chunk0"), os.path.join(b, "kv", "ab", "chunk0.moved"))
        self.expect_bytes("A", os.path.join(a, "kv", "ab", "chunk0.moved"), data, "rename on B")
        self.expect_enoent("A", os.path.join(a, "kv", "ab", "chunk0"), "rename on B (old name)")
        # a fresh file of A unlinked on B: ENOENT on A (stat and open), not EIO
        other = os.urandom(300000)
        kf.write_file(os.path.join(a, "kv", "ab", "chunk1"), other)
        self.expect_bytes("B", os.path.join(b, "kv", "ab", "chunk1"), other, "store on A, load on B (2)")
        os.unlink(os.path.join(b, "kv", "ab", "chunk1"))
        self.expect_enoent("B", os.path.join(b, "kv", "ab", "chunk1"), "unlink on B (local)")
        self.expect_enoent("A", os.path.join(a, "kv", "ab", "chunk1"), "unlink on B (writer A)")
        self.assertNotIn("chunk1", os.listdir(os.path.join(a, "kv", "ab")),
                         "unlink on B: readdir on A still lists chunk1")
        # the rename's result survives on both
        self.expect_bytes("B", os.path.join(b, "kv", "ab", "chunk0.moved"), data, "rename on B (B)")

    def test_three_nodes(self):
        a, _ = self.mount("A")
        b, _ = self.mount("B")
        c, _ = self.mount("C")
        files = {("n%02d" % i): os.urandom(4096 * (i + 1)) for i in range(8)}
        for n, v in files.items():
            kf.write_file(os.path.join(a, n), v)
        for node, m in (("B", b), ("C", c)):
            for n, v in files.items():
                self.expect_bytes(node, os.path.join(m, n), v, "store on A, load on " + node)
        os.rename(os.path.join(b, "n00"), os.path.join(b, "renamed"))
        for node, m in (("A", a), ("C", c)):
            self.expect_bytes(node, os.path.join(m, "renamed"), files["n00"], "rename on B, seen on " + node)
            self.expect_enoent(node, os.path.join(m, "n00"), "rename on B (old name), seen on " + node)
        os.unlink(os.path.join(b, "n01"))
        for node, m in (("A", a), ("C", c)):
            self.expect_enoent(node, os.path.join(m, "n01"), "unlink on B, seen on " + node)
        # C writes, A and B read
        v = os.urandom(70000)
        kf.write_file(os.path.join(c, "fromC"), v)
        for node, m in (("A", a), ("B", b)):
            self.expect_bytes(node, os.path.join(m, "fromC"), v, "store on C, load on " + node)

    def test_new_node_found_while_misses_cost_no_listing(self):
        """A alone, its lookups missing every 10 ms (each asks the peer thread for an early poll): A looks
        for new nodes with one stat of nodes/ and lists it only when that stat changed, so over 4 s it lists
        nothing and its backing metadata ops stay at the looks' stats, the heartbeat's and the stats reads'
        (measured 2.5 per second: stat 7, open 2, close 1 in 4 s; before, a listing every second on top).
        Then B mounts (a new node): A finds it and reads B's file."""
        a, _ = self.mount("A")
        meta_kinds = META_KINDS
        misses = MissingLookups(self, a)

        # nodes/ settles: A lists it at each look (1 s apart while lookups miss) until a listing comes 2 s
        # after its last change (A's own directory).
        misses(4.0)
        s0 = kf.stats(a)["backing_ops"]
        t0 = time.monotonic()
        i0 = misses.count
        misses(4.0)
        s1 = kf.stats(a)["backing_ops"]
        dt = time.monotonic() - t0
        d = {k: s1[k] - s0[k] for k in meta_kinds}
        per_s = sum(d.values()) / dt
        sys.stderr.write("multinode_test: A alone, %d misses in %.1f s: backing metadata ops %s = %.2f/s\n"
                         % (misses.count - i0, dt, d, per_s))
        self.assertEqual(d["list"], 0, "A listed a directory while nothing changed: %s" % d)
        self.assertGreaterEqual(d["stat"], 1, "A never looked for new nodes: %s" % d)
        self.assertLessEqual(per_s, 3.0, "A alone: %.2f backing metadata ops/s: %s" % (per_s, d))
        b, _ = self.mount("B")
        data = os.urandom(5000)
        kf.write_file(os.path.join(b, "fromB"), data)
        self.expect_bytes("A", os.path.join(a, "fromB"), data, "a new node's file")

    def test_peer_polls_read_the_kept_journal_tail(self):
        """A's peer thread keeps B's newest journal file open and reads its tail through that descriptor:
        with A's lookups missing every 10 ms (an early poll of B each 50 ms) and B idle, A's backing
        metadata ops over 4 s are a listing of B's directory per 2 s without news and the heartbeat's
        (measured: list 2-4, open 0-2 in 4 s; before, every poll listed B's directory and opened and
        closed its journal file: ~60 per second). B then writes 3 batches of 50 files, cutting its journal
        after each (a checkpoint every 40 entries): A follows it into every new journal file and reads all
        150."""
        a, _ = self.mount("A")
        b, _ = self.mount("B", checkpoint_entries=40, peers_publish_ms=200)  # checkpoints looked at every 0.2 s
        kf.write_file(os.path.join(b, "first"), b"x")
        self.expect_bytes("A", os.path.join(a, "first"), b"x", "B's first file")
        meta_kinds = META_KINDS
        misses = MissingLookups(self, a)

        misses(3.0)
        s0 = kf.stats(a)
        t0 = time.monotonic()
        misses(4.0)
        s1 = kf.stats(a)
        dt = time.monotonic() - t0
        d = {k: s1["backing_ops"][k] - s0["backing_ops"][k] for k in meta_kinds}
        polls = s1["peer_polls"]["polls"] - s0["peer_polls"]["polls"]
        tail = s1["peer_polls"]["tail_reads"] - s0["peer_polls"]["tail_reads"]
        sys.stderr.write("multinode_test: A with B idle, misses for %.1f s: %d polls of B (%d by the kept tail), "
                         "backing metadata ops %s\n" % (dt, polls, tail, d))
        self.assertGreaterEqual(polls, 40, "A's misses did not poll B early")
        self.assertGreaterEqual(tail, polls - 4, "polls that listed B's directory: %d of %d" % (polls - tail, polls))
        self.assertLessEqual(d["list"], 4, d)
        self.assertLessEqual(d["open"] + d["close"], 4, d)
        bdir = os.path.join(self.backing, ".kvfs", "v1", "nodes", "B")

        def newest_journal():
            return max(int(n.split("-")[-1]) for n in os.listdir(bdir) if n.startswith("journal-"))

        want = {}
        for batch in range(3):  # 50 files, then wait for B's checkpoint to cut its journal
            before = newest_journal()
            for k in range(50):
                name = "rot-%d-%02d" % (batch, k)
                want[name] = os.urandom(1000 + k)
                kf.write_file(os.path.join(b, name), want[name])
            got, _ = wait_for(lambda: newest_journal() > before, timeout=10.0)
            self.assertTrue(got, "B did not cut its journal after batch %d" % batch)
        for name, data in want.items():
            self.expect_bytes("A", os.path.join(a, name), data, "B's file across journal cuts")
        sys.stderr.write("multinode_test: B's newest journal file number %d\n" % newest_journal())

    def test_unlink_on_B_while_A_reader_has_it_open(self):
        a, _ = self.mount("A")
        b, _ = self.mount("B")
        v = os.urandom(200000)
        kf.write_file(os.path.join(a, "f"), v)
        self.expect_bytes("B", os.path.join(b, "f"), v, "store on A, load on B")
        fd = os.open(os.path.join(a, "f"), os.O_RDONLY)
        try:
            os.unlink(os.path.join(b, "f"))
            self.expect_enoent("A", os.path.join(a, "f"), "unlink on B with an open reader on A")
            got = os.pread(fd, len(v) + 10, 0)
            self.assertEqual(sha(got), sha(v), "reader on A opened before B's unlink: expected the old "
                             "%d bytes, got %d bytes" % (len(v), len(got)))
        finally:
            os.close(fd)

    def test_writable_open_of_a_file_the_peer_just_rewrote_returns(self):
        """B's O_RDWR open of a peer's file that the peer has just rewritten, before B's poll read the
        rewrite: the open pins the old record, the first hold of A's segment polls A's journal on the
        opening thread (Store::PinRecord), and the rewrite's notification marked the inode detached
        under the inode's lock, which that thread already held. Before (a breaker session, 4 of 5
        runs, 2 of 2 with B polling every 5 s; this test 2 of 2) the open never returned, and B's
        tailer, `kvfs stats` and checkpoints hung with it. Now the open returns and both nodes end
        with the same whole version."""
        a, _ = self.mount("A")
        b, bproc = self.mount("B", peer_poll_ms=5000, peer_poll_max_ms=5000)
        v1, v2 = b"1" * 100000, b"2" * 100000
        kf.write_file(os.path.join(a, "x"), v1)
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(b, "x")))[0], "B never saw x")
        kf.write_file(os.path.join(a, "x"), v2)  # a PUT in A's journal that B has not read
        time.sleep(0.1)  # A's group commit (20 ms) publishes it; B's next regular poll is seconds away
        code = ("import os; fd = os.open(%r, os.O_RDWR); os.pwrite(fd, b'B', 0); os.close(fd)"
                % os.path.join(b, "x"))
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            bproc.send_signal(signal.SIGKILL)  # the wedged daemon we started; the open then fails
            child.kill()
            child.wait()
            self.fail("B's O_RDWR open of x did not return in 20 s (the daemon deadlocked)")
        self.assertEqual(child.returncode, 0)
        # B's write over v1 (opened before the rewrite applied, committed last), over v2 (opened after),
        # or lost with v1's number when the rewrite was applied during the open (a peer's PUT binds the
        # name to a new number: B wrote to the replaced file and loses its write, semantics.md §6 item 11).
        allowed = (b"B" + v1[1:], b"B" + v2[1:], v2)

        def agree():
            da, db = try_read(os.path.join(a, "x"))[0], try_read(os.path.join(b, "x"))[0]
            return da is not None and da == db and da in allowed
        self.assertTrue(wait_for(agree, timeout=20)[0],
                        "A and B disagree on x or hold a mix: %r / %r" % (
                            (try_read(os.path.join(a, "x"))[0] or b"")[:2],
                            (try_read(os.path.join(b, "x"))[0] or b"")[:2]))

    def test_lww_concurrent_writers(self):
        a, _ = self.mount("A")
        b, _ = self.mount("B")
        n = 40
        # content-addressed: both write the same bytes under each name
        same = {("ca%03d" % i): os.urandom(65536 + 4096 * i) for i in range(n)}
        # not content-addressed: different bytes, one must win everywhere
        diff = {("d%03d" % i): (os.urandom(20000), os.urandom(30000)) for i in range(n)}
        errors = []

        def writer(m, idx):
            try:
                names = list(same)
                random.Random(idx).shuffle(names)
                for k in names:
                    tmp = os.path.join(m, "%s.tmp.%d" % (k, idx))
                    kf.write_file(tmp, same[k])
                    os.replace(tmp, os.path.join(m, k))
                for k, vals in diff.items():
                    kf.write_file(os.path.join(m, k), vals[idx])
            except OSError as e:
                errors.append("writer %d: %s %s" % (idx, errname(e), e.filename))

        ts = [threading.Thread(target=writer, args=(m, i)) for i, m in enumerate((a, b))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [], "concurrent writers")
        for node, m in (("A", a), ("B", b)):
            for k, v in same.items():
                self.expect_bytes(node, os.path.join(m, k), v, "same-bytes writers (LWW)")
        # converge: both nodes show the same winner for every name, and it is one writer's whole value

        def converged():
            for k, (va, vb) in diff.items():
                ra, ea = try_read(os.path.join(a, k))
                rb, eb = try_read(os.path.join(b, k))
                if ra is None or rb is None or ra != rb:
                    return False
            return True

        ok, t = wait_for(converged, timeout=VISIBLE_S, interval=0.1)
        for k, (va, vb) in diff.items():
            ra, ea = try_read(os.path.join(a, k))
            rb, eb = try_read(os.path.join(b, k))
            wa = "A" if ra == va else "B" if ra == vb else ("error " + ea if ea else "mix/other")
            wb = "A" if rb == va else "B" if rb == vb else ("error " + eb if eb else "mix/other")
            self.assertIn(wa, ("A", "B"), "LWW %s on A: expected one writer's bytes, got %s" % (k, wa))
            self.assertEqual(wa, wb, "LWW %s: node A shows writer %s, node B shows writer %s after %.0f s"
                             % (k, wa, wb, VISIBLE_S))
        for node, m in (("A", a), ("B", b)):
            left = [x for x in os.listdir(m) if ".tmp." in x]
            self.assertEqual(left, [], "temp names left on node %s" % node)

    def test_second_mount_with_live_node_id_is_refused(self):
        self.mount("A")
        other = NodeSpec(self.root, self.backing, "A2")
        r = kf.run_kvfs("mount", other.mnt, "--backing", self.backing, "--node-id", "A",
                        "--index-dir", other.index, "--foreground", timeout=60)
        if r.returncode == 0 or kf.is_mounted(other.mnt):
            kf.unmount(other.mnt)
        msg = r.stderr.strip()
        self.assertEqual(r.returncode, 2, "second mount of node A: expected exit 2, got %d (%s)"
                         % (r.returncode, msg))
        self.assertIn("node 'A'", msg, "refusal message should name the node: %r" % msg)
        self.assertIn("--force", msg, "refusal message should say how to take over: %r" % msg)
        self.assertIn("heartbeat", msg, "refusal message should give the heartbeat age: %r" % msg)
        self.assertEqual(len(msg.splitlines()), 1, "refusal should be one line: %r" % msg)
        sys.stderr.write("\nrefusal message: %s\n" % msg)

    def test_taken_over_mount_is_fenced(self):
        """A mount whose node directory another mount took over (--force on a live node, or a partition
        longer than the heartbeat timeout) learns it at its next heartbeat (5 s) and is fenced: its
        writes go to a generation nobody reads, so close(2), mkdir and rename fail with EIO instead of
        returning success for bytes that are lost (a breaker saw close() return 0 on the old mount for
        files never seen anywhere else); reads of what it had committed go on. Before: every close 0."""
        a, _ = self.mount("A")
        kf.write_file(os.path.join(a, "before"), b"b" * 5000)
        other = NodeSpec(self.root, self.backing, "A2")
        a2, _, _ = self.stack.enter_context(kf.mounted(backing=other, node_id="A", force=True,
                                                       peer_poll_ms=POLL_MS))
        self.expect_bytes("A2", os.path.join(a2, "before"), b"b" * 5000, "taken over node's file")

        def close_fails():
            try:
                kf.write_file(os.path.join(a, "after-%d" % time.monotonic_ns()), b"x" * 5000)
                return False
            except OSError as e:
                self.assertEqual(e.errno, errno.EIO, e)
                return True
        ok, t = wait_for(close_fails, timeout=15, interval=0.2)
        self.assertTrue(ok, "the taken-over mount still returns 0 from close(2) after 15 s")
        with self.assertRaises(OSError) as cm:
            os.mkdir(os.path.join(a, "d"))
        self.assertEqual(cm.exception.errno, errno.EIO)
        with open(os.path.join(a, "before"), "rb") as f:
            self.assertEqual(f.read(), b"b" * 5000)
        sys.stderr.write("\nfenced %.1f s after the takeover\n" % t)

    def test_restart_takeover_new_generation_only(self):
        a, proc = self.mount("A")
        b, _ = self.mount("B")
        old = {("old%d" % i): os.urandom(50000 + i) for i in range(5)}
        for k, v in old.items():
            kf.write_file(os.path.join(a, k), v)
        fd = os.open(os.path.join(a, "old0"), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        gen1 = owner_generation(self.backing, "A")
        # crash A (SIGKILL of the pid we started) and lazily detach its dead mount
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kf.unmount(os.path.join(self.root, "mnt-A"))
        before = node_files(self.backing, "A")
        a, proc = self.mount("A")  # same node id, same index dir: owner pid gone -> takeover
        gen2 = owner_generation(self.backing, "A")
        self.assertGreater(gen2, gen1, "restart: expected a new generation above %d, got %s" % (gen1, gen2))
        new = {("new%d" % i): os.urandom(40000 + i) for i in range(5)}
        for k, v in new.items():
            kf.write_file(os.path.join(a, k), v)
        for k, v in old.items():
            self.expect_bytes("A", os.path.join(a, k), v, "old file after restart (A)")
        for k, v in {**old, **new}.items():
            self.expect_bytes("B", os.path.join(b, k), v, "peer B after A's restart")
        after = node_files(self.backing, "A")
        for p, (size, h) in before.items():
            self.assertIn(p, after, "restart: old-generation file %s vanished" % p)
            self.assertEqual(after[p], (size, h), "restart: old-generation file %s was modified (%d bytes "
                             "-> %d)" % (p, size, after[p][0]))
        for p in after:
            if p not in before:
                self.assertEqual(file_generation(p), gen2, "restart: new file %s is not of generation %d"
                                 % (p, gen2))
        self.assertTrue(any(p not in before for p in after), "restart wrote no new-generation file")

    def mount_slow_commit(self, name):
        """Mounts `name` with a 2 s deferred-commit window (KVFS_TEST_COMMIT_DELAY_MS, test only), so a
        test's steps certainly run before the commit."""
        old_env = os.environ.get("KVFS_TEST_COMMIT_DELAY_MS")
        os.environ["KVFS_TEST_COMMIT_DELAY_MS"] = "2000"
        try:
            return self.mount(name)
        finally:
            if old_env is None:
                del os.environ["KVFS_TEST_COMMIT_DELAY_MS"]
            else:
                os.environ["KVFS_TEST_COMMIT_DELAY_MS"] = old_env

    def test_concurrent_attribute_changes_converge(self):
        """docs/semantics.md §4: chmod on A, then at once utimens on B (which has not read A's journal
        yet: its peer poll is 2 s), and one xattr name set to different values on both: A, B and a
        fresh third node (its index replayed from the journals) end with the same stat and xattrs, the
        later change (B's, by stamp) winning as a whole."""
        a, _ = self.mount("A")
        b, _ = self.mount("B", peer_poll_ms=2000, peer_poll_max_ms=2000)
        names = ["attr%d" % i for i in range(4)]
        for n in names:
            kf.write_file(os.path.join(a, n), b"v" * 1000)
        for n in names:
            self.expect_bytes("B", os.path.join(b, n), b"v" * 1000, "store on A, load on B")
        times = (1_700_000_111_000_000_000, 1_700_000_222_000_000_000)
        for n in names:
            os.chmod(os.path.join(a, n), 0o600)
            os.setxattr(os.path.join(a, n), "user.k", b"from-A")
            os.setxattr(os.path.join(a, n), "user.only-a", b"1")
        # B's changes must carry the later stamps (HLC: physical ms, then a counter): the next ms
        time.sleep(0.01)
        for n in names:
            os.utime(os.path.join(b, n), ns=times)
            os.setxattr(os.path.join(b, n), "user.k", b"from-B")

        def view(m, n):
            p = os.path.join(m, n)
            try:
                st = os.stat(p)
                xs = {x: os.getxattr(p, x) for x in sorted(os.listxattr(p))}
            except OSError as e:
                return errname(e)
            return (oct(st.st_mode), st.st_uid, st.st_gid, st.st_size, st.st_atime_ns, st.st_mtime_ns, xs)

        def converged(mounts):
            return all(len({repr(view(m, n)) for m in mounts}) == 1 for n in names)

        wait_for(lambda: converged((a, b)))
        for n in names:
            self.assertEqual(view(a, n), view(b, n), "%s differs between A and B" % n)
        c, _ = self.mount("C")
        wait_for(lambda: converged((a, c)))
        for n in names:
            got = view(a, n)
            self.assertEqual(view(c, n), got, "%s: the replayed node C differs from A" % n)
            self.assertEqual(view(b, n), got, "%s: B differs from A after C joined" % n)
            # B's utimens and xattr are the later changes: their values everywhere
            self.assertEqual((got[4], got[5]), times, "%s: atime/mtime are not B's utimens" % n)
            self.assertEqual(got[6].get("user.k"), b"from-B", "%s: user.k is not B's later value" % n)
            self.assertEqual(got[6].get("user.only-a"), b"1", "%s: A's other xattr name was lost" % n)
            # B's set had mode 644, unless B's poll read A's chmod before B's utimens (then 600)
            self.assertIn(got[0], (oct(0o100600), oct(0o100644)), n)

    def test_xattrs_of_staged_files_reach_peers_and_survive_crash(self):
        """breaker-1 item 4: xattrs set while a file is open for writing, on a temp before its rename, or
        kept across a new version (O_TRUNC rewrite) of a committed file travel with the file's PUT: peer B
        and A's index rebuilt after SIGKILL have them."""
        a, proc = self.mount_slow_commit("A")
        b, _ = self.mount("B")
        d = os.path.join(a, "x")
        os.mkdir(d)
        fd = os.open(os.path.join(d, "during"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"x")
        os.setxattr(os.path.join(d, "during"), "user.k", b"during")
        os.close(fd)
        kf.write_file(os.path.join(d, "t.tmp"), b"y")
        os.setxattr(os.path.join(d, "t.tmp"), "user.k", b"tmp")
        os.rename(os.path.join(d, "t.tmp"), os.path.join(d, "t"))
        kf.write_file(os.path.join(d, "again"), b"v1")
        os.setxattr(os.path.join(d, "again"), "user.k", b"kept")
        os.setxattr(os.path.join(d, "again"), "user.gone", b"x")
        fsyncdir(d)
        os.removexattr(os.path.join(d, "again"), "user.gone")
        kf.write_file(os.path.join(d, "again"), b"v2")  # new version: xattrs stay, as on a local fs
        fsyncdir(d)
        want = {"during": (b"x", {"user.k": b"during"}), "t": (b"y", {"user.k": b"tmp"}),
                "again": (b"v2", {"user.k": b"kept"})}

        def check(node, mnt, what):
            for n, (data, xs) in want.items():
                path = os.path.join(mnt, "x", n)
                self.expect_bytes(node, path, data, what)
                got = {k: os.getxattr(path, k) for k in os.listxattr(path)}
                self.assertEqual(got, xs, "%s: xattrs of %s on node %s" % (what, n, node))

        check("A", a, "xattrs (A)")
        check("B", b, "xattrs, peer B")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kf.unmount(os.path.join(self.root, "mnt-A"))
        a, proc = self.mount("A")
        check("A", a, "xattrs, A after SIGKILL + remount")

    def test_directory_renamed_over_empty_directory(self):
        """rename(2) of a directory over an empty directory (mv -T d1 d2; mv x1 y1/ with y1/x1 empty)
        reaches peer B, a node joining later, and A's own index rebuilt after SIGKILL, and a file fsync'd
        after it keeps the crash state a prefix. Before: the journaled RENAME was skipped wherever it was
        applied (peers, replay): they kept d1/x/f next to an empty d2, fsck said clean, and later renames
        under it made the nodes' namespaces (and bytes under one name) diverge for good (breaker)."""
        a, proc = self.mount("A")
        b, _ = self.mount("B")
        r = os.path.join(a, "r")
        os.makedirs(os.path.join(r, "d1", "x"))
        os.makedirs(os.path.join(r, "d2"))
        os.makedirs(os.path.join(r, "x1", "z"))
        os.makedirs(os.path.join(r, "y1", "x1"))
        data = os.urandom(5000)
        kf.write_file(os.path.join(r, "d1", "x", "f"), data)
        os.rename(os.path.join(r, "d1"), os.path.join(r, "d2"))
        os.rename(os.path.join(r, "x1"), os.path.join(r, "y1", "x1"))
        fd = os.open(os.path.join(r, "after"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"z")
        os.fsync(fd)
        os.close(fd)

        def check(node, mnt, what):
            rr = os.path.join(mnt, "r")
            self.expect_bytes(node, os.path.join(rr, "d2", "x", "f"), data, what)
            self.expect_bytes(node, os.path.join(rr, "after"), b"z", what)
            self.assertEqual(sorted(os.listdir(rr)), ["after", "d2", "y1"], "%s: readdir of r on %s" % (what, node))
            self.assertEqual(os.listdir(os.path.join(rr, "y1", "x1")), ["z"], "%s: y1/x1 on %s" % (what, node))

        check("A", a, "dir over empty dir (A)")
        check("B", b, "dir over empty dir, peer B")
        c, _ = self.mount("C")
        check("C", c, "dir over empty dir, node C joining later")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kf.unmount(os.path.join(self.root, "mnt-A"))
        a, proc = self.mount("A")
        check("A", a, "dir over empty dir, A after SIGKILL + remount")

    def test_discarded_replacement_does_not_resurrect(self):
        """breaker-1 item 1: a staged temp renamed over a committed file and then unlinked or renamed away
        before its (deferred) commit. The rename journals nothing (no ENOENT window for peers), so the
        discard must journal the removal of the replaced file: peer B and A's index rebuilt after SIGKILL
        must show the final state, never the replaced content. KVFS_TEST_COMMIT_DELAY_MS makes A's commit
        window 2 s, so every sequence runs inside it."""
        a, proc = self.mount_slow_commit("A")
        b, _ = self.mount("B")
        d = os.path.join(a, "r")
        os.mkdir(d)

        def p(n):
            return os.path.join(d, n)

        def committed(n, data):
            kf.write_file(p(n), data)
            fsyncdir(d)

        for n in ("u", "m", "twice", "over", "dst"):
            committed(n, b"old-" + n.encode())
        # unlink variant: tmp over committed, then unlink
        kf.write_file(p("u.t"), b"tmp-u")
        os.rename(p("u.t"), p("u"))
        os.unlink(p("u"))
        # rename-away variant: tmp over committed, then rename to a new name
        kf.write_file(p("m.t"), b"tmp-m")
        os.rename(p("m.t"), p("m"))
        os.rename(p("m"), p("m.moved"))
        # two staged replacements in a row, then unlink
        kf.write_file(p("twice.t1"), b"tmp-1")
        os.rename(p("twice.t1"), p("twice"))
        kf.write_file(p("twice.t2"), b"tmp-2")
        os.rename(p("twice.t2"), p("twice"))
        os.unlink(p("twice"))
        # tmp over committed, then renamed over another committed file
        kf.write_file(p("over.t"), b"tmp-over")
        os.rename(p("over.t"), p("over"))
        os.rename(p("over"), p("dst"))
        want = {"m.moved": b"tmp-m", "dst": b"tmp-over"}
        gone = ["u", "m", "twice", "over", "u.t", "m.t", "twice.t1", "twice.t2", "over.t"]
        committed("marker", b"m")  # commits the staged files too; B sees them once it has the marker

        def check(node, mnt, what):
            rd = os.path.join(mnt, "r")
            self.expect_bytes(node, os.path.join(rd, "marker"), b"m", what)
            for n, v in want.items():
                self.expect_bytes(node, os.path.join(rd, n), v, what)
            for n in gone:
                self.expect_enoent(node, os.path.join(rd, n), what + " (" + n + ")")
            self.assertEqual(sorted(os.listdir(rd)), sorted(list(want) + ["marker"]), what + ": readdir")

        check("A", a, "discarded replacement (A)")
        check("B", b, "discarded replacement, peer B")
        # crash A: its index is rebuilt from the journals at the remount
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kf.unmount(os.path.join(self.root, "mnt-A"))
        a, proc = self.mount("A")
        check("A", a, "discarded replacement, A after SIGKILL + remount")

    def test_visibility_latency(self):
        a, _ = self.mount("A")
        b, _ = self.mount("B")
        os.mkdir(os.path.join(a, "vis"))
        self.expect_enoent("B", os.path.join(b, "vis", "none"), "warm-up")
        _, t = wait_for(lambda: os.path.isdir(os.path.join(b, "vis")))
        lat = []
        payload = os.urandom(256 << 10)
        for i in range(CHUNKS):
            name = "c%04d" % i
            kf.write_file(os.path.join(a, "vis", name), payload)  # close() returned
            t0 = time.monotonic()
            pb = os.path.join(b, "vis", name)
            while True:
                try:
                    os.stat(pb)
                    break
                except FileNotFoundError:
                    pass
                if time.monotonic() - t0 > VISIBLE_S:
                    self.fail("visibility: chunk %s closed on A not visible on B after %.0f s" % (name, VISIBLE_S))
                time.sleep(0.002)
            lat.append((time.monotonic() - t0) * 1000.0)
            time.sleep(random.uniform(GAP_MS[0], GAP_MS[-1]) / 1000.0)  # not in phase with the poll timer
        p50, p99, mx = percentile(lat, 50), percentile(lat, 99), max(lat)
        # A measurement, not a timed assertion (the bound depends on the machine's load): the figure goes to
        # stderr and docs/benchmarks.md; issue 7's target is p99 < 2 x poll + group commit. What the test
        # asserts is that every chunk became visible (within VISIBLE_S, a liveness bound).
        sys.stderr.write("\nvisibility A close -> B stat (%d chunks of 256 KiB, poll %d ms, group commit %d ms): "
                         "p50 %.1f ms, p99 %.1f ms, max %.1f ms (target p99 < %d ms)\n"
                         % (len(lat), POLL_MS, GC_MS, p50, p99, mx, 2 * POLL_MS + GC_MS))
        self.assertEqual(len(lat), CHUNKS)

    def node_cmd(self, *args):
        r = kf.run_kvfs("node", *args, "--backing", self.backing, timeout=120)
        return r.returncode, r.stdout, r.stderr.strip()

    def node_states(self):
        import json
        rc, out, err = self.node_cmd("list", "--json")
        self.assertEqual(rc, 0, "kvfs node list: %s" % err)
        return {n["node"]: n for n in json.loads(out)}

    def test_node_list_retire_purge(self):
        a, aproc = self.mount("A")
        b, _ = self.mount("B")
        c, cproc = self.mount("C")
        files = {("a%d" % i): os.urandom(100000 + i) for i in range(4)}
        for k, v in files.items():
            kf.write_file(os.path.join(a, k), v)
        for k, v in files.items():
            self.expect_bytes("B", os.path.join(b, k), v, "store on A, load on B")
        st = self.node_states()
        for n in ("A", "B", "C"):
            self.assertEqual(st[n]["state"], "live", "node list: %s should be live: %s" % (n, st[n]))
        self.assertGreater(st["A"]["segment_bytes"], 400000, "node list: A's segment bytes: %s" % st["A"])
        self.assertGreater(st["A"]["journal_bytes"], 0, "node list: A's journal bytes: %s" % st["A"])
        self.assertLess(st["A"]["heartbeat_age_s"], 30)
        rc, out, err = self.node_cmd("list")
        sys.stderr.write("\n" + out)
        # a live node: retire refused (exit 2) unless --force, purge refused always
        rc, _, err = self.node_cmd("retire", "--node", "B")
        self.assertEqual(rc, 2, "retire of live B: expected exit 2, got %d (%s)" % (rc, err))
        self.assertIn("live", err)
        rc, _, err = self.node_cmd("purge", "--node", "B", "--force")
        self.assertEqual(rc, 2, "purge --force of live B: expected exit 2, got %d (%s)" % (rc, err))
        # C crashes (SIGKILL of the pid we started): same host, pid gone -> dead
        cproc.send_signal(signal.SIGKILL)
        cproc.wait()
        kf.unmount(os.path.join(self.root, "mnt-C"))
        self.assertEqual(self.node_states()["C"]["state"], "dead")
        # A unmounts cleanly -> released; purge needs retire (or --force)
        kf.unmount(a)
        aproc.wait(timeout=60)
        self.assertEqual(self.node_states()["A"]["state"], "released")
        rc, _, err = self.node_cmd("purge", "--node", "A")
        self.assertEqual(rc, 2, "purge of released A without retire: expected exit 2, got %d (%s)" % (rc, err))
        rc, out, err = self.node_cmd("retire", "--node", "A")
        self.assertEqual(rc, 0, "retire of released A: %s" % err)
        self.assertEqual(self.node_states()["A"]["state"], "retired")
        rc, out, err = self.node_cmd("purge", "--node", "A", "--grace-ms", "4000")
        self.assertEqual(rc, 0, "purge of retired A: %s" % err)
        self.assertNotIn("[info]", out + err, "library log lines among purge's output")
        sys.stderr.write(out)
        for k in files:
            self.expect_enoent("B", os.path.join(b, k), "purge of A, seen on B")
        left = sorted(os.listdir(os.path.join(self.backing, ".kvfs", "v1", "nodes", "A")))
        self.assertEqual([x for x in left if x not in ("OWNER", "PURGED", "seg")], [],
                         "purge left files in A's directory: %s" % left)
        self.assertEqual(os.listdir(os.path.join(self.backing, ".kvfs", "v1", "nodes", "A", "seg")), [])
        st = self.node_states()
        self.assertEqual(st["A"]["state"], "purged")
        purge_gen = st["A"]["generation"]
        # the dead node C purges without retire
        rc, out, err = self.node_cmd("purge", "--node", "C", "--grace-ms", "500")
        self.assertEqual(rc, 0, "purge of dead C: %s" % err)
        # A mounts again under the purged id with its OLD index dir: its own purged files are still in
        # that index (known limitation, docs/operations.md), so their reads must be ENOENT, never EIO
        a, aproc = self.mount("A")
        self.assertGreater(owner_generation(self.backing, "A"), purge_gen)
        for k in files:
            data, err = try_read(os.path.join(a, k))
            self.assertEqual(err, "ENOENT", "read of purged %s on A (old index): expected ENOENT, got %s"
                             % (k, err or "%d bytes" % len(data)))
        # ... and not even listed (issue 7 bug: the old index kept them): A rebuilds its index when it
        # finds PURGED newer than the generation its index last recorded
        stale = [k for k in files if try_stat(os.path.join(a, k)) is None]
        self.assertEqual(stale, [], "A remounted with its old index still lists purged %s" % stale)
        listed = sorted(os.listdir(a))
        self.assertEqual([k for k in files if k in listed], [], "purged names in A's listing: %s" % listed)
        v = os.urandom(12345)
        kf.write_file(os.path.join(a, "again"), v)
        self.expect_bytes("B", os.path.join(b, "again"), v, "mount of A after purge, load on B")
        kf.unmount(a)
        aproc.wait(timeout=60)  # released at exit
        # ... and with a fresh index dir (a new pod): none of the purged names exist
        a, _ = self.mount("A", index="idx-A-fresh")
        for k in files:
            self.expect_enoent("A", os.path.join(a, k), "purged file on A with a fresh index")
        self.expect_bytes("A", os.path.join(a, "again"), v, "A's post-purge file after a fresh join")

    def test_join_after_checkpoint_and_retirement(self):
        """Node C joins after A wrote many files, deleted and renamed some, checkpointed and retired its
        old journal files: C reads A's snapshot + journal tail and sees exactly the live set (deleted names
        stay deleted), and kvfs-fsck reports nothing missing."""
        n_files = int(os.environ.get("KVFS_MN_JOIN_FILES", "600"))
        live = {}
        # Round 1: A writes, deletes every 3rd file, renames every 5th; its clean unmount checkpoints.
        a, aproc = self.mount("A")
        os.mkdir(os.path.join(a, "kv"))
        for i in range(n_files):
            v = os.urandom(4096 + i % 7)
            kf.write_file(os.path.join(a, "kv", "c%04d" % i), v)
            live["kv/c%04d" % i] = v
        for i in range(0, n_files, 3):
            os.unlink(os.path.join(a, "kv", "c%04d" % i))
            del live["kv/c%04d" % i]
        for i in range(1, n_files, 5):
            if "kv/c%04d" % i in live:
                os.rename(os.path.join(a, "kv", "c%04d" % i), os.path.join(a, "kv", "r%04d" % i))
                live["kv/r%04d" % i] = live.pop("kv/c%04d" % i)
        kf.unmount(a)
        aproc.wait(timeout=60)
        # Round 2: more history; the second snapshot at unmount lets A retire what the first one covers
        # (no live peer to wait for).
        a, aproc = self.mount("A")
        for i in range(1, n_files, 3):
            k = "kv/c%04d" % i
            if k in live:
                os.unlink(os.path.join(a, k))
                del live[k]
        for i in range(n_files, n_files + 50):
            v = os.urandom(5000)
            kf.write_file(os.path.join(a, "kv", "c%04d" % i), v)
            live["kv/c%04d" % i] = v
        kf.unmount(a)
        aproc.wait(timeout=60)
        ndir = os.path.join(self.backing, ".kvfs", "v1", "nodes", "A")
        names = sorted(os.listdir(ndir))
        snaps = [x for x in names if x.startswith("snapshot-") and not x.endswith(".tmp")]
        journals = [x for x in names if x.startswith("journal-")]
        self.assertEqual(len(snaps), 2, "A's snapshots after two clean unmounts: %s" % names)
        gen1 = min(int(s.split("-")[1]) for s in snaps)
        self.assertEqual([j for j in journals if int(j.split("-")[1]) < gen1], [],
                         "A's first-generation journal files should be retired: %s" % names)
        # A fresh node joins: exactly the live set, deleted and renamed-away names absent.
        c, _ = self.mount("C")
        seen = {}
        for d in ("kv",):
            for n in os.listdir(os.path.join(c, d)):
                seen[d + "/" + n] = True
        self.assertEqual(sorted(seen), sorted(live), "C's listing differs from A's live set")
        for k in sorted(live)[:: max(1, len(live) // 40)]:
            self.expect_bytes("C", os.path.join(c, k), live[k], "join from snapshot")
        for i in range(0, n_files, 3):
            self.assertEqual(try_stat(os.path.join(c, "kv", "c%04d" % i)), "ENOENT", "deleted name c%04d on C" % i)
        # kvfs-fsck: retired journals are not missing, nothing is damaged.
        import json
        fsck = os.path.join(os.path.dirname(kf.kvfs_binary()), "kvfs-fsck")
        r = subprocess.run([fsck, self.backing, "--json"], capture_output=True, text=True, timeout=300)
        rep = json.loads(r.stdout)
        problems = [f for f in rep["findings"] if f.get("severity") == "problem"]
        self.assertEqual(problems, [], "kvfs-fsck after retirement: %s" % problems)
        nodes = {n["node"]: n for n in rep["nodes"]}
        self.assertTrue(nodes["A"]["snapshot"].endswith(snaps[-1]), nodes["A"])

    def test_case02_publish_by_replace(self):
        a, _ = self.mount("A")
        b, _ = self.mount("B")
        stop = threading.Event()
        published = set()
        werr = []

        def make(seq):
            body = ("%08d:" % seq).encode() + os.urandom(random.randint(100, 20000))
            return body + b"#" + sha(body).encode()

        def writer():
            seq = 0
            try:
                while not stop.is_set():
                    v = make(seq)
                    published.add(v)
                    tmp = os.path.join(a, "value.json.tmp")
                    kf.write_file(tmp, v)
                    os.replace(tmp, os.path.join(a, "value.json"))
                    seq += 1
                    time.sleep(0.01)
            except OSError as e:
                werr.append("writer on A: %s %s at version %d" % (errname(e), e.filename, seq))

        wt = threading.Thread(target=writer)
        wt.start()
        fails = []
        reads = 0
        seqs = set()
        try:
            pb = os.path.join(b, "value.json")
            ok, _ = wait_for(lambda: try_stat(pb) is None)
            self.assertTrue(ok, "case 2: value.json never appeared on B")
            t_end = time.monotonic() + CASE2_S
            while time.monotonic() < t_end and len(fails) < 20:
                data, err = try_read(pb)
                reads += 1
                if data is None:
                    fails.append("read %d: open/read value.json on B: expected a published version, got %s"
                                 % (reads, err))
                    continue
                body, _, h = data.rpartition(b"#")
                if data not in published or sha(body).encode() != h:
                    fails.append("read %d: expected one complete published version, got %d bytes (head %r)"
                                 % (reads, len(data), data[:12]))
                else:
                    seqs.add(int(data[:8]))
        finally:
            stop.set()
            wt.join()
        sys.stderr.write("\ncase 2: %d reads on B over %.0f s, %d distinct versions seen, %d published\n"
                         % (reads, CASE2_S, len(seqs), len(published)))
        self.assertEqual(werr, [])
        self.assertEqual(fails, [], "case 2 failures (first 20)")
        self.assertGreater(len(seqs), 1, "case 2: B saw only one version: peer updates do not arrive")

    def test_case05_replaced_while_other_node_reads(self):
        # A's capacity makes it drop its oldest segments while B reads (docs/design.md §11 case 5: "segments dropped or evicted meanwhile")
        a, _ = self.mount("A", segment_size="1MiB", capacity="4MiB")
        b, _ = self.mount("B")
        stop = threading.Event()
        published = {}
        werr = []
        pa = os.path.join(a, "f")
        v0 = os.urandom(256 << 10)
        published[sha(v0)] = 0
        kf.write_file(pa, v0)

        def writer():
            i = 0
            try:
                while not stop.is_set():
                    i += 1
                    cur = kf.read_file(pa)
                    nxt = cur[-(512 << 10):] + os.urandom(16 << 10)  # copy, append (bounded size)
                    published[sha(nxt)] = i
                    tmp = pa + ".tmp"
                    kf.write_file(tmp, nxt)
                    os.rename(tmp, pa)  # mv f.tmp f
                    kf.write_file(os.path.join(a, "filler%d" % i), os.urandom(256 << 10))  # fill segments
                    time.sleep(0.5)
            except OSError as e:
                werr.append("writer on A: %s %s at version %d" % (errname(e), e.filename, i))

        pb = os.path.join(b, "f")
        ok, _ = wait_for(lambda: try_stat(pb) is None)
        self.assertTrue(ok, "case 5: f never appeared on B")
        wt = threading.Thread(target=writer)
        wt.start()
        fails, sums, n = [], set(), 0
        try:
            t_end = time.monotonic() + CASE5_S
            while time.monotonic() < t_end and len(fails) < 20:
                n += 1
                data, err = try_read(pb)
                if data is None:
                    fails.append("checksum %d of f on B: expected a published version, got %s" % (n, err))
                elif sha(data) not in published:
                    fails.append("checksum %d of f on B: %d bytes sha %s is not a published version"
                                 % (n, len(data), sha(data)[:12]))
                else:
                    sums.add(published[sha(data)])
                time.sleep(0.1)
        finally:
            stop.set()
            wt.join()
        segs = [x for x in node_files(self.backing, "A") if x.endswith(".kseg")]
        created = 1 + max(int(os.path.basename(x).split("-")[1].split(".")[0]) for x in segs) if segs else 0
        sys.stderr.write("\ncase 5: %d checksums on B over %.0f s, %d distinct versions, %d published; A wrote %d "
                         "segments, %d dropped\n" % (n, CASE5_S, len(sums), len(published), created,
                                                      created - len(segs)))
        self.assertEqual(werr, [])
        self.assertEqual(fails, [], "case 5 failures (first 20)")
        self.assertGreater(len(sums), 1, "case 5: B saw only one version")


if __name__ == "__main__":
    unittest.main(verbosity=2)
