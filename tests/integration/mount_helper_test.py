"""mount(8) integration: `kvfs SOURCE MOUNTPOINT -o OPTS` (the form mount.fuse3 calls), a real
`mount -t fuse.kvfs`, and an fstab line (mount --fstab FILE, so /etc/fstab is not touched).

mount.fuse3 runs `/bin/sh -c 'kvfs SRC MNT -o OPTS'`, and mount(8) drops PATH from the helper's
environment, so sh searches its built-in default (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:...):
kvfs must be installed. For the mount(8) tests a symlink /usr/local/sbin/kvfs -> $KVFS_BINARY is made for
the test's duration (only when that path is free; removed afterwards); the direct helper-form test uses a
temp bin/ on PATH. Needs root (mount(8)), /dev/fuse and /sbin/mount.fuse3; skips otherwise. Every mount
is unmounted and every daemon started here is waited for (killed by pid as a last resort).

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/mount_helper_test.py [-v]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402


def mount_helper():
    for p in ("/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"):
        if os.path.exists(p):
            return p
    return None


def mountinfo(path):
    """(fstype, source, options) of the mount at `path`, or None."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.rstrip("\n").split(" - ", 1)
            fields = pre.split()
            if fields[4].encode().decode("unicode_escape") == path:
                t, src, sopts = post.split(" ", 2)
                return t, src.encode().decode("unicode_escape"), fields[5] + "," + sopts
    return None


@unittest.skipUnless(os.geteuid() == 0, "needs root (mount(8))")
@unittest.skipUnless(kf.fuse_available(), "needs /dev/fuse and fusermount3")
@unittest.skipUnless(mount_helper() and shutil.which("mount"), "needs mount(8) and mount.fuse3 (package fuse3)")
class MountHelper(unittest.TestCase):
    def setUp(self):
        self.b = kf.Backing(prefix="kvfs-mnthelper-")
        self.bin = os.path.join(self.b.root, "bin")
        os.mkdir(self.bin)
        os.symlink(os.path.realpath(kf.kvfs_binary()), os.path.join(self.bin, "kvfs"))
        self.env = dict(os.environ, PATH=self.bin + ":/usr/sbin:/usr/bin:/sbin:/bin")
        self.pids = []
        self.link = None

    def install_link(self):
        """/usr/local/sbin/kvfs -> the binary under test, for mount(8) (see the module doc)."""
        link = "/usr/local/sbin/kvfs"
        if os.path.lexists(link):
            if os.path.realpath(link) != os.path.realpath(kf.kvfs_binary()):
                self.skipTest("%s exists and is not the binary under test" % link)
            return
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.realpath(kf.kvfs_binary()), link)
        self.link = link

    def tearDown(self):
        try:
            if kf.is_mounted(self.b.mnt):
                kf.unmount(self.b.mnt)
            for pid in self.pids:  # daemons this test started (through mount(8) / the helper form)
                if not kf.wait_gone(pid):
                    os.kill(pid, signal.SIGKILL)
        finally:
            if self.link and os.path.islink(self.link):
                os.unlink(self.link)
            self.b.cleanup()

    def run_(self, cmd, timeout=60):
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env)

    def mounted_ok(self, node):
        """Checks the mount that just appeared: type, source, a store/load round trip, the node's dir."""
        self.assertTrue(kf.is_mounted(self.b.mnt))
        pid = int(os.getxattr(self.b.mnt, "user.kvfs.pid").decode())
        self.pids.append(pid)
        t, src, opts = mountinfo(self.b.mnt)
        self.assertEqual(t, "fuse.kvfs")
        self.assertEqual(src, "kvfs:" + os.path.realpath(self.b.backing))
        data = os.urandom(300 * 1024)
        kf.write_file(os.path.join(self.b.mnt, "chunk-0.bin"), data)
        with open(os.path.join(self.b.mnt, "chunk-0.bin"), "rb") as f:
            self.assertEqual(f.read(), data)
        # The commit runs a few ms after the last close (deferred so a rename right after close
        # journals one PUT): the committed-file count follows shortly.
        deadline = time.time() + 5
        while True:
            st = json.loads(os.getxattr(self.b.mnt, "user.kvfs.stats").decode())
            if st["files"] >= 1 or time.time() > deadline:
                break
            time.sleep(0.01)
        self.assertGreaterEqual(st["files"], 1)
        self.assertTrue(os.path.isdir(os.path.join(self.b.backing, ".kvfs", "v1", "nodes", node)))
        return pid, opts

    def kvfs_umount(self, pid):
        r = self.run_(["kvfs", "umount", self.b.mnt])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(kf.is_mounted(self.b.mnt))
        self.assertFalse(kf.pid_alive(pid))

    def test_helper_form_direct(self):
        # What mount.fuse3 executes; mount(8)'s own options are ignored, FUSE options pass through.
        r = self.run_(["kvfs", self.b.backing, self.b.mnt, "-o",
                       "rw,_netdev,nofail,defaults,allow_other,default_permissions,node_id=helper1,"
                       "index_dir=%s,cache_size=64MiB,segment-size=8MiB,capacity=1GiB,peer_direct_io,"
                       "log_level=warn" % self.b.index])
        self.assertEqual(r.returncode, 0, r.stderr)
        pid, opts = self.mounted_ok("helper1")
        self.assertIn("allow_other", opts)  # the kernel shows allow_other as a super option
        self.assertTrue({"nosuid", "nodev"} <= set(opts.split(",")), opts)
        self.assertTrue(os.path.isdir(self.b.index))  # index_dir= was used
        self.kvfs_umount(pid)

    def test_mount_t_fuse_kvfs(self):
        self.install_link()
        r = self.run_(["mount", "-t", "fuse.kvfs", self.b.backing, self.b.mnt, "-o",
                       "_netdev,node_id=gpu7,index_dir=%s,cache_size=32MiB" % self.b.index])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")  # mount(8) helpers are silent on success (kvfs mount prints a line)
        pid, opts = self.mounted_ok("gpu7")
        # mount.fuse3 added dev,suid: the defaults allow_other,default_permissions still apply, and so do
        # nosuid,nodev (a setuid file copied into the mount must not run as its owner; issue #17).
        self.assertIn("allow_other", opts)
        self.assertIn("default_permissions", opts)
        self.assertTrue({"nosuid", "nodev"} <= set(opts.split(",")), opts)
        self.assertTrue(os.path.exists(self.b.index + ".log"))  # a daemon: log file next to the index
        # umount(8) works as well; the daemon then flushes and exits.
        r = self.run_(["umount", self.b.mnt])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(kf.wait_gone(pid))
        # Remount through mount(8): the data is there.
        r = self.run_(["mount", "-t", "fuse.kvfs", self.b.backing, self.b.mnt, "-o",
                       "node_id=gpu7,index_dir=%s" % self.b.index])
        self.assertEqual(r.returncode, 0, r.stderr)
        pid2 = int(os.getxattr(self.b.mnt, "user.kvfs.pid").decode())
        self.pids.append(pid2)
        self.assertEqual(os.path.getsize(os.path.join(self.b.mnt, "chunk-0.bin")), 300 * 1024)
        self.kvfs_umount(pid2)

    def test_suid_dev_only_when_asked(self):
        # mount.fuse3 appends dev,suid to every option list; only the operator's own suid / dev count.
        # mount(8) does not pass suid / dev on to the helper: kvfs_suid / kvfs_dev ask for them.
        self.install_link()
        for extra, want in (("", {"nosuid", "nodev"}), (",suid", {"nosuid", "nodev"}),
                            (",kvfs_suid", {"nodev"}), (",kvfs_dev", {"nosuid"}),
                            (",nosuid,nodev", {"nosuid", "nodev"})):
            r = self.run_(["mount", "-t", "fuse.kvfs", self.b.backing, self.b.mnt, "-o",
                           "node_id=sd,index_dir=%s%s" % (self.b.index, extra)])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            pid = int(os.getxattr(self.b.mnt, "user.kvfs.pid").decode())
            self.pids.append(pid)
            opts = set(mountinfo(self.b.mnt)[2].split(","))
            self.assertEqual(opts & {"nosuid", "nodev"}, want, (extra, sorted(opts)))
            self.kvfs_umount(pid)
        # The helper form as mount.fuse3 runs it, with the operator's own suid before its dev,suid.
        r = self.run_(["kvfs", self.b.backing, self.b.mnt, "-o",
                       "node_id=sd,index_dir=%s,suid,dev,suid" % self.b.index])
        self.assertEqual(r.returncode, 0, r.stderr)
        pid = int(os.getxattr(self.b.mnt, "user.kvfs.pid").decode())
        self.pids.append(pid)
        self.assertEqual(set(mountinfo(self.b.mnt)[2].split(",")) & {"nosuid", "nodev"}, {"nodev"})
        self.kvfs_umount(pid)

    def test_fstab_line(self):
        self.install_link()
        fstab = os.path.join(self.b.root, "fstab")
        with open(fstab, "w") as f:
            f.write("%s %s fuse.kvfs _netdev,nofail,allow_other,default_permissions,node_id=gpu8,"
                    "capacity=10TiB,index_dir=%s 0 0\n" % (self.b.backing, self.b.mnt, self.b.index))
        r = self.run_(["mount", "--fstab", fstab, self.b.mnt])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        pid, _ = self.mounted_ok("gpu8")
        self.kvfs_umount(pid)

    def test_bad_options_one_line_exit_2(self):
        for opts, needle in (("splice=maybe", "must be true or false"), ("node_id", "needs a value"),
                             ("node_id=x,cache_size=lots", "--cache-size")):
            r = self.run_(["kvfs", self.b.backing, self.b.mnt, "-o", opts + ",index_dir=" + self.b.index])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn(needle, r.stderr)
            self.assertFalse(kf.is_mounted(self.b.mnt))
        r = self.run_(["kvfs", self.b.backing, self.b.mnt, "--bogus"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unexpected argument", r.stderr)
        # mount(8) reports the helper's failure.
        self.install_link()
        r = self.run_(["mount", "-t", "fuse.kvfs", os.path.join(self.b.root, "nope"), self.b.mnt, "-o",
                       "node_id=x,index_dir=" + self.b.index])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("backing directory", r.stdout + r.stderr)
        self.assertFalse(kf.is_mounted(self.b.mnt))


if __name__ == "__main__":
    unittest.main()
