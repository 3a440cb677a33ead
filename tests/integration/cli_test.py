"""The kvfs command line: mount/umount/stats, daemon mode, signals, and one-line errors with exit code 2.

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/cli_test.py [-v]
"""
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402


# What a request that waited on a mount whose connection was then aborted gets (the kernel answers
# ENOTCONN or ECONNABORTED, depending on where the request was when the connection was aborted).
ABORTED = "aborted"


def wait_for(cond, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


@kf.skip_unless_fuse
class CliErrors(unittest.TestCase):
    def setUp(self):
        self.b = kf.Backing()

    def tearDown(self):
        self.b.cleanup()

    def assertUsageError(self, r, needle):
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("kvfs: "), r.stderr)
        self.assertIn(needle, lines[0])


    def test_node_commands_take_relative_paths_and_check_s3_flags(self):
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            kf.write_file(os.path.join(mnt, "f"), b"x")
        rel = os.path.relpath(self.b.backing, self.b.root)
        r = subprocess.run([kf.kvfs_binary(), "node", "list", "--json", "--backing", rel], cwd=self.b.root,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([n["node"] for n in json.loads(r.stdout)], ["n1"])
        # An S3 backing works (S3ToolsTest) but, as for kvfs mount, needs its endpoint: a usage error.
        r = kf.run_kvfs("node", "list", "--backing", "s3://bucket/prefix")
        self.assertUsageError(r, "needs --s3-endpoint")
    def mount(self, *extra, mnt=None, backing=None):
        return kf.run_kvfs("mount", mnt or self.b.mnt, "--backing", backing or self.b.backing, "--index-dir",
                           self.b.index, "--foreground", *extra, timeout=60)

    def test_missing_backing_dir(self):
        self.assertUsageError(self.mount(backing=os.path.join(self.b.root, "nope")), "backing directory")

    def test_missing_mountpoint(self):
        self.assertUsageError(self.mount(mnt=os.path.join(self.b.root, "nope")), "mountpoint")

    def test_mountpoint_not_empty(self):
        with open(os.path.join(self.b.mnt, "x"), "w") as f:
            f.write("x")
        self.assertUsageError(self.mount(), "not empty")

    def test_mountpoint_busy(self):
        with kf.mounted(backing=self.b):
            r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir",
                            os.path.join(self.b.root, "index2"), "--foreground")
            self.assertUsageError(r, "busy")

    def test_index_dir_in_use(self):
        other = os.path.join(self.b.root, "mnt2")
        os.mkdir(other)
        with kf.mounted(backing=self.b):
            r = self.mount(mnt=other)
            self.assertUsageError(r, "in use")
            self.assertFalse(kf.is_mounted(other))
            # A second node id on the same index dir is refused before it touches the shared store.
            r = self.mount("--node-id", "intruder", mnt=other)
            self.assertUsageError(r, "in use")
            self.assertFalse(os.path.exists(os.path.join(self.b.backing, ".kvfs", "v1", "nodes", "intruder")))
            # The message names the index dir and the mount holding it, and --force cannot help there.
            pid = int(os.getxattr(self.b.mnt, "user.kvfs.pid"))
            for extra in ((), ("--force",)):
                r = self.mount(*extra, mnt=other)
                self.assertUsageError(r, "index dir '%s' is in use by another kvfs mount on this host (pid %d)"
                                      % (self.b.index, pid))
                self.assertNotIn("--force", r.stderr)

    def test_node_in_use_message(self):
        other = os.path.join(self.b.root, "mnt2")
        os.mkdir(other)
        with kf.mounted(backing=self.b, node_id="n1"):
            pid = int(os.getxattr(self.b.mnt, "user.kvfs.pid"))
            r = kf.run_kvfs("mount", other, "--backing", self.b.backing, "--index-dir",
                            os.path.join(self.b.root, "index2"), "--node-id", "n1", "--foreground")
            self.assertUsageError(r, "node 'n1' is in use: node directory %s is owned by host="
                                  % os.path.join(self.b.backing, ".kvfs", "v1", "nodes", "n1"))
            self.assertIn("pid=%d" % pid, r.stderr)
            self.assertIn("use --force to take over if it is not", r.stderr)

    def test_backing_inside_mountpoint_is_refused(self):
        r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.mnt, "--index-dir", self.b.index)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("mountpoint", r.stderr)
        self.assertFalse(kf.is_mounted(self.b.mnt))

    def test_unknown_flag(self):
        self.assertUsageError(self.mount("--bogus"), "--bogus")
        self.assertUsageError(kf.run_kvfs("frobnicate"), "frobnicate")
        self.assertUsageError(kf.run_kvfs(), "subcommand")

    def test_bad_size(self):
        self.assertUsageError(self.mount("--cache-size", "12X"), "invalid size")
        self.assertUsageError(self.mount("--segment-size", "-1G"), "invalid size")

    def nodes_dir(self):
        return os.path.join(self.b.backing, ".kvfs", "v1", "nodes")

    def test_bad_fuse_option(self):
        # Checked before the node directory is taken over: nothing is created or bumped (breaker-1 item 8).
        r = self.mount("--node-id", "n1", "-o", "no_such_fuse_option")
        self.assertUsageError(r, "no_such_fuse_option")
        self.assertFalse(kf.is_mounted(self.b.mnt))
        self.assertFalse(os.path.exists(os.path.join(self.nodes_dir(), "n1")))
        # Same for a node that already exists: its generation stays.
        with kf.mounted(backing=self.b, node_id="n1"):
            pass
        owner = os.path.join(self.nodes_dir(), "n1", "OWNER")
        with open(owner) as f:
            before = f.read()
        self.assertUsageError(self.mount("--node-id", "n1", "-o", "allow_other,nonsense_opt"), "nonsense_opt")
        with open(owner) as f:
            self.assertEqual(f.read(), before)

    def generations(self, node):
        """The generations of `node` that wrote a journal file, and OWNER's generation (0: no OWNER)."""
        d = os.path.join(self.nodes_dir(), node)
        gens = {int(n.split("-")[1]) for n in os.listdir(d) if n.startswith("journal-")} if os.path.isdir(d) else set()
        owner = 0
        if os.path.exists(os.path.join(d, "OWNER")):
            with open(os.path.join(d, "OWNER")) as f:
                owner = int(dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)["generation"])
        return gens, owner

    def failing_mounts(self):
        """Mounts of node n1 that fail: before anything (the mountpoint is a file), and when the kernel
        refuses the FUSE mount after every check of kvfs passed (`blksize=` is an option of fuseblk only:
        mount(2) fails with EINVAL), in the foreground and as a daemon."""
        notdir = os.path.join(self.b.root, "file")
        with open(notdir, "w"):
            pass
        self.assertUsageError(self.mount("--node-id", "n1", mnt=notdir), "is not a directory")
        for fg in (True, False):
            args = ["mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index, "--node-id", "n1",
                    "-o", "allow_other,default_permissions,blksize=4096"] + (["--foreground"] if fg else [])
            r = kf.run_kvfs(*args)
            self.assertEqual(r.returncode, 1, r.stderr)
            lines = r.stderr.strip().splitlines()
            if fg:  # the foreground daemon logs to stderr too: its log lines come first
                lines = [l for l in lines if l.startswith("kvfs: ")]
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertEqual(lines[0], "kvfs: cannot mount FUSE at %s: mount failed: Invalid argument" % self.b.mnt)
            self.assertFalse(kf.is_mounted(self.b.mnt))

    def test_failed_mount_takes_no_generation_and_leaves_no_index(self):
        # Issue #17: a failed mount uses up no node generation and leaves no index behind.
        self.failing_mounts()
        self.assertEqual(self.generations("n1"), (set(), 0))
        self.assertFalse(os.path.exists(os.path.join(self.nodes_dir(), "n1")))
        self.assertFalse(os.path.exists(self.b.index))
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            kf.write_file(os.path.join(mnt, "a"), b"first")
        self.assertEqual(self.generations("n1"), ({1}, 1))
        # Failing again with a node directory and an index: both stay as they were.
        index_files = sorted(os.listdir(self.b.index))
        self.failing_mounts()
        self.assertEqual(self.generations("n1"), ({1}, 1))
        self.assertEqual(sorted(os.listdir(self.b.index)), index_files)
        # The next good mount gets the generation it would have had, and the file.
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            self.assertEqual(kf.read_file(os.path.join(mnt, "a")), b"first")
        # Generation 2 (the read's atime is journaled in it, and its unmount checkpoint may retire
        # generation 1's journal): none was skipped.
        gens, owner = self.generations("n1")
        self.assertEqual(owner, 2)
        self.assertEqual(max(gens), 2)

    def test_store_failure_unmounts(self):
        # The FUSE mount is made before the store opens: a store that cannot open (here: the node is
        # in use by a live mount) removes it again, and says why on one line.
        other = os.path.join(self.b.root, "mnt2")
        os.mkdir(other)
        index2 = os.path.join(self.b.root, "index2")
        with kf.mounted(backing=self.b, node_id="n1"):
            for fg in ((), ("--foreground",)):
                for precreated in (False, True):
                    if precreated:  # an empty index dir the operator made: left as it was, empty
                        os.mkdir(index2)
                    r = kf.run_kvfs("mount", other, "--backing", self.b.backing, "--index-dir", index2,
                                    "--node-id", "n1", *fg)
                    self.assertUsageError(r, "node 'n1' is in use")
                    self.assertFalse(kf.is_mounted(other))
                    if precreated:
                        self.assertEqual(os.listdir(index2), [])
                        os.rmdir(index2)
                    else:
                        self.assertFalse(os.path.exists(index2))
                    if not fg:
                        # The daemon's log (<index-dir>.log) has the reason, not nothing (issue #17).
                        with open(index2 + ".log") as f:
                            log = f.read()
                        self.assertIn("kvfs: mount failed: node 'n1' is in use", log)
                        os.unlink(index2 + ".log")

    # A program that waits for "go" on stdin (so that its start-up is over before the window it aims at),
    # then lists a directory and prints "ok" or the errno.
    PROBE = ("import os, sys\n"
             "sys.stdin.readline()\n"
             "try:\n"
             "    os.listdir(sys.argv[1])\n"
             "    print('ok', flush=True)\n"
             "except OSError as e:\n"
             "    print(e.errno, flush=True)\n")

    def probes_during_store_open(self, mnt, cmd, end):
        """Starts `cmd` (a kvfs mount whose store open is delayed), and once its FUSE mount is there, two
        programs that access it (the mountpoint and a name in it); `end(proc)` ends the mount attempt.
        Returns (the mount's CompletedProcess-like (returncode, stderr), the probes' outputs). A probe
        that is still blocked long after the mount ended fails the test (it is killed: only what we
        started)."""
        env = dict(os.environ, KVFS_TEST_STORE_OPEN_DELAY_MS="5000")
        probes = [subprocess.Popen([sys.executable, "-c", self.PROBE, p], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True) for p in (mnt, os.path.join(mnt, "x"))]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        outs = []
        try:
            self.assertTrue(wait_for(lambda: kf.is_mounted(mnt) or proc.poll() is not None, 60))
            if not kf.is_mounted(mnt):
                self.fail("no FUSE mount before the store opened: exit %s: %s" % (proc.wait(), proc.stderr.read()))
            for p in probes:
                p.stdin.write("go\n")
                p.stdin.flush()
            end(proc)
            _, err = proc.communicate(timeout=120)
            for p in probes:
                try:
                    out, _ = p.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    self.fail("a program that accessed the mount while the store opened is still blocked")
                out = out.strip()
                outs.append(ABORTED if out in (str(errno.ECONNABORTED), str(errno.ENOTCONN)) else out)
            return proc.returncode, err, outs
        finally:
            for p in probes + [proc]:
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def test_accesses_while_a_failing_store_opens_do_not_hang(self):
        # Issue #17: the FUSE mount is made before the store opens, and accesses to it wait meanwhile. If
        # the store then fails to open (here: the node is in use by a live mount), the mount goes away and
        # the waiting programs get ENOTCONN / ECONNABORTED (the connection is aborted), in the foreground and as a daemon;
        # they neither hang nor see the empty directory underneath.
        other = os.path.join(self.b.root, "mnt2")
        os.mkdir(other)
        index2 = os.path.join(self.b.root, "index2")
        with kf.mounted(backing=self.b, node_id="n1"):
            for fg in (("--foreground",), ()):
                cmd = [kf.kvfs_binary(), "mount", other, "--backing", self.b.backing, "--index-dir", index2,
                       "--node-id", "n1", "--log-file", os.path.join(self.b.root, "mnt2.log"), *fg]
                rc, err, outs = self.probes_during_store_open(other, cmd, lambda proc: None)
                lines = [l for l in err.strip().splitlines() if l.startswith("kvfs: ")]
                self.assertEqual(rc, 2, err)
                self.assertEqual(len(lines), 1, err)
                self.assertIn("node 'n1' is in use", lines[0])
                self.assertEqual(outs, [ABORTED] * 2)
                self.assertFalse(kf.is_mounted(other))
                self.assertFalse(os.path.exists(index2))
                self.assertEqual(os.listdir(other), [])

    def test_sigterm_while_the_store_opens(self):
        # A SIGTERM while the store opens ends the mount once the store is open: exit 0, unmounted, the
        # store closed (the next mount of the node works); the programs waiting on the mount get ENOTCONN / ECONNABORTED.
        cmd = [kf.kvfs_binary(), "mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
               "--node-id", "n1", "--foreground"]
        rc, err, outs = self.probes_during_store_open(self.b.mnt, cmd,
                                                      lambda proc: proc.send_signal(signal.SIGTERM))
        self.assertEqual(rc, 0, err)
        self.assertEqual(outs, [ABORTED] * 2)
        self.assertFalse(kf.is_mounted(self.b.mnt))
        with kf.mounted(backing=self.b, node_id="n1") as (mnt, _, _):
            kf.write_file(os.path.join(mnt, "a"), b"after")
            self.assertEqual(kf.read_file(os.path.join(mnt, "a")), b"after")

    def test_index_dir_or_log_inside_the_mountpoint_is_refused(self):
        # The store opens after the FUSE mount: an index (or a log) inside the mountpoint would wait for
        # the daemon's own mount. Refused before anything is created.
        for extra, needle in ((("--index-dir", os.path.join(self.b.mnt, "idx")), "--index-dir"),
                              (("--index-dir", self.b.index, "--log-file", os.path.join(self.b.mnt, "log")),
                               "--log-file")):
            r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--foreground", *extra)
            self.assertUsageError(r, needle)
            self.assertIn("mountpoint", r.stderr)
            self.assertFalse(kf.is_mounted(self.b.mnt))
            self.assertEqual(os.listdir(self.b.mnt), [])
            self.assertFalse(os.path.exists(os.path.join(self.b.backing, ".kvfs")))

    def test_bad_log_level(self):
        self.assertUsageError(self.mount("--log-level", "loud"), "--log-level 'loud'")
        cfg = os.path.join(self.b.root, "kvfs.conf")
        with open(cfg, "w") as f:
            f.write("log-level = loud\n")
        self.assertUsageError(self.mount("--config", cfg), "--log-level 'loud'")
        self.assertFalse(os.path.exists(self.nodes_dir()) and os.listdir(self.nodes_dir()))

    def test_bad_node_id(self):
        for bad in ("", "a/b", "..", "x" * 129, "sp ace"):
            self.assertUsageError(self.mount("--node-id", bad), "invalid node id")
        self.assertFalse(os.path.exists(self.nodes_dir()) and os.listdir(self.nodes_dir()))

    def _super_options(self, mnt):
        with open("/proc/self/mountinfo") as f:
            for line in f:
                pre, post = line.rstrip("\n").split(" - ", 1)
                if pre.split()[4].encode().decode("unicode_escape") == os.path.realpath(mnt):
                    return set(post.split(" ", 2)[2].split(","))
        self.fail("%s is not in /proc/self/mountinfo" % mnt)

    def test_allow_other_keeps_default_permissions(self):
        # KV caches hold users' prompts: -o allow_other alone must not switch the kernel's mode checks off.
        for o, want_dp in (("allow_other", True), ("allow_other,default_permissions", True),
                           ("allow_other,no_default_permissions", False)):
            with kf.mounted(backing=self.b, o=o) as (mnt, _, _):
                opts = self._super_options(mnt)
                self.assertIn("allow_other", opts, o)
                self.assertEqual("default_permissions" in opts, want_dp, "%s: %s" % (o, sorted(opts)))
                self.assertNotIn("no_default_permissions", opts)
        with kf.mounted(backing=self.b) as (mnt, _, _):  # no -o: both defaults
            self.assertTrue({"allow_other", "default_permissions"} <= self._super_options(mnt))

    def test_umount_and_stats_of_non_kvfs(self):
        self.assertUsageError(kf.run_kvfs("umount", self.b.mnt), "not mounted")
        self.assertUsageError(kf.run_kvfs("stats", self.b.mnt), "not a kvfs mount")
        self.assertUsageError(kf.run_kvfs("umount", os.path.join(self.b.root, "nope")), "does not exist")

    def test_absurd_sizes_refused(self):
        # Issue #17: sizes that cannot work fail with exit 2 and one line, before anything is created.
        for args, needle in ((("--capacity", "1KiB"), "less than 2 segments"),
                             (("--capacity", "500"), "a number without a unit is bytes"),
                             (("--high-watermark", "100MiB", "--segment-size", "64MiB"), "less than 2 segments"),
                             (("--high-watermark", "7MiB"), "less than 2 segments of --segment-size 4.0 MiB"),
                             (("--segment-size", "100TiB"), "over the limit"),
                             (("--segment-size", "1000000"), "at least 1MiB"),
                             # The hint's suggestion must itself be accepted: 100MiB, not 100GiB (over 64 GiB).
                             (("--segment-size", "100"), "at least 1MiB (a number without a unit is bytes: write e.g. 100MiB)"),
                             (("--staging-size", "1000"), "at least 4MiB (a number without a unit is bytes: write e.g. 1000MiB)"),
                             (("--segment-size", "1048577"), "multiple of 4KiB"),
                             (("--cache-size", "100TiB"), "memory"),
                             (("--staging-size", "100TiB"), "memory")):
            self.assertUsageError(self.mount(*args), needle)
        self.assertFalse(os.path.exists(os.path.join(self.b.backing, ".kvfs")))

    def test_unusual_sizes_warned(self):
        # Merely unusual: the mount goes on, with one warning line each on the terminal.
        r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                        "--capacity", "64MiB", "--segment-size", "16MiB", "--cache-size", "4096")
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 2, r.stderr)
            self.assertTrue(all(x.startswith("kvfs: warning: ") for x in lines), r.stderr)
            self.assertIn("--capacity 64MiB holds only 4 segments", r.stderr)
            self.assertIn("--cache-size 4096 is 4.0 KiB (a number without a unit is bytes: write e.g. 4096MiB)", r.stderr)
        finally:
            self.assertEqual(kf.run_kvfs("umount", self.b.mnt).returncode, 0)

    def test_config_file_with_fuse_options(self):
        # Issue #17: `o = a,b` in the config file (the example in the shipped kvfs.conf) swallowed the
        # mountpoint: `kvfs mount MNT --config FILE` (the systemd unit's form) failed "mountpoint is required".
        for o in ("allow_other,default_permissions", "allow_other"):
            cfg = os.path.join(self.b.root, "kvfs.conf")
            with open(cfg, "w") as f:
                f.write("backing = %s\nindex-dir = %s\no = %s\n" % (self.b.backing, self.b.index, o))
            r = kf.run_kvfs("mount", self.b.mnt, "--config", cfg)
            self.assertEqual(r.returncode, 0, r.stderr)
            try:
                self.assertTrue({"allow_other", "default_permissions"} <= self._super_options(self.b.mnt))
            finally:
                self.assertEqual(kf.run_kvfs("umount", self.b.mnt).returncode, 0)
        # -o before the mountpoint on the command line takes its list only.
        r = kf.run_kvfs("mount", "-o", "allow_other", self.b.mnt, "--backing", self.b.backing, "--index-dir",
                        self.b.index)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(kf.run_kvfs("umount", self.b.mnt).returncode, 0)

    def test_help_names_the_program(self):
        r = kf.run_kvfs("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("Usage: kvfs ", r.stdout)
        r = kf.run_kvfs("mount", "--help")
        self.assertIn("kvfs mount", r.stdout)

    def test_help(self):
        r = kf.run_kvfs("mount", "--help")
        self.assertEqual(r.returncode, 0)
        for flag in ("--backing", "--node-id", "--index-dir", "--cache-size", "--segment-size", "--foreground",
                     "--threads", "--group-commit-ms", "--direct-io", "--force", "--config", "--quiet"):
            self.assertIn(flag, r.stdout)

    def test_every_mount_option_is_documented(self):
        # docs/operations.md "Mount options" lists every long flag of `kvfs mount --help`, and the shipped
        # /etc/kvfs/kvfs.conf has each one meant for a config file, commented out (issue #17).
        r = kf.run_kvfs("mount", "--help")
        self.assertEqual(r.returncode, 0)
        flags = set(re.findall(r"(?<![\w-])--([a-z][a-z-]+)", r.stdout)) - {"help"}
        self.assertIn("backing", flags)
        with open(os.path.join(kf.REPO, "docs", "operations.md")) as f:
            ops = f.read()
        section = ops.split("\n## Mount options\n", 1)[1].split("\n## ", 1)[0]
        missing = sorted(f for f in flags if "`--%s" % f not in section)
        self.assertEqual(missing, [], "not in docs/operations.md 'Mount options'")
        with open(os.path.join(kf.REPO, "packaging", "kvfs.conf")) as f:
            conf = f.read()
        # Flags of one invocation, and --direct-io (accepted, changes nothing).
        per_call = {"config", "foreground", "quiet", "force", "direct-io"}
        missing = sorted(f for f in flags - per_call if not re.search(r"^# %s = " % re.escape(f), conf, re.M))
        self.assertEqual(missing, [], "not in packaging/kvfs.conf")


@kf.skip_unless_fuse
class DaemonLifecycle(unittest.TestCase):
    def setUp(self):
        self.b = kf.Backing()

    def tearDown(self):
        self.b.cleanup()

    def test_daemon_mount_stats_umount(self):
        r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                        "--threads", "8", "--cache-size", "64MiB", "--segment-size", "16MiB")
        self.assertEqual(r.returncode, 0, r.stderr)
        # A daemonised mount prints one line on success (issue #17): where, which node, the segment size
        # and the log file; its start-up lines are in <index-dir>.log.
        self.assertEqual(r.stderr, "")
        self.assertEqual(r.stdout, "kvfs: mounted %s over %s: node %s, segment size 16.0 MiB, log %s\n"
                         % (os.path.realpath(self.b.mnt), os.path.realpath(self.b.backing), socket.gethostname(),
                            self.b.index + ".log"))
        with open(self.b.index + ".log") as f:
            log = f.read()
        self.assertIn("took over node directory", log)
        self.assertIn("mounted " + self.b.mnt, log)
        try:
            self.assertTrue(kf.is_mounted(self.b.mnt))  # mounted when the parent returns
            pid = int(os.getxattr(self.b.mnt, "user.kvfs.pid"))
            self.assertNotEqual(pid, os.getpid())
            data = os.urandom(3 << 20)
            kf.write_file(os.path.join(self.b.mnt, "f"), data)
            self.assertEqual(kf.read_file(os.path.join(self.b.mnt, "f")), data)
            # The commit runs a few ms after the last close (deferred): wait for it to be counted.
            deadline = time.time() + 5
            while True:
                s = kf.run_kvfs("stats", self.b.mnt, "--json")
                self.assertEqual(s.returncode, 0, s.stderr)
                st = json.loads(s.stdout)
                if st["live_bytes"] >= 3 << 20 or time.time() > deadline:
                    break
                time.sleep(0.01)
            for k in ("files", "live_bytes", "segments", "cache_hit_rate", "records_written", "journal_entries",
                      "backing_metadata_ops", "backing_files_created"):
                self.assertIn(k, st)
            self.assertGreaterEqual(st["records_written"], 1)
            self.assertGreaterEqual(st["live_bytes"], 3 << 20)
            human = kf.run_kvfs("stats", self.b.mnt)
            self.assertEqual(human.returncode, 0)
            self.assertIn("records written", human.stdout)
            self.assertIn("cache hit rate", human.stdout)
            self.assertRegex(human.stdout, r"backing ops by kind +.*write=[1-9]")
            self.assertRegex(human.stdout, r"fuse bytes written +[1-9]")
        finally:
            u = kf.run_kvfs("umount", self.b.mnt)
        self.assertEqual(u.returncode, 0, u.stderr)
        self.assertFalse(kf.is_mounted(self.b.mnt))
        self.assertFalse(kf.pid_alive(pid), "kvfs umount returned before the daemon exited")
        # remount (daemon again, --quiet: nothing on stdout), at a mountpoint inside the backing directory:
        # it works, with one warning line on the terminal. The data is there.
        inner = os.path.join(self.b.backing, "inner")
        os.mkdir(inner)
        r = kf.run_kvfs("mount", inner, "--backing", self.b.backing, "--index-dir", self.b.index, "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            self.assertEqual(r.stdout, "")
            self.assertEqual(r.stderr, "kvfs: warning: mountpoint '%s' is inside the backing directory '%s': programs "
                             "that walk the backing (find, du, backups) walk into the mount too\n"
                             % (os.path.realpath(inner), os.path.realpath(self.b.backing)))
            self.assertEqual(kf.read_file(os.path.join(inner, "f")), data)
        finally:
            self.assertEqual(kf.run_kvfs("umount", inner).returncode, 0)

    def test_purge_of_a_running_mount_is_refused_even_with_a_stale_heartbeat(self):
        """`kvfs node purge` runs outside the daemon and does not see its holds of open files (#16,
        docs/semantics.md §6.10): a node whose daemon runs on this host is live whatever its heartbeat
        says (stopped here with SIGSTOP and its HEARTBEAT made 120 s old). Before, such a node was "dead"
        and the purge removed the segments of the running mount."""
        with kf.mounted(backing=self.b, node_id="held") as (mnt, backing, proc):
            kf.write_file(os.path.join(mnt, "f"), os.urandom(300000))
            os.close(os.open(os.path.join(mnt, "f"), os.O_RDONLY))
            subprocess.run(["sync"])
            node = os.path.join(backing, ".kvfs", "v1", "nodes", "held")
            segs = sorted(os.listdir(os.path.join(node, "seg")))
            self.assertTrue(segs)
            proc.send_signal(signal.SIGSTOP)  # the heartbeat stalls; nothing here touches the mount
            try:
                hb = os.path.join(node, "HEARTBEAT")
                with open(hb, "rb") as f:
                    text = f.read()
                old = str(time.time_ns() - 120 * 10**9).encode()
                text2 = re.sub(rb"time_ns=\d+", b"time_ns=" + old, text, count=1)
                self.assertEqual(len(text2), len(text))
                with open(hb, "wb") as f:
                    f.write(text2)
                st = json.loads(kf.run_kvfs("node", "list", "--json", "--backing", backing).stdout)
                self.assertEqual([n["state"] for n in st if n["node"] == "held"], ["live"], st)
                r = kf.run_kvfs("node", "purge", "--node", "held", "--backing", backing, "--grace-ms", "0")
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                err = r.stderr.strip()
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn("refusing to purge a live node", err)
                self.assertIn("runs on this host", err)
                self.assertEqual(sorted(os.listdir(os.path.join(node, "seg"))), segs)
            finally:
                proc.send_signal(signal.SIGCONT)
            self.assertEqual(len(kf.read_file(os.path.join(mnt, "f"))), 300000)

    def test_daemon_keeps_no_inherited_descriptors(self):
        # breaker-2 item B4: `kvfs mount ... 7>&1 | cat` hung until the unmount, because the daemon kept
        # the caller's descriptors (here: a pipe's write end) open.
        r_fd, w_fd = os.pipe()
        try:
            p = subprocess.run([kf.kvfs_binary(), "mount", self.b.mnt, "--backing", self.b.backing,
                                "--index-dir", self.b.index], pass_fds=(w_fd,), capture_output=True, text=True,
                               timeout=60)
            os.close(w_fd)
            w_fd = -1
            self.assertEqual(p.returncode, 0, p.stderr)
            try:
                os.set_blocking(r_fd, False)
                deadline = time.time() + 10
                while True:  # EOF once no process holds the write end
                    try:
                        self.assertEqual(os.read(r_fd, 1), b"")
                        break
                    except BlockingIOError:
                        self.assertLess(time.time(), deadline, "the daemon kept the inherited pipe open")
                        time.sleep(0.05)
            finally:
                self.assertEqual(kf.run_kvfs("umount", self.b.mnt).returncode, 0)
        finally:
            os.close(r_fd)
            if w_fd >= 0:
                os.close(w_fd)

    def test_umount_reports_failed_final_flush(self):
        # breaker-1 item 5: the daemon's Store::Close failing must make `kvfs umount` fail and say why.
        # The TEST-ONLY EIO switch (SIGUSR1, tools/power_cut.h) makes every backing write fail.
        env = dict(os.environ, KVFS_TEST_POWER_CUT_SIGNAL="1")
        r = subprocess.run([kf.kvfs_binary(), "mount", self.b.mnt, "--backing", self.b.backing, "--index-dir",
                            self.b.index], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        pid = int(os.getxattr(self.b.mnt, "user.kvfs.pid"))
        kf.write_file(os.path.join(self.b.mnt, "f"), b"x" * 4096)
        os.kill(pid, signal.SIGUSR1)  # backing writes and syncs fail with EIO from now on
        u = kf.run_kvfs("umount", self.b.mnt)
        self.assertEqual(u.returncode, 1, u.stderr)
        self.assertIn("final flush failed", u.stderr)
        self.assertEqual(len(u.stderr.strip().splitlines()), 1, u.stderr)
        self.assertFalse(kf.is_mounted(self.b.mnt))

    def test_backing_deadline_flag_serves_and_persists(self):
        # --backing-deadline-ms routes every backing request through the deadline Env; a healthy
        # export must work exactly as without it, across a remount.
        data = os.urandom(3 * 1024 * 1024 + 17)
        with kf.mounted(backing=self.b, backing_deadline_ms=5000) as (mnt, _, _):
            with open(os.path.join(mnt, "f"), "wb") as f:
                f.write(data)
        with kf.mounted(backing=self.b, backing_deadline_ms=5000) as (mnt, _, _):
            with open(os.path.join(mnt, "f"), "rb") as f:
                self.assertEqual(f.read(), data)

    def test_umount_busy(self):
        with kf.mounted(backing=self.b) as (mnt, _, _):
            fd = os.open(os.path.join(mnt, "open"), os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                r = kf.run_kvfs("umount", mnt)
                self.assertNotEqual(r.returncode, 0)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertTrue(kf.is_mounted(mnt))
            finally:
                os.close(fd)

    def signal_test(self, sig):
        with kf.mounted(backing=self.b) as (mnt, _, proc):
            kf.write_file(os.path.join(mnt, "s"), b"signal")
            proc.send_signal(sig)
            self.assertEqual(proc.wait(timeout=30), 0)
            self.assertFalse(kf.is_mounted(mnt))
        with kf.mounted(backing=self.b) as (mnt, _, _):
            self.assertEqual(kf.read_file(os.path.join(mnt, "s")), b"signal")

    def test_sigterm_flushes_and_unmounts(self):
        self.signal_test(signal.SIGTERM)

    def test_sigint_flushes_and_unmounts(self):
        self.signal_test(signal.SIGINT)

    def test_config_file(self):
        cfg = os.path.join(self.b.root, "kvfs.ini")
        with open(cfg, "w") as f:
            f.write("backing=%s\nindex-dir=%s\nthreads=4\ncache-size=32MiB\nforeground=true\n" %
                    (self.b.backing, self.b.index))
        proc = subprocess.Popen([kf.kvfs_binary(), "mount", self.b.mnt, "--config", cfg],
                                stderr=subprocess.PIPE)
        try:
            self.assertTrue(wait_for(lambda: kf.is_mounted(self.b.mnt) or proc.poll() is not None))
            self.assertTrue(kf.is_mounted(self.b.mnt), proc.stderr.read() if proc.poll() is not None else "")
            kf.write_file(os.path.join(self.b.mnt, "c"), b"cfg")
        finally:
            kf.unmount(self.b.mnt)
            proc.wait(timeout=30)
            proc.stderr.close()
        self.assertEqual(proc.returncode, 0)
        bad = os.path.join(self.b.root, "bad.ini")
        with open(bad, "w") as f:
            f.write("backing=%s\ncache-size=lots\n" % self.b.backing)
        r = kf.run_kvfs("mount", self.b.mnt, "--config", bad, "--foreground")
        self.assertEqual(r.returncode, 2, r.stderr)


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"), "needs root and setpriv (runs kvfs as nobody)")
@kf.skip_unless_fuse
class NonRootMount(unittest.TestCase):
    """Issue #17: a non-root mount that FUSE would refuse fails with the reason on one line, before the
    node directory is taken over (no generation used, no index created)."""

    def setUp(self):
        self.b = kf.Backing()
        for d in (self.b.root, self.b.backing, self.b.mnt):  # the user's own directories
            os.chown(d, 65534, 65534)

    def tearDown(self):
        self.b.cleanup()

    def run_as_nobody(self, *args):
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", kf.kvfs_binary()] + list(args)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    def assertRefusedCleanly(self, r, needle):
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn(needle, r.stderr)
        self.assertFalse(kf.is_mounted(self.b.mnt))
        self.assertFalse(os.path.exists(os.path.join(self.b.backing, ".kvfs")))  # no node directory
        self.assertFalse(os.path.exists(self.b.index))  # no index

    def test_allow_other_without_user_allow_other(self):
        with open("/etc/fuse.conf") as f:
            if any(l.strip().startswith("user_allow_other") for l in f):
                self.skipTest("/etc/fuse.conf allows allow_other to users")
        for fg in ((), ("--foreground",)):
            r = self.run_as_nobody("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                                   *fg)
            self.assertRefusedCleanly(r, "user_allow_other")

    def test_mountpoint_not_writable(self):
        os.chown(self.b.mnt, 0, 0)
        r = self.run_as_nobody("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                               "-o", "default_permissions")
        self.assertRefusedCleanly(r, "a non-root user can mount only on a directory it may write")


def fsck_binary():
    b = os.environ.get("KVFS_FSCK")
    return b if b else os.path.join(os.path.dirname(kf.kvfs_binary()), "kvfs-fsck")


def tree_modes(root):
    """{path: (is_dir, permission bits)} of root and everything under it."""
    out = {root: (True, os.stat(root).st_mode & 0o7777)}
    for d, dirs, files in os.walk(root):
        for n in dirs:
            out[os.path.join(d, n)] = (True, os.lstat(os.path.join(d, n)).st_mode & 0o7777)
        for n in files:
            out[os.path.join(d, n)] = (False, os.lstat(os.path.join(d, n)).st_mode & 0o7777)
    return out


@kf.skip_unless_fuse
class BackingModes(unittest.TestCase):
    """Issue #17: the export holds users' prompt bytes: kvfs's own files there are owner-only by default."""

    def setUp(self):
        self.b = kf.Backing()
        self.old_umask = os.umask(0o022)  # the usual umask; the defaults must not depend on it

    def tearDown(self):
        os.umask(self.old_umask)
        self.b.cleanup()

    def fill(self, **flags):
        with kf.mounted(backing=self.b, checkpoint_entries=1, **flags) as (mnt, _, _):
            os.mkdir(os.path.join(mnt, "d"))
            kf.write_file(os.path.join(mnt, "d", "f"), os.urandom(100000))
        return tree_modes(os.path.join(self.b.backing, ".kvfs"))

    def fsck(self, *extra):
        r = subprocess.run([fsck_binary(), self.b.backing, "--json"] + list(extra), capture_output=True,
                           text=True, timeout=120)
        return r, json.loads(r.stdout)

    def test_default_owner_only_and_fsck_warns_about_looser(self):
        modes = self.fill()
        self.assertGreater(len(modes), 8)  # v1, nodes, node dir, seg dir, segment, journal, OWNER, ...
        for p, (is_dir, m) in modes.items():
            self.assertEqual(m, 0o700 if is_dir else 0o600, "%s: %o" % (p, m))
        self.assertEqual(os.stat(self.b.index).st_mode & 0o777, 0o700)
        r, j = self.fsck()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(j["loose_modes"], [])
        seg = next(p for p, (d, _) in modes.items() if p.endswith(".kseg"))
        os.chmod(seg, 0o644)
        r, j = self.fsck()
        self.assertEqual(r.returncode, 0, r.stderr)  # a warning, not a problem
        self.assertEqual(j["loose_modes"], [{"path": seg, "mode": "0644"}])
        r = subprocess.run([fsck_binary(), self.b.backing], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("loose-mode", r.stdout)
        self.assertIn("chmod -R go-rwx", r.stdout)
        r, j = self.fsck("--backing-mode", "0644")  # what the site chose: no warning
        self.assertEqual(j["loose_modes"], [])

    def test_backing_mode_option(self):
        modes = self.fill(backing_mode="0640")
        for p, (is_dir, m) in modes.items():
            self.assertEqual(m, 0o750 if is_dir else 0o640, "%s: %o" % (p, m))
        r, j = self.fsck("--backing-mode", "0640")
        self.assertEqual(j["loose_modes"], [])
        r, j = self.fsck()
        self.assertEqual(len(j["loose_modes"]), len(modes))

    def test_backing_mode_checked(self):
        for bad in ("0400", "4600", "rw", "0x1a4"):
            r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                            "--backing-mode", bad)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("--backing-mode", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.b.backing, ".kvfs")))
        # World-readable works, with a warning on the terminal (a daemon mount prints nothing else).
        r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                        "--backing-mode", "0644")
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            self.assertIn("warning: --backing-mode 0644", r.stderr)
        finally:
            self.assertEqual(kf.run_kvfs("umount", self.b.mnt).returncode, 0)


if __name__ == "__main__":
    unittest.main()
