"""kvfs-fsck's command line: one test per exit code, as `kvfs-fsck --help`, kvfs-fsck(8) and
docs/operations.md state them (issue #17):

    0 clean   1 problems found   2 usage error or bad input   3 repair refused (live owner)   4 I/O error

and the advice a repair or a refusal prints agrees with what the next mount does.

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/fsck_cli_test.py [-v]
(KVFS_FSCK: kvfs-fsck, default next to kvfs)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def fsck_binary():
    b = os.environ.get("KVFS_FSCK")
    return b if b else os.path.join(os.path.dirname(kf.kvfs_binary()), "kvfs-fsck")


def fsck(*args):
    return subprocess.run([fsck_binary()] + list(args), capture_output=True, text=True, timeout=120)


@kf.skip_unless_fuse
class BreakerDamage(unittest.TestCase):
    """The breaker's two reports: fsck's verdict must match what the mount does when it reads."""

    def setUp(self):
        self.b = kf.Backing(prefix="kvfs-fsck-breaker-")
        with kf.mounted(backing=self.b, node_id="ng") as (mnt, _, _):
            for i in range(1, 21):
                with open(os.path.join(mnt, "f%d" % i), "w") as f:
                    f.write("%d\n" % i)
        self.node_dir = os.path.join(self.b.backing, ".kvfs", "v1", "nodes", "ng")

    def tearDown(self):
        self.b.cleanup()

    def flip(self, path, offset):
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(b"\x55")

    def read_all(self):
        with kf.mounted(backing=self.b, node_id="ng") as (mnt, _, _):
            out = {}
            for n in os.listdir(mnt):
                with open(os.path.join(mnt, n)) as f:
                    out[n] = f.read()
            return out

    def test_damaged_segment_header_unlinks_nothing(self):
        seg = os.path.join(self.node_dir, "seg")
        segs = [n for n in os.listdir(seg) if n.endswith(".kseg")]
        self.assertEqual(len(segs), 1)
        self.flip(os.path.join(seg, segs[0]), 20)
        want = {"f%d" % i: "%d\n" % i for i in range(1, 21)}
        self.assertEqual(self.read_all(), want)  # the mount reads them fine: records are self-checksummed
        r = fsck(self.b.backing)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("segment-bad-header", r.stdout)
        self.assertNotIn("dangling-entry", r.stdout)
        self.assertIn("1 problem(s)", r.stdout)
        r = fsck(self.b.backing, "--repair")
        self.assertNotIn("UNLINK", r.stdout)
        self.assertEqual(self.read_all(), want)
        shutil.rmtree(self.b.index)
        self.assertEqual(self.read_all(), want)  # a rebuilt index too

    def test_damaged_only_snapshot_is_no_journal_gap(self):
        snaps = [n for n in os.listdir(self.node_dir) if n.startswith("snapshot-")]
        self.assertEqual(len(snaps), 1, os.listdir(self.node_dir))
        self.flip(os.path.join(self.node_dir, snaps[0]), 100)
        r = fsck(self.b.backing)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("snapshot-damaged", r.stdout)
        self.assertNotIn("journal-gap", r.stdout)
        shutil.rmtree(self.b.index)
        self.assertEqual(self.read_all(), {"f%d" % i: "%d\n" % i for i in range(1, 21)})


class OneLineUsageErrors(unittest.TestCase):
    """kvfs, kvfs-fsck and kvfs-bench answer a bad command line alike (tools/cli_parse.h): one line
    "PROG: WHAT (see PROG --help)" on stderr, exit 2."""

    def check(self, cmd, needle):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, (cmd, r.stdout, r.stderr))
        self.assertEqual(len(r.stderr.splitlines()), 1, (cmd, r.stderr))
        prog = os.path.basename(cmd[0])
        self.assertTrue(r.stderr.startswith(prog + ": "), r.stderr)
        self.assertIn("(see %s --help)" % prog, r.stderr)
        self.assertIn(needle, r.stderr, cmd)
        self.assertEqual(r.stdout, "", cmd)

    def test_kvfs_and_fsck(self):
        self.check([kf.kvfs_binary(), "stats", "/nonexistent", "--bogus"], "--bogus")
        self.check([kf.kvfs_binary(), "umount", "/nonexistent", "--timeout", "-3"], "--timeout")
        self.check([fsck_binary(), "/nonexistent", "--bogus"], "--bogus")
        self.check([fsck_binary(), "/nonexistent", "--rebuild-index"], "--rebuild-index")
        self.check([fsck_binary(), "/nonexistent", "--heartbeat-timeout", "-3"], "--heartbeat-timeout")

    def test_bench(self):
        bench = os.path.join(os.path.dirname(kf.kvfs_binary()), "kvfs-bench")
        if not os.path.exists(bench):
            self.skipTest("kvfs-bench not built")
        for args, needle in ((["--bogus"], "--bogus"), (["--chunks"], "--chunks"), (["--chunks", "abc"], "abc"),
                             (["--chunks", "-3"], "-3"), (["--threads", "0"], "threads"),
                             (["--hit-ratio", "nan"], "--hit-ratio"), (["--modes", "x"], "unknown mode"),
                             (["--file-bytes", "lots"], "--file-bytes")):
            self.check([bench] + args, needle)
        r = subprocess.run([bench, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("usage: kvfs-bench", r.stdout)


@kf.skip_unless_fuse
class FsckExitCodes(unittest.TestCase):
    def setUp(self):
        self.b = kf.Backing(prefix="kvfs-fsck-cli-")
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            kf.write_file(os.path.join(mnt, "f"), os.urandom(50000))
        self.node_dir = os.path.join(self.b.backing, ".kvfs", "v1", "nodes", "n1")

    def tearDown(self):
        self.b.cleanup()

    def test_0_clean(self):
        r = fsck(self.b.backing)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("0 problem(s)", r.stdout)

    def segment_of_f(self):
        seg = os.path.join(self.node_dir, "seg")
        return os.path.join(seg, sorted(n for n in os.listdir(seg) if n.endswith(".kseg"))[0])

    def test_1_problems_and_repair_advice(self):
        os.remove(self.segment_of_f())  # f's record is gone: a dangling entry (repair: UNLINK f)
        r = fsck(self.b.backing)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("dangling-entry", r.stdout)
        r = fsck(self.b.backing, "--node", "n1", "--repair")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # problems found (and repaired)
        self.assertIn("REPAIRED", r.stdout)
        # The next mount applies a repair's journal to its index, clean or not (engine/store.cc
        # CatchUpOwnJournal): the advice says so and does not send the operator to remove the index.
        self.assertIn("next mount applies", r.stdout)
        self.assertNotIn("remove that index", r.stdout)
        r = fsck(self.b.backing)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):  # the same, cleanly closed index
            self.assertFalse(os.path.exists(os.path.join(mnt, "f")))
        with open(os.path.join(self.node_dir, "seg", "x.tmp"), "w") as f:  # a stale temp file
            f.write("x")
        os.chmod(os.path.join(self.node_dir, "seg", "x.tmp"), 0o600)
        r = fsck(self.b.backing)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("stale-temp-file", r.stdout)

    def test_1_crash_findings_are_explained(self):
        # Issue #17: after a kill -9, fsck finds the crashed generation's unsealed segment (exit 1) and says
        # that this is expected after a crash and that the next mount seals it.
        data = os.urandom(10000)
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, proc):
            fd = os.open(os.path.join(mnt, "g"), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)
            proc.kill()  # the daemon we started
            proc.wait()
        r = fsck(self.b.backing)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("unsealed-segment", r.stdout)
        self.assertRegex(r.stdout, r"note: \d+ of these .* what a crash of the node leaves .*: expected after one; "
                                   r"the node's next mount cuts and seals them itself")
        # (That the next mount seals it and fsck is clean after it: crash_test.py, every cycle.)

    def test_2_usage(self):
        for args, needle in (((self.b.backing, "--bogus"), "--bogus"), ((), "missing BACKING"),
                             ((self.b.root,), "kvfs"), ((self.b.backing, "--node", "nope"), "nope"),
                             ((self.b.backing, "--backing-mode", "0400"), "--backing-mode"),
                             (("s3://bucket/prefix",), "needs --s3-endpoint URL"),
                             ((self.b.backing, "--rebuild-index"), "--rebuild-index"),
                             ((self.b.backing, "--heartbeat-timeout", "-3"), "--heartbeat-timeout"),
                             ((self.b.backing, "--heartbeat-timeout", "nan"), "--heartbeat-timeout"),
                             ((self.b.backing, "--heartbeat-timeout", "x"), "--heartbeat-timeout")):
            r = fsck(*args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(needle, r.stderr, args)
            self.assertTrue(r.stderr.startswith("kvfs-fsck: "), r.stderr)
            self.assertEqual(len(r.stderr.splitlines()), 1, (args, r.stderr))  # one line, as kvfs's

    def test_3_repair_refused_for_a_live_owner(self):
        with kf.mounted(backing=self.b, node_id="n1"):
            os.remove(self.segment_of_f())  # something to repair on a node a live mount owns
            r = fsck(self.b.backing, "--node", "n1", "--repair")
            self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
            self.assertIn("REPAIR REFUSED", r.stdout)
            self.assertNotIn("--force", r.stdout + r.stderr)  # kvfs-fsck has no --force
            self.assertIn("host=", r.stdout)
            self.assertIn("pid=", r.stdout)
            self.assertIn("stop that mount", r.stdout)

    def test_3_repair_refused_for_a_running_mount_with_a_short_heartbeat_timeout(self):
        """kvfs-fsck --repair runs outside the daemon and does not see its holds of open files (#16,
        docs/semantics.md §6.10): a node whose daemon runs on this host is never taken over, whatever
        --heartbeat-timeout says. Before, a timeout shorter than the heartbeat's age took the running
        mount's node directory over and repaired it under the mount."""
        with kf.mounted(backing=self.b, node_id="n1") as (_, _, proc):
            os.remove(self.segment_of_f())  # something to repair on a node a running mount owns
            r = fsck(self.b.backing, "--node", "n1", "--repair", "--heartbeat-timeout", "0.01")
            self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
            self.assertIn("REPAIR REFUSED", r.stdout)
            self.assertIn("running on this host", r.stdout)
            with open(os.path.join(self.node_dir, "OWNER")) as f:
                self.assertIn("pid=%d\n" % proc.pid, f.read())  # still the mount's
            r = fsck(self.b.backing, "--node", "n1", "--heartbeat-timeout", "0.01")
            self.assertIn("LIVE (running on this host", r.stdout)

    def test_4_io_error(self):
        # A journal file that cannot be read (a directory where the file should be: EISDIR on read).
        j = sorted(n for n in os.listdir(self.node_dir) if n.startswith("journal-"))[0]
        os.rename(os.path.join(self.node_dir, j), os.path.join(self.b.root, j))
        os.mkdir(os.path.join(self.node_dir, j))
        r = fsck(self.b.backing)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        r = fsck(self.b.backing, "--json")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("error", json.loads(r.stdout))


class FsckDocsAgree(unittest.TestCase):
    """--help, the man page and docs/operations.md state the same exit codes as the binary's tests above."""

    CODES = {"0": "clean", "1": "problems", "2": "usage", "3": "refused", "4": "I/O error"}

    def test_help_man_docs(self):
        r = fsck("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("kvfs-fsck", r.stdout)
        help_exit = r.stdout[r.stdout.index("EXIT STATUS"):]
        with open(os.path.join(REPO, "packaging", "man", "kvfs-fsck.8")) as f:
            man = f.read()
        man_exit = man[man.index(".SH EXIT STATUS"):].replace("\\-", "-")
        with open(os.path.join(REPO, "docs", "operations.md")) as f:
            ops = f.read()
        ops_fsck = ops[ops.index("\n## fsck"):]
        ops_fsck = ops_fsck[:ops_fsck.index("\n## ", 5)]
        for name, text in (("--help", help_exit), ("man page", man_exit), ("operations.md", ops_fsck)):
            for code, word in self.CODES.items():
                pattern = r"\b%s\b[^0-9]{0,40}%s" % (code, r"\s+".join(re.escape(w) for w in word.split()))
                self.assertRegex(text, pattern, "%s: exit %s" % (name, code))
            self.assertNotIn("--force", text, name)


@kf.skip_unless_fuse
class StaleTempNames(unittest.TestCase):
    """kvfs-fsck --remove-stale-temp AGE (issue #16 part 4): connectors' temp files that a crash left (they
    never delete them) are listed when older than AGE (dry run), and removed through the journal with
    --repair; final names, young temp files and look-alikes (*.tmpl) are left alone."""

    OLD = ["d/k1.tmp", "d/k2.tmp.7", "d/k3_ab12.tmp", "d/k4.tmp1234"]
    KEEP = ["d/final.bin", "d/young.tmp", "d/x.tmpl", "d/.tmp"]

    def setUp(self):
        self.b = kf.Backing(prefix="kvfs-fsck-temp-")
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            os.mkdir(os.path.join(mnt, "d"))
            old = os.path.getmtime(mnt) - 7200  # two hours ago
            for rel in self.OLD + self.KEEP:
                kf.write_file(os.path.join(mnt, rel), rel.encode() * 100)
                if rel != "d/young.tmp":
                    os.utime(os.path.join(mnt, rel), (old, old))

    def tearDown(self):
        self.b.cleanup()

    def listed(self, r):
        j = json.loads(r.stdout)
        return sorted(f["path"].lstrip("/") for f in j["findings"] if f["kind"] == "stale-temp-name")

    def test_dry_run_lists_then_repair_removes(self):
        r = fsck(self.b.backing, "--remove-stale-temp", "1h", "--json")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(self.listed(r), sorted(self.OLD), r.stdout)
        # A dry run changed nothing: a second one lists the same, and without the option fsck is clean.
        self.assertEqual(self.listed(fsck(self.b.backing, "--remove-stale-temp", "3600", "--json")), sorted(self.OLD))
        self.assertEqual(fsck(self.b.backing).returncode, 0)
        self.assertEqual(self.listed(fsck(self.b.backing, "--remove-stale-temp", "3h", "--json")), [])
        r = fsck(self.b.backing, "--remove-stale-temp", "1h", "--repair", "--json")
        self.assertEqual(json.loads(r.stdout)["repaired"], len(self.OLD), r.stdout + r.stderr)
        r = fsck(self.b.backing, "--remove-stale-temp", "1h", "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            self.assertEqual(sorted(os.listdir(os.path.join(mnt, "d"))),
                             sorted(os.path.basename(k) for k in self.KEEP))
            for rel in self.KEEP:
                self.assertEqual(kf.read_file(os.path.join(mnt, rel)), rel.encode() * 100)

    def test_bad_age_is_a_usage_error(self):
        for bad in ["abc", "-5", "3w"]:
            r = fsck(self.b.backing, "--remove-stale-temp", bad)
            self.assertEqual(r.returncode, 2, (bad, r.stdout + r.stderr))


if __name__ == "__main__":
    unittest.main()
