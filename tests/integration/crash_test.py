#!/usr/bin/env python3
"""Crash safety at the mount level (docs/design.md §7, issue 6). python3 stdlib only; needs root for case 9.

  test_sigkill_cycles     a connector-like writer (temp file + rename of 144 KiB - 2.25 MiB chunks, some
                          fsync'd: fsync(temp), rename, fsync(dir)) runs on a mount; the kvfs daemon (only
                          the pid this test started) is SIGKILLed at a random moment; the mount is dropped
                          (fusermount3 -u -z) and remounted, and docs/design.md §7 is checked:
                            1. every file whose fsync(dir) returned after its rename, and every file renamed
                               more than the group-commit interval + KVFS_CRASH_MARGIN_MS (default 500) before
                               the kill, is byte-identical;
                            2. every file that is visible reads back exactly what its writer wrote to that
                               path (each value carries its path, size and SHA-256);
                            3. torn tails are cut: the remount itself cuts torn journal and segment tails
                               (CUT entries), seals the crashed generation's segments and journals lost
                               SEALs, so kvfs-fsck after a clean unmount finds no problem at all, and the
                               final `kvfs-fsck --repair` has nothing to repair;
                            4. the index rebuilt by `kvfs-fsck --rebuild-index` equals the recovered one
                               (`kvfs-fsck --dump-index` of both), checked every 10 cycles and at the end,
                               and at the end the mount over the rebuilt index lists and reads the same.
                          KVFS_CRASH_CYCLES (default 50) cycles; a fresh backing directory every 25 cycles
                          (segments are never compacted, so this bounds the disk used).
                          The long run:  KVFS_CRASH_CYCLES=1000 python3 tests/integration/crash_test.py \
                                             CrashTest.test_sigkill_cycles
  test_power_cut_cycles   the same workload and checks, but the daemon runs with the TEST-ONLY
                          KVFS_TEST_POWER_CUT_SIGNAL=1 (tools/power_cut.h): its backing I/O goes through a
                          FaultInjectionEnv and the "kill" is SIGUSR2, on which the daemon freezes its backing
                          requests, drops every write not yet fdatasync'ed (files cut back to their synced
                          length, unsynced new files and renames undone) and _exit()s: a power cut or an NFS
                          client crash, which SIGKILL does not show (the page cache survives it).
                          KVFS_POWERCUT_CYCLES (default 20) cycles. The long run:
                            KVFS_POWERCUT_CYCLES=300 python3 tests/integration/crash_test.py \
                                CrashTest.test_power_cut_cycles
  test_torn_tail_cut_survives_journal_retirement   issue #6 made deterministic: a torn tail appended to a
                          SIGKILLed daemon's segment is CUT by the remount; after three clean stops (the CUT's
                          journal file retired) kvfs-fsck is clean after every stop.
  test_daemon_killed_during_slot_rewrites   SIGKILL while one writer rewrites slots (or page ranges) of a
                          64 MiB extent file with O_DIRECT pwrite + fsync: after each remount every page is
                          whole (the old bytes or one rewrite's), every fsync'd rewrite is there, the file is
                          the version of one fsync; kvfs-fsck --verify-data clean at the end.
                          KVFS_EXTENT_CRASH_CYCLES (default 4) cycles.
  test_writer_killed_mid_file   SIGKILL of the WRITER (not the daemon) in the middle of a temp file: the
                          final name never appears; the mount keeps working; same after a remount.
  test_case9_backing_eio_switch   docs/design.md §11 case 9 with "a fault-injection switch" (no root needed): the TEST-ONLY
                          SIGUSR1 switch of a KVFS_TEST_POWER_CUT_SIGNAL=1 daemon makes every backing write and
                          fdatasync fail with EIO; `echo data > k` and Python open/write/close/fsync report
                          EIO; the mount keeps serving committed files; after the switch is off and kvfs is
                          remounted, every file whose write reported success is there, and the others are
                          absent or complete.
  test_case9_backing_fails_under_writer   docs/design.md §11 case 9: the backing directory is a small tmpfs that
                          fills up under the writer (ENOSPC from the export); Python open/write/close/fsync
                          report ENOSPC or EIO; a file closed successfully just before another file takes
                          the export's last blocks (its deferred journal PUT then meets a full export) is
                          journaled once space returns; after a SIGKILL, the store's recovery (tmpfs grown)
                          and a remount, every file whose close reported success is there, byte-identical.
  test_prefix_after_sigkill   docs/semantics.md §6 "The crash contract": a one-thread client runs a random
                          sequence of puts (temp + rename, some fsync'd), unlinks and renames over 6 names
                          and logs each op; after SIGKILL + remount the directory must equal the state after
                          some prefix of the logged ops (reaching every fsync'd put), every file whole.
                          KVFS_PREFIX_CYCLES (default 12) cycles.

Unit-level equivalents: StoreFaultTest.PowerCutAtRandomMomentsUnderConcurrentWriters (store_fault_test.cc)
and the recovery tests (recovery_test.cc).

Environment: KVFS_BINARY (kvfs), KVFS_FSCK (kvfs-fsck; default next to kvfs), KVFS_CRASH_SEED.
"""
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvfs_fixture as kf  # noqa: E402

PY = sys.executable
NODE = "crashnode"
GC_MS = 20
SYNC_MS = 200  # --sync-interval-ms: a power cut may lose what was renamed less than GC_MS + SYNC_MS before it
POWER_CUT_EXIT = 86  # tools/power_cut.h kPowerCutExitCode
KIB = 1024
MIB = 1 << 20


def fsck_binary():
    b = os.environ.get("KVFS_FSCK")
    return b if b else os.path.join(os.path.dirname(kf.kvfs_binary()), "kvfs-fsck")


def make_content(relpath, size):
    """Self-describing value: a 128-byte header (path, size, sha256 of the body) + a body derived from it."""
    body_len = max(0, size - 128)
    seed = int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "little")
    body = random.Random(seed).randbytes(body_len)
    head = ("KVFSCRASH %s %d %s" % (relpath, size, hashlib.sha256(body).hexdigest())).encode()
    assert len(head) < 128, relpath
    return head + b" " * (127 - len(head)) + b"\n" + body


def verify_content(relpath, data):
    """None if data is a complete value written to relpath (or to relpath minus a .tmp suffix), else why."""
    if len(data) < 128:
        return "short (%d bytes)" % len(data)
    parts = data[:128].split()
    if len(parts) != 4 or parts[0] != b"KVFSCRASH":
        return "no header"
    path, size, digest = parts[1].decode(), int(parts[2]), parts[3].decode()
    if path != relpath and not (relpath.startswith(path + ".tmp")):
        return "header names %s" % path
    if size != len(data):
        return "size %d != header %d" % (len(data), size)
    if hashlib.sha256(data[128:]).hexdigest() != digest:
        return "sha256 mismatch"
    return None


# Writes b"data\n" to argv[1] like `echo data > k`, but exits nonzero (errno text on stderr) when the
# open, the write or the close fails.
K2_WRITER = r'''
import os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"data\n")
    finally:
        os.close(fd)
except OSError as e:
    sys.stderr.write("%s\n" % e)
    sys.exit(1)
'''


# Like K2_WRITER, with a 60 KiB user xattr set before the close: the file's journal PUT carries it, so the
# PUT needs new pages of the journal file (on a full tmpfs it cannot fit in the last page's slack).
K3_WRITER = r'''
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"data\n")
os.setxattr(fd, "user.big", b"x" * 61440)
os.close(fd)
'''


# The writer client: runs in its own process on the mount, logs "<event> <relpath> <monotonic>" lines to
# a log file outside the mount (O_APPEND, one write per line).
WRITER = r'''
import os, sys, time, random
sys.path.insert(0, sys.argv[4])
from crash_test import make_content
mnt, log, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
lfd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def note(ev, rel):
    os.write(lfd, ("%s %s %.6f\n" % (ev, rel, time.monotonic())).encode())
prefix = "s%d" % seed
i = 0
note("start", "-")
while True:
    d = "%s/%02x" % (prefix, rng.randrange(16))
    os.makedirs(os.path.join(mnt, d), exist_ok=True)
    size = rng.randrange(144 * 1024, 2304 * 1024 + 1)
    rel = "%s/chunk-%05d.bin" % (d, i)
    tmp = rel + ".tmp%d" % os.getpid()
    data = make_content(rel, size)
    durable = rng.random() < 0.25
    fd = os.open(os.path.join(mnt, tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for off in range(0, len(data), 1 << 20):
        os.write(fd, data[off:off + (1 << 20)])
    if durable:
        os.fsync(fd)
    os.close(fd)
    os.rename(os.path.join(mnt, tmp), os.path.join(mnt, rel))
    note("renamed", rel)
    if durable:
        dfd = os.open(os.path.join(mnt, d), os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        note("synced", rel)
    i += 1
    time.sleep(rng.random() * 0.02)
'''


class Daemon:
    """One `kvfs mount --foreground` process that this test started (the only pid it ever kills)."""

    def __init__(self, b, index=None, segment_size="4MiB", power_cut=False, extra=(), commit_delay_ms=None):
        self.b = b
        self.index = index or b.index
        self.power_cut = power_cut
        cmd = [kf.kvfs_binary(), "mount", b.mnt, "--backing", b.backing, "--index-dir", self.index,
               "--foreground", "--node-id", NODE, "--group-commit-ms", str(GC_MS), "--sync-interval-ms",
               str(SYNC_MS), "--segment-size", segment_size] + list(extra)
        env = dict(os.environ)
        if power_cut:
            env["KVFS_TEST_POWER_CUT_SIGNAL"] = "1"  # TEST ONLY: SIGUSR2 = power cut (tools/power_cut.h)
        if commit_delay_ms is not None:
            env["KVFS_TEST_COMMIT_DELAY_MS"] = str(commit_delay_ms)  # TEST ONLY: deferred-commit window
        self.errlog = open(os.path.join(b.root, "daemon.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.errlog, env=env)
        deadline = time.time() + 60
        while not kf.is_served(b.mnt):
            if self.proc.poll() is not None:
                raise RuntimeError("kvfs mount exited with %s (see %s/daemon.log)" % (self.proc.returncode, b.root))
            if time.time() > deadline:
                self.kill()
                raise RuntimeError("mount did not appear")
            time.sleep(0.01)

    def kill(self, before_unmount=None, power_cut=False):
        """SIGKILL, or with power_cut a simulated power cut (SIGUSR2: unsynced backing writes dropped, then
        _exit). Returns False if a power cut did not end the daemon as it should (then it was SIGKILLed)."""
        ok = True
        if power_cut and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGUSR2)
            try:
                ok = self.proc.wait(timeout=20) == POWER_CUT_EXIT
            except subprocess.TimeoutExpired:
                ok = False
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if before_unmount:
            before_unmount()  # e.g. kill the writer first, or it writes into the bare mountpoint
        subprocess.run(["fusermount3", "-u", "-z", self.b.mnt], capture_output=True)
        self.errlog.close()
        return ok

    def stop(self):
        kf.unmount(self.b.mnt)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.errlog.close()
        return self.proc.returncode


def walk_files(mnt):
    out = []
    for root, _dirs, files in os.walk(mnt):
        for f in files:
            out.append(os.path.relpath(os.path.join(root, f), mnt))
    return sorted(out)


def snapshot(mnt):
    """relpath -> sha256 of every file (and verification of each)."""
    snap, bad = {}, []
    for rel in walk_files(mnt):
        data = kf.read_file(os.path.join(mnt, rel))
        why = verify_content(rel, data)
        if why:
            bad.append((rel, why))
        snap[rel] = hashlib.sha256(data).hexdigest()
    return snap, bad


def run_fsck(*args):
    r = subprocess.run([fsck_binary()] + [str(a) for a in args], capture_output=True, text=True, timeout=300)
    return r


@kf.skip_unless_fuse
class CrashTest(unittest.TestCase):
    def test_sigkill_cycles(self):
        self.run_cycles(int(os.environ.get("KVFS_CRASH_CYCLES", "50")), power_cut=False)

    def test_power_cut_cycles(self):
        self.run_cycles(int(os.environ.get("KVFS_POWERCUT_CYCLES", "20")), power_cut=True)

    def run_cycles(self, cycles, power_cut):
        seed = int(os.environ.get("KVFS_CRASH_SEED", str(int(time.time()))))
        margin = int(os.environ.get("KVFS_CRASH_MARGIN_MS", "500")) / 1000.0
        rng = random.Random(seed)
        t_start = time.time()
        stats = dict(kind="power cut" if power_cut else "SIGKILL", cycles=0, renamed=0, synced=0,
                     checked_durable=0, visible=0, index_compares=0, lost_young=0, min_lost_age=None,
                     fsck_runs=0, recovery_cuts=0, recovery_seals=0)
        b = None
        daemon = None
        log = None
        try:
            for cycle in range(cycles):
                if cycle % 25 == 0:
                    if daemon:
                        self.final_checks(b, daemon, stats)
                        daemon = None
                    if b:
                        b.cleanup()
                    b = kf.Backing(prefix="kvfs-crash-")
                    log = os.path.join(b.root, "writer.log")
                    daemon = Daemon(b, power_cut=power_cut)
                    expected = {}  # relpath -> True once it must survive every later crash
                # --- writer + kill at a random moment ---
                open(log, "w").close()
                writer = subprocess.Popen([PY, "-c", WRITER, b.mnt, log, str(seed * 100000 + cycle), HERE],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                # The kill comes at a random moment of the writer's work (not of its interpreter's start).
                started = time.time()
                while os.path.getsize(log) == 0 and writer.poll() is None and time.time() - started < 30:
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.05, 0.6))
                t_kill = time.monotonic()
                # Then the writer (only the pid we started; it blocks on or errors from the dead mount),
                # before the lazy unmount, or it would write into the bare mountpoint.
                cut_ok = daemon.kill(before_unmount=lambda: (writer.kill(), writer.wait()), power_cut=power_cut)
                self.assertTrue(cut_ok, "cycle %d seed %d: the power cut did not end the daemon with exit %d (see "
                                "%s/daemon.log)" % (cycle, seed, POWER_CUT_EXIT, b.root))
                # --- remount and check ---
                daemon = Daemon(b, power_cut=power_cut)
                rec = json.loads(os.getxattr(b.mnt, "user.kvfs.stats"))["recovery"]
                stats["recovery_cuts"] += rec["cuts"]
                stats["recovery_seals"] += rec["seals"]
                events = []
                with open(log) as f:
                    for line in f:
                        p = line.split()
                        if len(p) == 3:
                            events.append((p[0], p[1], float(p[2])))
                must = {}
                for ev, rel, t in events:
                    if ev == "renamed":
                        stats["renamed"] += 1
                        window = GC_MS / 1000.0 + (SYNC_MS / 1000.0 if power_cut else 0) + margin
                        if t < t_kill - window:
                            must[rel] = "renamed %.3f s before the kill" % (t_kill - t)
                    elif ev == "synced":
                        stats["synced"] += 1
                        must[rel] = "fsync'd"
                for rel in expected:
                    must.setdefault(rel, "survived an earlier crash")
                for rel, why in sorted(must.items()):
                    path = os.path.join(b.mnt, rel)
                    self.assertTrue(os.path.exists(path), "cycle %d seed %d: %s (%s) is missing" % (cycle, seed, rel, why))
                    err = verify_content(rel, kf.read_file(path))
                    self.assertIsNone(err, "cycle %d seed %d: %s (%s): %s" % (cycle, seed, rel, why, err))
                    stats["checked_durable"] += 1
                # Young renames that did not survive (allowed): how young were they?
                for ev, rel, t in events:
                    if ev == "renamed" and rel not in must and not os.path.exists(os.path.join(b.mnt, rel)):
                        stats["lost_young"] += 1
                        age = t_kill - t
                        stats["min_lost_age"] = age if stats["min_lost_age"] is None else min(stats["min_lost_age"], age)
                snap, bad = snapshot(b.mnt)
                self.assertEqual(bad, [], "cycle %d seed %d: visible files with wrong bytes" % (cycle, seed))
                stats["visible"] += len(snap)
                for rel in snap:
                    if ".tmp" not in rel:
                        expected[rel] = True
                stats["cycles"] += 1
                if cycle % 10 == 9:
                    daemon = self.compare_rebuilt_index(b, daemon, stats, power_cut)
            if daemon:
                self.final_checks(b, daemon, stats)
                daemon = None
            if cycles >= 5:  # each crash after a record was written leaves a segment the remount seals
                self.assertGreater(stats["recovery_seals"], 0, json.dumps(stats))
        finally:
            if daemon:
                daemon.kill()
            if b:
                b.cleanup()
            stats["seconds"] = round(time.time() - t_start, 1)
            stats["seed"] = seed
            sys.stderr.write("crash_test: %s\n" % json.dumps(stats))

    def compare_rebuilt_index(self, b, daemon, stats, power_cut=False):
        """Invariant 3 + 4: clean unmount; kvfs-fsck finds no problem at all (the remounts cut every torn
        tail and sealed every crashed segment); the index rebuilt from the export equals the recovered
        one. Returns a fresh daemon."""
        self.assertEqual(daemon.stop(), 0)
        r = run_fsck(b.backing, "--json")
        self.assertIn(r.returncode, (0, 1), r.stderr)
        rep = json.loads(r.stdout)
        stats["fsck_runs"] += 1
        bad = [f for f in rep["findings"] if f["severity"] == "problem"]
        # No tolerance: a segment CUT made by a remount must outlive the journal file that held it (the
        # snapshots carry it; issue #6, RecoveryTest.SegmentCutSurvivesJournalRetirement).
        self.assertEqual(bad, [], json.dumps(bad, indent=1)[:3000])
        self.assertEqual(r.returncode, 0, r.stdout[:3000])
        rebuilt = os.path.join(b.root, "rebuilt-index")
        shutil.rmtree(rebuilt, ignore_errors=True)
        r = run_fsck(b.backing, "--node", NODE, "--rebuild-index", rebuilt)
        self.assertIn(r.returncode, (0, 1), r.stdout + r.stderr)
        a = run_fsck("--dump-index", b.index, "--node", NODE)
        c = run_fsck("--dump-index", rebuilt, "--node", NODE)
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(c.returncode, 0, c.stderr)
        da, dc = json.loads(a.stdout), json.loads(c.stdout)
        self.assertEqual(sorted(da), sorted(dc))
        self.assertEqual(da, dc)
        stats["index_compares"] += 1
        return Daemon(b, power_cut=power_cut)

    def final_checks(self, b, daemon, stats):
        """Index comparison, then a mount over the rebuilt index lists and reads exactly the same."""
        snap_before, bad = snapshot(b.mnt)
        self.assertEqual(bad, [])
        daemon = self.compare_rebuilt_index(b, daemon, stats)
        daemon.stop()
        rebuilt = os.path.join(b.root, "rebuilt-index")
        d2 = Daemon(b, index=rebuilt)
        try:
            snap_after, bad = snapshot(b.mnt)
        finally:
            d2.stop()
        self.assertEqual(bad, [])
        self.assertEqual(snap_before, snap_after)
        # --repair after the crashes and remounts: nothing left to repair.
        r = run_fsck(b.backing, "--repair", "--json")
        self.assertEqual(r.returncode, 0, r.stdout[:3000] + r.stderr)
        self.assertEqual(json.loads(r.stdout)["repaired"], 0, r.stdout[:3000])
        r2 = run_fsck(b.backing, "--json")
        rep2 = json.loads(r2.stdout)
        left = [f for f in rep2["findings"] if f["severity"] == "problem"]
        self.assertEqual(left, [], json.dumps(left, indent=1)[:3000])
        self.assertEqual(r2.returncode, 0)

    def test_torn_tail_cut_survives_journal_retirement(self):
        """Issue #6, the CI finding made deterministic: a SIGKILLed daemon's segment gets a torn tail (1 MiB
        appended after its last record, as an interrupted write leaves), the remount CUTs it in journal-<G>-0,
        then three clean stops (three snapshots) retire that journal file. kvfs-fsck after each clean stop
        must find no problem (it reported segment-torn-tail once the CUT's journal file was gone)."""
        b = kf.Backing(prefix="kvfs-crash-cut-")
        d = Daemon(b)
        node_dir = os.path.join(b.backing, ".kvfs", "v1", "nodes", NODE)
        try:
            for i in range(3):
                kf.write_file(os.path.join(b.mnt, "f%d" % i), make_content("f%d" % i, 300 * KIB))
            fd = os.open(b.mnt, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            d.kill()
            d = None
            segs = sorted(f for f in os.listdir(os.path.join(node_dir, "seg")) if f.endswith(".kseg"))
            self.assertTrue(segs)
            with open(os.path.join(node_dir, "seg", segs[-1]), "ab") as f:
                f.write(random.Random(6).randbytes(MIB))
            d = Daemon(b)
            rec = json.loads(os.getxattr(b.mnt, "user.kvfs.stats"))["recovery"]
            self.assertEqual(rec["cuts"], 1, rec)
            cut_journal = sorted(f for f in os.listdir(node_dir) if f.startswith("journal-"))[-1]
            for i in range(3):
                kf.write_file(os.path.join(b.mnt, "g%d" % i), make_content("g%d" % i, 200 * KIB))
                self.assertEqual(d.stop(), 0)
                d = None
                r = run_fsck(b.backing, "--json")
                bad = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "problem"]
                self.assertEqual(bad, [], "after clean stop %d: %s" % (i, json.dumps(bad, indent=1)[:3000]))
                self.assertEqual(r.returncode, 0, r.stdout[:3000])
                d = Daemon(b)
            self.assertFalse(os.path.exists(os.path.join(node_dir, cut_journal)), "the CUT's journal was not retired")
            for i in range(3):
                self.assertIsNone(verify_content("f%d" % i, kf.read_file(os.path.join(b.mnt, "f%d" % i))))
                self.assertIsNone(verify_content("g%d" % i, kf.read_file(os.path.join(b.mnt, "g%d" % i))))
            self.assertEqual(d.stop(), 0)
            d = None
            r = run_fsck(b.backing, "--repair", "--json")
            self.assertEqual(r.returncode, 0, r.stdout[:3000] + r.stderr)
            self.assertEqual(json.loads(r.stdout)["repaired"], 0, r.stdout[:3000])
        finally:
            if d:
                d.kill()
            b.cleanup()

    def test_close_survives_writers_still_open(self):
        """A close(2) that returned is a commit point even while other writable handles stay open (found
        by a breaker): (a) a file rewritten in place, closed, and reopened O_RDWR within the deferred-commit
        window (widened to 300 ms here; 5 ms by default) by a handle that writes nothing, a loader's open;
        (b) two handles of one file, the first writes its slice and closes while the second stays open;
        (c) a 2 MiB file whose first 1 MiB "slot" is rewritten and closed, then reopened within the window
        by a writer that rewrites half of the second slot and stays open (the slot-file pattern: a peer
        read a half-rewritten slot when the close's commit took the joined writer's bytes too).
        The daemon is SIGKILLed 1.5 s after those closes, the other handles still open. Before, the
        reopen joined the pending version and its commit waited for the last writer: the rewrite (a) and
        the slice (b) were lost, and peers never saw them; now each close commits (fuse
        closes_committed_open counts these commits), and a last writer's close commits exactly what it
        closed (c)."""
        b = kf.Backing(prefix="kvfs-crash-join-")
        d = Daemon(b, commit_delay_ms=300)
        fds = []
        try:
            a, two = os.path.join(b.mnt, "a"), os.path.join(b.mnt, "two")
            kf.write_file(a, b"A" * MIB)
            fd = os.open(two, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, 2 * MIB)
            os.close(fd)
            time.sleep(0.6)  # both committed (300 ms commit delay + group commit)
            fd = os.open(a, os.O_RDWR)
            os.pwrite(fd, b"B" * 4096, 8192)
            os.close(fd)
            fds.append(os.open(a, os.O_RDWR))  # joins the version whose commit is pending
            w1, w2 = os.open(two, os.O_RDWR), os.open(two, os.O_RDWR)
            fds.append(w2)
            os.pwrite(w1, b"1" * MIB, 0)
            os.close(w1)  # its slice closed; w2 stays open (and writes nothing)
            # (c) a slot rewritten and closed, then a writer joins within the window and rewrites half
            # of the next slot, still open at the kill: the close's commit holds the closed slots only.
            slot = os.path.join(b.mnt, "slot")
            kf.write_file(slot, b"0" * (2 * MIB))
            time.sleep(0.6)
            fd = os.open(slot, os.O_RDWR)
            os.pwrite(fd, b"P" * MIB, 0)
            os.close(fd)
            fd = os.open(slot, os.O_RDWR)  # joins the version whose commit is pending
            fds.append(fd)
            os.pwrite(fd, b"Q" * (MIB // 2), MIB)  # half of the next "slot": never closed
            time.sleep(1.5)
            st = kf.stats(b.mnt)["fuse"]
            self.assertGreaterEqual(st["closes_committed_open"], 3, st)
            d.kill()
            for f in fds:
                try:
                    os.close(f)
                except OSError:
                    pass
            fds = []
            d = Daemon(b)
            got = kf.read_file(a)
            self.assertEqual(len(got), MIB)
            self.assertEqual(got[8192:8192 + 4096], b"B" * 4096, "the closed rewrite was lost")
            self.assertEqual(got[:8192] + got[8192 + 4096:], b"A" * (MIB - 4096))
            got = kf.read_file(two)
            self.assertEqual(len(got), 2 * MIB)
            self.assertTrue(got[:MIB] == b"1" * MIB, "the closed slice was lost")
            self.assertTrue(got[MIB:] == bytes(MIB))
            got = kf.read_file(slot)
            self.assertEqual(len(got), 2 * MIB)
            self.assertTrue(got[:MIB] == b"P" * MIB, "the closed slot was lost")
            self.assertTrue(got[MIB:] == b"0" * MIB,
                            "the joined writer's unclosed bytes were committed: %r" % got[MIB:MIB + 8])
            self.assertEqual(d.stop(), 0)
        finally:
            for f in fds:
                try:
                    os.close(f)
                except OSError:
                    pass
            d.kill()
            b.cleanup()

    def test_writer_killed_mid_file(self):
        b = kf.Backing(prefix="kvfs-crash-w-")
        d = Daemon(b)
        try:
            code = r'''
import os, sys, time
fd = os.open(os.path.join(sys.argv[1], "big.tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(4096):
    os.write(fd, bytes([i % 251]) * (1 << 20))
    if i == 3:
        print("started", flush=True)
    time.sleep(0.01)
os.close(fd)
os.rename(os.path.join(sys.argv[1], "big.tmp"), os.path.join(sys.argv[1], "big"))
'''
            w = subprocess.Popen([PY, "-c", code, b.mnt], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self.assertEqual(w.stdout.readline().strip(), b"started")
            time.sleep(0.1)
            w.kill()
            w.wait()
            w.stdout.close()
            self.assertFalse(os.path.exists(os.path.join(b.mnt, "big")))
            # The mount keeps working.
            kf.write_file(os.path.join(b.mnt, "after"), make_content("after", 300 * KIB))
            self.assertIsNone(verify_content("after", kf.read_file(os.path.join(b.mnt, "after"))))
            self.assertEqual(d.stop(), 0)
            d = Daemon(b)
            self.assertFalse(os.path.exists(os.path.join(b.mnt, "big")))
            self.assertIsNone(verify_content("after", kf.read_file(os.path.join(b.mnt, "after"))))
            # Whatever the temp name holds is a prefix of what was written (never other bytes).
            tmp = os.path.join(b.mnt, "big.tmp")
            if os.path.exists(tmp):
                data = kf.read_file(tmp)
                for i in range(0, len(data), 1 << 20):
                    self.assertEqual(data[i:i + (1 << 20)], bytes([(i >> 20) % 251]) * len(data[i:i + (1 << 20)]))
        finally:
            d.kill()
            b.cleanup()

    def test_daemon_killed_during_spilled_writes(self):
        # SIGKILL of the daemon while files are written through a 4 MiB staging budget: one file still
        # being written under its final name (spilled, never closed), one being closed (its final record
        # streamed from its spills). Nothing is visible under the never-closed file's name after the
        # remount; the closing one is absent or whole; the spills are orphans (never problems).
        b = kf.Backing(prefix="kvfs-crash-s-")
        extra = ["--staging-size", "4MiB"]
        d = Daemon(b, extra=extra)
        writer = None
        try:
            keep = make_content("keep", 3 * MIB)
            kf.write_file(os.path.join(b.mnt, "keep"), keep)
            fd = os.open(b.mnt, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            code = r'''
import os, sys, threading
mnt = sys.argv[1]
def blk(tag, k):
    return (tag + "|%d|" % k).encode().ljust(4096, b".") * 256
fd = os.open(os.path.join(mnt, "final"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for k in range(24):
    os.pwrite(fd, blk("final", k), k << 20)
cfd = os.open(os.path.join(mnt, "closing"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for k in range(96):
    os.pwrite(cfd, blk("closing", k), k << 20)
print("spilled", flush=True)
sys.stdin.readline()
threading.Thread(target=lambda: os.close(cfd), daemon=True).start()
k = 24
while True:
    try:
        os.pwrite(fd, blk("final", k), k << 20)
    except OSError:
        break
    k += 1
'''
            writer = subprocess.Popen([PY, "-c", code, b.mnt], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL)
            self.assertEqual(writer.stdout.readline().strip(), b"spilled")
            st = kf.stats(b.mnt)["fuse"]
            self.assertGreater(st["spills"], 0, st)
            self.assertGreaterEqual(st["spilled_bytes"], 100 * MIB, st)
            writer.stdin.write(b"go\n")
            writer.stdin.flush()
            time.sleep(0.05)  # the close and the writes are under way (the outcome is checked either way)

            def stop_writer():
                writer.kill()
                writer.wait()
            d.kill(before_unmount=stop_writer)
            d = Daemon(b, extra=extra)
            names = sorted(os.listdir(b.mnt))
            self.assertNotIn("final", names)
            self.assertIn("keep", names)
            self.assertIsNone(verify_content("keep", kf.read_file(os.path.join(b.mnt, "keep"))))
            if "closing" in names:  # committed before the kill: then whole
                want = b"".join(("closing|%d|" % k).encode().ljust(4096, b".") * 256 for k in range(96))
                self.assertTrue(kf.read_file(os.path.join(b.mnt, "closing")) == want, "closing: wrong bytes")
            sys.stderr.write("\nkilled during spilled writes: closing file %s after the remount\n" %
                             ("committed" if "closing" in names else "absent"))
            self.assertEqual(d.stop(), 0)
            r = run_fsck(b.backing, "--json", "--verify-data")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            rep = json.loads(r.stdout)
            problems = [f for f in rep["findings"] if f["severity"] == "problem"]
            self.assertEqual(problems, [])
            self.assertGreater(rep["nodes"][0]["provisional_records"], 0)
        finally:
            if writer:
                if writer.poll() is None:
                    writer.kill()
                    writer.wait()
                writer.stdin.close()
                writer.stdout.close()
            d.kill()
            b.cleanup()

    def test_daemon_killed_during_slot_rewrites(self):
        # SIGKILL of the daemon while one writer rewrites slots of a 64 MiB extent file in place (O_RDWR |
        # O_DIRECT, a 2 MiB slot or a page range of one per pwrite, fsync after each, the vLLM slot file of
        # issue #18), at a random moment (after 1-6 acknowledged fsyncs, plus 0-40 ms). After each remount:
        # every 4 KiB page is exactly the page of the file before the cycle or of one rewrite that covered
        # it (never a mix within a page, never other bytes); every page an acknowledged fsync wrote reads
        # that fsync's bytes or a later rewrite's; and the file is exactly the state after some fsync (the
        # commits are whole versions: each page the newest rewrite <= K that covered it, K >= the last
        # acknowledged). After a clean unmount kvfs-fsck --verify-data finds no problem.
        # KVFS_EXTENT_CRASH_CYCLES (default 4).
        cycles = int(os.environ.get("KVFS_EXTENT_CRASH_CYCLES", "4"))
        seed = int(os.environ.get("KVFS_CRASH_SEED", str(int(time.time()))))
        rng = random.Random(seed)
        sys.stderr.write("\nslot rewrites: KVFS_CRASH_SEED=%d\n" % seed)
        page_size, slot_size, size = 4096, 2 * MIB, 64 * MIB
        npages = size // page_size

        def page(k, p):  # the bytes rewrite k (-1: the first version) puts in page p
            return hashlib.sha256(b"%d:%d" % (k, p)).digest() * (page_size // 32)
        b = kf.Backing(prefix="kvfs-crash-x-")
        d = Daemon(b)
        writer = None
        path = os.path.join(b.mnt, "slots.bin")
        try:
            pages = [page(-1, p) for p in range(npages)]
            kf.write_file(path, b"".join(pages))
            fd = os.open(b.mnt, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            code = r'''
import hashlib, mmap, os, random, sys
path, seed, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PAGE, SLOT, SIZE = 4096, 2 << 20, 64 << 20
rng = random.Random(seed)
buf = mmap.mmap(-1, SLOT)  # page-aligned, as O_DIRECT needs
fd = os.open(path, os.O_RDWR | os.O_DIRECT)
while True:
    slot = rng.randrange(SIZE // SLOT)
    lo, n = 0, SLOT // PAGE
    if rng.random() < 0.5:
        lo = rng.randrange(SLOT // PAGE)
        n = rng.randint(1, SLOT // PAGE - lo)
    first = slot * SLOT // PAGE + lo
    for i in range(n):
        buf[i * PAGE:(i + 1) * PAGE] = hashlib.sha256(b"%d:%d" % (k, first + i)).digest() * (PAGE // 32)
    print("start %d %d %d" % (k, first, n), flush=True)
    os.pwrite(fd, memoryview(buf)[:n * PAGE], first * PAGE)
    os.fsync(fd)
    print("synced %d" % k, flush=True)
    k += 1
'''
            k0 = 0
            totals = {"rewrites": 0, "synced": 0, "pages_checked": 0, "unacked_kept": 0}
            for cycle in range(cycles):
                writer = subprocess.Popen([PY, "-c", code, path, str(rng.randrange(1 << 30)), str(k0)],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                want_acks, acks, lines = rng.randint(1, 6), 0, []
                deadline = time.time() + 120
                while acks < want_acks and time.time() < deadline:
                    line = writer.stdout.readline()
                    if not line:
                        break
                    lines.append(line)
                    acks += line.startswith("synced")
                self.assertEqual(acks, want_acks, "writer: %r" % lines[-3:])
                time.sleep(rng.random() * 0.04)

                def stop_writer():
                    writer.kill()
                    writer.wait()
                d.kill(before_unmount=stop_writer)
                lines += writer.stdout.readlines()
                writer.stdout.close()
                writer = None
                started, synced = {}, []
                for line in lines:
                    f = line.split()
                    if f and f[0] == "start":
                        started[int(f[1])] = (int(f[2]), int(f[3]))
                    elif f and f[0] == "synced":
                        synced.append(int(f[1]))
                last_synced = max(synced)
                d = Daemon(b)
                data = kf.read_file(path)
                self.assertEqual(len(data), size)
                got = [data[p * page_size:(p + 1) * page_size] for p in range(npages)]
                # Per page: which rewrite (or the cycle's first version, -1) it shows.
                writers_of = {}
                for k, (first, n) in started.items():
                    for p in range(first, first + n):
                        writers_of.setdefault(p, []).append(k)
                for p in range(npages):
                    ks = writers_of.get(p, [])
                    shown = -1 if got[p] == pages[p] else next((k for k in ks if got[p] == page(k, p)), None)
                    self.assertIsNotNone(shown, "cycle %d: page %d holds bytes no write put there" % (cycle, p))
                    durable = max([k for k in ks if k <= last_synced], default=-1)
                    self.assertGreaterEqual(shown, durable, "cycle %d: page %d lost the fsync'd rewrite %d" %
                                            (cycle, p, durable))
                # The whole file is the version of one fsync K >= the last acknowledged one.
                candidates = [k for k in sorted(started) if k >= last_synced]
                matches = []
                for kk in candidates:
                    ok = True
                    for p in range(npages):
                        ks = [k for k in writers_of.get(p, []) if k <= kk]
                        want = page(max(ks), p) if ks else pages[p]
                        if got[p] != want:
                            ok = False
                            break
                    if ok:
                        matches.append(kk)
                self.assertTrue(matches, "cycle %d: not the state after any fsync >= %d" % (cycle, last_synced))
                totals["rewrites"] += len(started)
                totals["synced"] += len(synced)
                totals["pages_checked"] += npages
                totals["unacked_kept"] += max(matches) > last_synced
                pages = got
                k0 = max(started) + 1
            sys.stderr.write("slot rewrites: %d cycles, %d rewrites started, %d fsyncs acknowledged, %d pages "
                             "verified, %d cycles kept the rewrite whose fsync was in flight\n" %
                             (cycles, totals["rewrites"], totals["synced"], totals["pages_checked"],
                              totals["unacked_kept"]))
            self.assertEqual(d.stop(), 0)
            r = run_fsck(b.backing, "--json", "--verify-data")
            rep = json.loads(r.stdout)
            problems = [f for f in rep["findings"] if f["severity"] == "problem"]
            self.assertEqual(problems, [], json.dumps(problems, indent=1)[:3000])
            self.assertEqual(r.returncode, 0, r.stderr)
            sys.stderr.write("slot rewrites: kvfs-fsck --verify-data: 0 problems, %d info findings, %d bytes "
                             "verified\n" % (len(rep["findings"]), rep["nodes"][0]["verified_value_bytes"]))
        finally:
            if writer:
                if writer.poll() is None:
                    writer.kill()
                    writer.wait()
                writer.stdout.close()
            d.kill()
            b.cleanup()

    def test_case9_backing_eio_switch(self):
        import errno as E
        b = kf.Backing(prefix="kvfs-case9s-")
        d = Daemon(b, power_cut=True)
        try:
            ok, failed, errors = [], [], []
            sh = subprocess.run(["sh", "-c", "echo data > %s/k1" % b.mnt], capture_output=True, text=True)
            self.assertEqual(sh.returncode, 0, sh.stderr)
            ok.append(("k1", b"data\n"))
            for i in range(3):
                rel = "before%d" % i
                data = make_content(rel, 700 * KIB)
                kf.write_file(os.path.join(b.mnt, rel), data)
                ok.append((rel, data))
            fd = os.open(b.mnt, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            os.kill(d.proc.pid, signal.SIGUSR1)  # the backing store fails from now on
            time.sleep(0.3)
            # The shell ignores close(2)'s error, so `echo > k2` may "succeed": k2 must then be absent or
            # complete after the remount. `dd conv=fsync` (fsync on the writing fd) reports the error.
            sh = subprocess.run(["sh", "-c", "echo data > %s/k2" % b.mnt], capture_output=True, text=True)
            if sh.returncode != 0:
                self.assertRegex(sh.stderr, "Input/output error")
            sync = subprocess.run(["sh", "-c", "echo data | dd of=%s/k3 conv=fsync status=none" % b.mnt],
                                  capture_output=True, text=True)
            self.assertNotEqual(sync.returncode, 0, "dd conv=fsync of k3 succeeded on a failing backing store")
            self.assertRegex(sync.stderr, "Input/output error")
            failed += ["k2", "k3"]
            for i in range(4):
                rel = "during%d" % i
                data = make_content(rel, 300 * KIB)
                try:
                    fd = os.open(os.path.join(b.mnt, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        os.write(fd, data)
                        if i % 2:
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                    ok.append((rel, data))
                except OSError as e:
                    errors.append(e.errno)
                    failed.append(rel)
            self.assertEqual(errors, [E.EIO] * 4, errors)
            # The mount keeps serving what was committed before.
            for rel, data in ok:
                self.assertEqual(kf.read_file(os.path.join(b.mnt, rel)), data, rel)
            os.kill(d.proc.pid, signal.SIGUSR1)  # the backing store recovers
            time.sleep(0.3)
            kf.write_file(os.path.join(b.mnt, "after"), make_content("after", 200 * KIB))
            ok.append(("after", make_content("after", 200 * KIB)))
            self.assertEqual(d.stop(), 0)
            d = Daemon(b)
            for rel, data in ok:
                p = os.path.join(b.mnt, rel)
                self.assertTrue(os.path.exists(p), rel + " reported success but is missing")
                self.assertEqual(kf.read_file(p), data, rel)
            for rel in failed:
                p = os.path.join(b.mnt, rel)
                if os.path.exists(p) and rel not in ("k2", "k3"):  # absent, or complete
                    self.assertIsNone(verify_content(rel, kf.read_file(p)), rel)
            for k in ("k2", "k3"):
                p = os.path.join(b.mnt, k)
                if os.path.exists(p):
                    self.assertEqual(kf.read_file(p), b"data\n", k)
            # The failed writes left nothing that kvfs-fsck calls a problem after a clean stop (issue #6).
            self.assertEqual(d.stop(), 0)
            r = run_fsck(b.backing, "--json")
            bad = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "problem"]
            self.assertEqual(bad, [], json.dumps(bad, indent=1)[:3000])
            self.assertEqual(r.returncode, 0, r.stdout[:3000])
            d = Daemon(b)
            sys.stderr.write("case9 switch: %d files ok, errors %s, echo k2 rc=%d %s\n" % (
                len(ok), errors, sh.returncode, sh.stderr.strip()))
        finally:
            d.kill()
            b.cleanup()

    @unittest.skipUnless(os.geteuid() == 0, "needs root (tmpfs mount)")
    def test_case9_backing_fails_under_writer(self):
        b = kf.Backing(prefix="kvfs-case9-")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", b.backing], capture_output=True)
        if r.returncode != 0:
            b.cleanup()
            self.skipTest("cannot mount tmpfs: %s" % r.stderr)
        d = None
        try:
            # A 1.5 s deferred-commit window: k3's journal PUT (below) runs well after the export filled up.
            d = Daemon(b, segment_size="4MiB", commit_delay_ms=1500)
            ok, failed, errors = [], [], []
            sh = subprocess.run(["sh", "-c", "echo data > %s/k1" % b.mnt], capture_output=True, text=True)
            self.assertEqual(sh.returncode, 0, sh.stderr)
            ok.append(("k1", b"data\n"))
            for i in range(200):
                rel = "f%03d" % i
                data = make_content(rel, 1536 * KIB)
                try:
                    fd = os.open(os.path.join(b.mnt, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        os.write(fd, data)
                        if i % 2:
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                    ok.append((rel, data))
                except OSError as e:
                    errors.append(e.errno)
                    failed.append(rel)
                    if len(errors) >= 3:
                        break
            self.assertTrue(errors, "the 40 MiB backing never filled up")
            import errno as E
            self.assertTrue(all(e in (E.ENOSPC, E.EIO) for e in errors), errors)
            # k2 on the full export. Not `sh -c "echo data > k2"`: dash restores stdout with dup2(2), whose
            # implicit close discards close(2)'s error, so the shell exits 0 even when the FLUSH reported
            # ENOSPC. This writer reports every step's error, close included.
            sh = subprocess.run([PY, "-c", K2_WRITER, os.path.join(b.mnt, "k2")], capture_output=True, text=True)
            if sh.returncode != 0:
                self.assertRegex(sh.stderr, "No space|Input/output")
            sys.stderr.write("case9: %d files ok, errors %s, k2 close rc=%d %s\n" % (
                len(ok), errors, sh.returncode, sh.stderr.strip()))
            # k3: closed successfully (its record written) while the export has a little room, then someone
            # else's file takes every free block before k3's deferred journal PUT. The PUT (60 KiB: k3's
            # xattr) meets ENOSPC: it is kept and retried (RESERVE freed for it, and again when the space
            # comes back) until it is durable.
            subprocess.run(["mount", "-o", "remount,size=46m", b.backing], check=True)

            def stats():
                return json.loads(os.getxattr(b.mnt, "user.kvfs.stats"))

            dfd = os.open(b.mnt, os.O_RDONLY)  # fsyncdir runs the deferred commits of the files above now
            try:
                os.fsync(dfd)
            except OSError:
                pass
            os.close(dfd)
            committed0 = stats()["fuse"]["versions_committed"]
            k3 = subprocess.run([PY, "-c", K3_WRITER, os.path.join(b.mnt, "k3")], capture_output=True, text=True)
            self.assertEqual(k3.returncode, 0, k3.stderr)
            filler = os.path.join(b.backing, "filler")
            ffd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
            for chunk in (64 * KIB, 4 * KIB):  # fill the export to the last page
                try:
                    while True:
                        os.write(ffd, b"\0" * chunk)
                except OSError:
                    pass
            os.close(ffd)
            deadline = time.time() + 60
            while stats()["fuse"]["versions_committed"] <= committed0:  # k3's PUT was attempted
                self.assertLess(time.time(), deadline, "k3's deferred commit never ran")
                time.sleep(0.05)
            while stats()["journal_retries"] == 0 and stats()["unjournaled_entries"] != 0:  # its group commit
                self.assertLess(time.time(), deadline, "k3's group commit never ran")
                time.sleep(0.01)
            self.assertGreaterEqual(stats()["journal_retries"], 1, "k3's PUT fit on a full export?")
            os.unlink(filler)  # the space comes back
            deadline = time.time() + 60
            while stats()["unjournaled_entries"] != 0:
                self.assertLess(time.time(), deadline, "owed journal entries were never retried")
                time.sleep(0.05)
            sys.stderr.write("case9: k3 journaled after %d failed group commit(s)\n" % stats()["journal_retries"])
            ok.append(("k3", b"data\n"))
            # A crash now (SIGKILL): every file whose close returned 0 is journaled. The store recovers (the
            # export grows) and kvfs is remounted.
            d.kill()
            subprocess.run(["mount", "-o", "remount,size=400m", b.backing], check=True)
            d = Daemon(b, segment_size="4MiB")
            for rel, data in ok:
                p = os.path.join(b.mnt, rel)
                self.assertTrue(os.path.exists(p), rel + " reported success but is missing")
                self.assertEqual(kf.read_file(p), data, rel)
            self.assertEqual(os.getxattr(os.path.join(b.mnt, "k3"), "user.big"), b"x" * 61440)
            for rel in failed:
                p = os.path.join(b.mnt, rel)
                if os.path.exists(p):  # absent, or complete (a later RELEASE may have committed it)
                    self.assertIsNone(verify_content(rel, kf.read_file(p)), rel)
            # A close that returned 0 on the full export is never lost, even if its deferred journal PUT
            # met ENOSPC (docs/semantics.md "Full backing store: the journal"); a failed one left k2 absent
            # or complete.
            k2 = os.path.join(b.mnt, "k2")
            if sh.returncode == 0:
                self.assertTrue(os.path.exists(k2), "k2's close reported success but k2 is missing")
                self.assertEqual(kf.read_file(k2), b"data\n")
            elif os.path.exists(k2):
                self.assertEqual(kf.read_file(k2), b"data\n")
            kf.write_file(os.path.join(b.mnt, "after"), b"x" * 5000)
            self.assertEqual(kf.read_file(os.path.join(b.mnt, "after")), b"x" * 5000)
            # Failed segment writes left nothing behind: after a clean stop kvfs-fsck finds no problem (issue
            # #6: bytes of a failed write past a later seal's trailer read as a torn tail).
            self.assertEqual(d.stop(), 0)
            d = None
            r = run_fsck(b.backing, "--json")
            bad = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "problem"]
            self.assertEqual(bad, [], json.dumps(bad, indent=1)[:3000])
            self.assertEqual(r.returncode, 0, r.stdout[:3000])
        finally:
            if d:
                d.kill()
            subprocess.run(["umount", "-l", b.backing], capture_output=True)
            b.cleanup()


# The op-sequence client of test_prefix_after_sigkill: one thread, ops one after another on a few names in
# one directory; logs "begin I OP ARGS" before and "done I" after each op (O_APPEND, one write per line).
OPS = r"""
import os, sys, random
mnt, log, seed, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rng = random.Random(seed)
lfd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def note(s):
    os.write(lfd, (s + "\n").encode())
os.makedirs(os.path.join(mnt, d), exist_ok=True)
names = ["n%d" % k for k in range(6)]
have = set()
i = 0
while True:
    r = rng.random()
    if r < 0.5 or not have:
        n = rng.choice(names)
        sync = rng.random() < 0.15
        size = rng.randrange(1, 40) * 4096 + 7
        note("begin %d put %s %d %d" % (i, n, size, int(sync)))
        data = (("%s/%s #%d|" % (d, n, i)).encode() * (size // 8 + 1))[:size]
        tmp = os.path.join(mnt, d, n + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, data)
        if sync:
            os.fsync(fd)
        os.close(fd)
        os.rename(tmp, os.path.join(mnt, d, n))
        if sync:
            dfd = os.open(os.path.join(mnt, d), os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
        have.add(n)
    elif r < 0.75:
        n = rng.choice(sorted(have))
        note("begin %d unlink %s" % (i, n))
        os.unlink(os.path.join(mnt, d, n))
        have.discard(n)
    else:
        a, b = rng.choice(sorted(have)), rng.choice(names)
        note("begin %d rename %s %s" % (i, a, b))
        os.rename(os.path.join(mnt, d, a), os.path.join(mnt, d, b))
        if a != b:
            have.discard(a)
            have.add(b)
    note("done %d" % i)
    i += 1
"""


def ops_states(log_text):
    """The logged op sequence -> (states, synced, inflight): states[k] = {name: (op index, size)} after the
    first k completed ops; synced = the highest k whose op was a put with fsync (file + dir) that completed;
    inflight = the state with the op that began but never completed applied too (None if there is none)."""
    ops, done = [], set()
    for line in log_text.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "begin":
            ops.append((int(f[1]), f[2], f[3:]))
        elif len(f) == 2 and f[0] == "done":
            done.add(int(f[1]))

    def apply(st, op):
        st = dict(st)
        i, kind, a = op
        if kind == "put":
            st[a[0]] = (i, int(a[1]))
        elif kind == "unlink":
            st.pop(a[0], None)
        elif kind == "rename" and a[0] != a[1] and a[0] in st:
            st[a[1]] = st.pop(a[0])
        return st

    states, synced, inflight = [{}], 0, None
    for op in ops:
        if op[0] in done:
            states.append(apply(states[-1], op))
            if op[1] == "put" and op[2][2] == "1":
                synced = len(states) - 1
        else:
            inflight = apply(states[-1], op)
    return states, synced, inflight


@kf.skip_unless_fuse
class CrashPrefixTest(unittest.TestCase):
    def test_prefix_after_sigkill(self):
        """docs/semantics.md §6 "The crash contract": after SIGKILL + remount the namespace equals the state
        after a prefix of the logged op sequence (put = temp + rename, unlink, rename), that prefix reaches
        every fsync'd put, and every visible file has exactly the bytes of the put the prefix names."""
        seed = int(os.environ.get("KVFS_CRASH_SEED", str(int(time.time()))))
        cycles = int(os.environ.get("KVFS_PREFIX_CYCLES", "12"))
        rng = random.Random(seed)
        b = kf.Backing(prefix="kvfs-prefix-")
        daemon = None
        try:
            # Commit delay 0: a put's commit is not held back behind the client's next op (the documented
            # reordering of the 5 ms delay is not what this test checks).
            daemon = Daemon(b, commit_delay_ms=0)
            totals = dict(cycles=cycles, ops=0, lost_ops=0, nonempty=0)
            for cycle in range(cycles):
                d = "c%03d" % cycle
                log = os.path.join(b.root, "ops-%03d.log" % cycle)
                open(log, "w").close()
                client = subprocess.Popen([PY, "-c", OPS, b.mnt, log, str(seed * 1000 + cycle), d],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                started = time.time()
                while os.path.getsize(log) == 0 and client.poll() is None and time.time() - started < 30:
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.02, 0.4))

                def stop_client():
                    if client.poll() is None:
                        client.kill()  # only the pid this test started
                    client.wait()
                daemon.kill(before_unmount=stop_client)
                daemon = Daemon(b, commit_delay_ms=0)
                with open(log) as f:
                    text = f.read()
                states, synced, inflight = ops_states(text)
                seen = {}
                listed = os.listdir(os.path.join(b.mnt, d)) if os.path.isdir(os.path.join(b.mnt, d)) else []
                for n in sorted(listed):
                    if n.endswith(".tmp"):
                        continue  # a put's temp name (its own prefix state; not modelled)
                    data = kf.read_file(os.path.join(b.mnt, d, n))
                    head = data.split(b"|", 1)[0].decode(errors="replace")
                    self.assertTrue(head.startswith("%s/" % d) and "#" in head, (n, data[:40]))
                    seen[n] = (int(head.rsplit("#", 1)[1]), len(data))
                    want = (head + "|").encode() * (len(data) // 8 + 1)
                    self.assertEqual(data, want[:len(data)], "cycle %d %s: bytes of a put, whole" % (cycle, n))
                matches = [k for k, st in enumerate(states) if st == seen]
                if inflight is not None and inflight == seen:
                    matches.append(len(states))
                self.assertTrue(matches, "cycle %d (seed %d): %s is the state after no prefix of %d ops\n%s"
                                % (cycle, seed, seen, len(states) - 1, text[-3000:]))
                self.assertGreaterEqual(max(matches), synced,
                                        "cycle %d (seed %d): an fsync'd put (op %d) was lost" % (cycle, seed, synced))
                totals["ops"] += len(states) - 1
                totals["lost_ops"] += len(states) - 1 - max(matches) if max(matches) < len(states) else 0
                totals["nonempty"] += 1 if seen else 0
            self.assertEqual(daemon.stop(), 0)
            daemon = None
            sys.stderr.write("prefix test, seed %d: %s\n" % (seed, totals))
        finally:
            if daemon:
                daemon.kill()
            b.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
