"""systemd readiness (kvfs@.service is Type=notify): with NOTIFY_SOCKET set, `kvfs mount --foreground`
sends READY=1 once the mount serves and STOPPING=1 when it is unmounted; the unit file verifies.

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/notify_test.py [-v]
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def recv_until(sock, key, timeout=30.0):
    """Datagrams received until one has the line `key` (e.g. READY=1); returns all of them."""
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        sock.settimeout(max(0.01, deadline - time.time()))
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            break
        got.append(msg)
        if key in msg.split("\n"):
            return got
    raise AssertionError("no %s within %.0fs; got %r" % (key, timeout, got))


@kf.skip_unless_fuse
class Notify(unittest.TestCase):
    def test_ready_after_mount_and_stopping_on_unmount(self):
        b = kf.Backing()
        d = tempfile.mkdtemp(prefix="kvfs-notify-")
        path = os.path.join(d, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        proc = None
        try:
            env = dict(os.environ, NOTIFY_SOCKET=path)
            proc = subprocess.Popen([kf.kvfs_binary(), "mount", b.mnt, "--backing", b.backing, "--index-dir",
                                     b.index, "--foreground"], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
            msgs = recv_until(sock, "READY=1")
            # READY means serving: the mount is there and answers.
            self.assertTrue(kf.is_mounted(b.mnt))
            kf.write_file(os.path.join(b.mnt, "x"), b"hello")
            self.assertEqual(kf.read_file(os.path.join(b.mnt, "x")), b"hello")
            ready = [m for m in msgs if "READY=1" in m.split("\n")][0]
            self.assertIn("MAINPID=%d" % proc.pid, ready.split("\n"))
            self.assertNotIn("STOPPING=1", "".join(msgs))
            kf.unmount(b.mnt)
            recv_until(sock, "STOPPING=1")
            self.assertEqual(proc.wait(timeout=60), 0)
        finally:
            if proc and proc.poll() is None:
                kf.unmount(b.mnt)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc and proc.stderr:
                proc.stderr.close()
            sock.close()
            shutil.rmtree(d, ignore_errors=True)
            b.cleanup()

    def test_no_notify_socket_is_fine(self):
        with kf.mounted() as (mnt, _, _):
            kf.write_file(os.path.join(mnt, "y"), b"x")

    @unittest.skipUnless(shutil.which("systemd-analyze"), "needs systemd-analyze")
    def test_unit_verifies(self):
        d = tempfile.mkdtemp(prefix="kvfs-unit-")
        try:
            unit = os.path.join(d, "kvfs@.service")
            with open(os.path.join(REPO, "packaging", "kvfs@.service")) as f:
                text = f.read()
            self.assertIn("Type=notify", text)
            # ExecStart must name an existing binary for verify: point it at the one under test.
            text = text.replace("/usr/bin/kvfs ", os.path.abspath(kf.kvfs_binary()) + " ")
            with open(unit, "w") as f:
                f.write(text)
            inst = os.path.join(d, "kvfs@mnt-novus\\x2dkv.service")
            os.symlink(unit, inst)
            r = subprocess.run(["systemd-analyze", "verify", "--man=no", inst], capture_output=True, text=True)
            # Only complaints about this unit count (the container's own units may be incomplete).
            errs = [l for l in (r.stdout + r.stderr).splitlines() if "kvfs@" in l]
            self.assertEqual(errs, [], r.stdout + r.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
