#!/usr/bin/env python3
"""link(2) as a create-if-absent publish (issue #18; docs/semantics.md §2 "link"), on real mounts with real
syscalls. python3 stdlib only.

  LmcacheSequence  LMCache fs_native: unique temp O_CREAT|O_EXCL|O_WRONLY, write, close (with and without
                   fsync), link(tmp, final), unlink(tmp), fsync(dirfd): the final name reads the bytes
                   exactly; the temp is gone; link onto an existing name is EEXIST and changes nothing;
                   a committed source (fsync'd, commit delay passed) works too; link of a directory is
                   EPERM; link of a symlink makes a symlink with the same target.
  Race             8 threads link 8 temps to one final name: exactly one 0, the rest EEXIST, the final
                   name holds the winner's bytes.
  Capacity         after both names are gone the record is dead space (kvfs stats: live bytes back where
                   they were, dead bytes grew).
  Peer             a second node over the same backing sees the final name with the right bytes (and not
                   the temp).
  TwoNodeRace      two nodes link one final name at the same moment: exactly one 0 (the claim on the
                   export), both read the winner's bytes; after an unlink a new race; claims removed at unmount.
  Crash            links made before fsync(dirfd) survive SIGKILL of the daemon + remount.

Environment: kvfs_fixture's KVFS_BINARY, KVFS_TEST_KEEP, KVFS_TEST_LOG.
"""

import contextlib
import errno
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvfs_fixture as kf  # noqa: E402

KIB = 1024


def pattern(tag, n):
    seed = tag.encode()
    out = bytearray()
    i = 0
    while len(out) < n:
        out += zlib.crc32(seed + i.to_bytes(8, "little")).to_bytes(4, "little") * 1024
        i += 1
    return bytes(out[:n])


def wait_for(fn, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(d, key, data, fsync=False):
    """LMCache fs_native's put: returns True if this writer's link won, False on EEXIST."""
    tmp = os.path.join(d, "%s.tmp.%d.%d" % (key, os.getpid(), threading.get_ident()))
    final = os.path.join(d, key)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, final)
        won = True
    except FileExistsError:
        won = False
    finally:
        os.unlink(tmp)
    fsync_dir(d)
    return won


@kf.skip_unless_fuse
class LinkPublish(unittest.TestCase):
    def setUp(self):
        self.b = kf.Backing()
        self.stack = contextlib.ExitStack()
        self.mnt, _, _ = self.stack.enter_context(kf.mounted(backing=self.b))
        self.d = os.path.join(self.mnt, "chunks")
        os.mkdir(self.d)

    def tearDown(self):
        self.stack.close()
        self.b.cleanup()

    def test_lmcache_sequence(self):
        want = {}
        for i, size in enumerate([0, 1, 4095, 256 * KIB + 7, 3 * 1024 * KIB + 11]):
            key = "k%d.bin" % i
            want[key] = pattern(key, size)
            self.assertTrue(publish(self.d, key, want[key], fsync=(i % 2 == 1)))
        self.assertEqual(sorted(os.listdir(self.d)), sorted(want))
        for key, data in want.items():
            p = os.path.join(self.d, key)
            self.assertEqual(os.stat(p).st_size, len(data))
            self.assertTrue(kf.read_file(p) == data, "bytes of %s" % key)
        # a second publisher of an existing key: EEXIST, the winner's bytes stay
        self.assertFalse(publish(self.d, "k3.bin", pattern("other", 5000)))
        self.assertTrue(kf.read_file(os.path.join(self.d, "k3.bin")) == want["k3.bin"])
        self.assertEqual(sorted(os.listdir(self.d)), sorted(want))

    def test_committed_source_both_names_then_unlink(self):
        data = pattern("c", 300 * KIB)
        a, b = os.path.join(self.d, "a"), os.path.join(self.d, "b")
        kf.write_file(a, data)
        fd = os.open(a, os.O_RDONLY)
        os.fsync(fd)  # committed
        os.close(fd)
        time.sleep(0.05)
        os.link(a, b)
        self.assertTrue(kf.read_file(b) == data)
        self.assertTrue(kf.read_file(a) == data)
        with self.assertRaises(FileExistsError):
            os.link(a, b)
        os.unlink(a)
        self.assertTrue(kf.read_file(b) == data)
        self.assertEqual(os.stat(b).st_size, len(data))

    def test_directory_eperm_symlink_copies(self):
        os.mkdir(os.path.join(self.d, "sub"))
        with self.assertRaises(OSError) as cm:
            os.link(os.path.join(self.d, "sub"), os.path.join(self.d, "sub2"))
        self.assertEqual(cm.exception.errno, errno.EPERM)
        os.symlink("target/x", os.path.join(self.d, "sl"))
        os.link(os.path.join(self.d, "sl"), os.path.join(self.d, "sl2"), follow_symlinks=False)
        self.assertEqual(os.readlink(os.path.join(self.d, "sl2")), "target/x")

    def test_race_one_winner(self):
        n = 8
        datas = [pattern("w%d" % i, 64 * KIB + i) for i in range(n)]
        tmps = []
        for i in range(n):
            t = os.path.join(self.d, "race.tmp%d" % i)
            kf.write_file(t, datas[i], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            tmps.append(t)
        final = os.path.join(self.d, "race.bin")
        results = [None] * n
        barrier = threading.Barrier(n)

        def run(i):
            barrier.wait()
            try:
                os.link(tmps[i], final)
                results[i] = 0
            except OSError as e:
                results[i] = e.errno
        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results.count(0), 1, results)
        self.assertEqual(results.count(errno.EEXIST), n - 1, results)
        winner = results.index(0)
        for t in tmps:
            os.unlink(t)
        self.assertTrue(kf.read_file(final) == datas[winner], "final holds the winner's bytes")

    def test_dead_after_both_names_gone(self):
        def node_stats():
            return kf.stats(self.mnt)["export"]["node"]
        base = node_stats()["live_bytes"]
        size = 1024 * KIB
        self.assertTrue(publish(self.d, "dead.bin", pattern("dead", size)))
        final = os.path.join(self.d, "dead.bin")
        # the temp's deferred commit (if any) is gone with its name: one name's bytes are live
        self.assertTrue(wait_for(lambda: node_stats()["live_bytes"] == base + size, 5.0), node_stats())
        os.unlink(final)
        self.assertTrue(wait_for(lambda: node_stats()["live_bytes"] == base, 5.0), node_stats())
        self.assertGreaterEqual(node_stats()["dead_bytes"], size)


@kf.skip_unless_fuse
class LinkAcrossNodesAndCrash(kf.SharedBackingCase):
    PREFIX = "kvfs-link-"

    def test_peer_sees_final(self):
        a, _, _ = self.stack.enter_context(
            kf.mounted(backing=self.node("a"), node_id="a", peer_poll_ms=200, group_commit_ms=20))
        b, _, _ = self.stack.enter_context(
            kf.mounted(backing=self.node("b"), node_id="b", peer_poll_ms=200, group_commit_ms=20))
        os.mkdir(os.path.join(a, "kv"))
        want = {"p%d" % i: pattern("p%d" % i, 128 * KIB + i) for i in range(5)}
        for k, data in want.items():
            self.assertTrue(publish(os.path.join(a, "kv"), k, data))
        db = os.path.join(b, "kv")
        self.assertTrue(wait_for(lambda: os.path.isdir(db) and sorted(os.listdir(db)) == sorted(want), 10.0),
                        os.listdir(db) if os.path.isdir(db) else "no kv on b")
        for k, data in want.items():
            self.assertTrue(kf.read_file(os.path.join(db, k)) == data, "node b: bytes of %s" % k)
        # node b publishing a name a already has: EEXIST there too once it has seen it
        self.assertFalse(publish(db, "p0", pattern("b-other", 1000)))
        self.assertTrue(kf.read_file(os.path.join(db, "p0")) == want["p0"])

    def race_round(self, mnts, d, keys, tag):
        """Each node links its own temp to every key at the same moment (a barrier per key); returns
        {key: [errno or 0 per node]} and the bytes each node's temp held."""
        datas = {}
        for n, m in enumerate(mnts):
            for k in keys:
                datas[(n, k)] = pattern("%s-%d-%s" % (tag, n, k), 64 * KIB + n)
                kf.write_file(os.path.join(m, d, "%s.tmp%d" % (k, n)), datas[(n, k)],
                              os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        results = {k: [None] * len(mnts) for k in keys}
        barrier = threading.Barrier(len(mnts))

        def run(n):
            for k in keys:
                barrier.wait()
                try:
                    os.link(os.path.join(mnts[n], d, "%s.tmp%d" % (k, n)), os.path.join(mnts[n], d, k))
                    results[k][n] = 0
                except OSError as e:
                    results[k][n] = e.errno
        threads = [threading.Thread(target=run, args=(n,)) for n in range(len(mnts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for n, m in enumerate(mnts):
            for k in keys:
                os.unlink(os.path.join(m, d, "%s.tmp%d" % (k, n)))
        return results, datas

    def test_two_nodes_racing_link_exactly_one_wins(self):
        """Two nodes link one final name at the same moment, before either has applied the other's PUT:
        exactly one gets 0 (the claim on the export decides), both then read the winner's bytes; after an
        unlink the name is a new race (a fresh claim, not a loss to the old one); the claims are removed
        at unmount."""
        mnts = []
        for name in ("a", "b"):
            m, _, _ = self.stack.enter_context(
                kf.mounted(backing=self.node(name), node_id=name, peer_poll_ms=200, group_commit_ms=20))
            mnts.append(m)
        for m in mnts:
            os.mkdir(os.path.join(m, "kv"))
        keys = ["k%02d" % i for i in range(12)]
        for rnd in range(2):
            results, datas = self.race_round(mnts, "kv", keys, "r%d" % rnd)
            for k in keys:
                self.assertEqual(sorted(results[k]), [0, errno.EEXIST], "round %d key %s: %s" % (rnd, k, results[k]))
            for k in keys:
                winner = results[k].index(0)
                for n, m in enumerate(mnts):
                    p = os.path.join(m, "kv", k)
                    self.assertTrue(wait_for(lambda: kf.read_file(p) == datas[(winner, k)]
                                             if os.path.exists(p) else False, 10.0),
                                    "round %d: node %d reads %s as node %d's bytes" % (rnd, n, k, winner))
            won = [kf.stats(m)["link_claims"]["won"] for m in mnts]
            self.assertEqual(sum(won), len(keys) * (rnd + 1), won)
            human = [kf.run_kvfs("stats", m).stdout for m in mnts]
            texts = [int(re.search(r"link claims +(\d+) won, (\d+) lost", h).group(1)) for h in human]
            self.assertEqual(texts, won, human)
            if rnd == 0:
                for k in keys:  # unlinked on a, gone on b: the next round is a new race for each name
                    os.unlink(os.path.join(mnts[0], "kv", k))
                for k in keys:
                    self.assertTrue(wait_for(lambda: not os.path.exists(os.path.join(mnts[1], "kv", k)), 10.0), k)
        links = os.path.join(self.backing, ".kvfs", "v1", "links")
        self.assertEqual(len(os.listdir(links)), 2 * len(keys), "one claim per won link until its removal")
        self.stack.close()
        self.assertEqual(os.listdir(links), [], "a clean unmount removes its claims")

    def test_survives_sigkill_after_fsyncdir(self):
        s = self.node("c")
        cmd = [kf.kvfs_binary(), "mount", s.mnt, "--backing", s.backing, "--index-dir", s.index,
               "--foreground", "--node-id", "c", "--group-commit-ms", "200"]

        def start():
            log = open(os.path.join(self.root, "daemon.log"), "ab")
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
            log.close()
            deadline = time.time() + 60
            while not kf.is_served(s.mnt):
                if proc.poll() is not None or time.time() > deadline:
                    kill(proc)
                    raise RuntimeError("mount did not appear")
                time.sleep(0.01)
            return proc

        def kill(proc):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)  # only the pid this test started
            proc.wait()
            subprocess.run(["fusermount3", "-u", "-z", s.mnt], capture_output=True)

        proc = start()
        want = {}
        try:
            d = os.path.join(s.mnt, "kv")
            os.mkdir(d)
            fsync_dir(d)
            for i in range(10):
                k = "c%d" % i
                want[k] = pattern(k, 96 * KIB + i)
                self.assertTrue(publish(d, k, want[k]))  # ends with fsync(dirfd)
        finally:
            kill(proc)  # SIGKILL right after the last fsync(dirfd) returned
        proc = start()
        try:
            d = os.path.join(s.mnt, "kv")
            self.assertEqual(sorted(os.listdir(d)), sorted(want))
            for k, data in want.items():
                self.assertTrue(kf.read_file(os.path.join(d, k)) == data, "bytes of %s" % k)
        finally:
            kf.unmount(s.mnt)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill(proc)


if __name__ == "__main__":
    unittest.main(verbosity=2)
