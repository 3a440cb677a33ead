"""Helpers for the scripts a node runs inside the NFS test bed guest (tests/nfs/testbed.sh run): barriers
between nodes (tb-signal / tb-wait, through the 9p run directory, so they disturb no NFS cache), this
node's NFS RPC counters (nfsops), result lines, polling. Used by multinode_nfs.sh and patterns2026_node.py.

Result lines start with PREFIX (set_prefix) and failures with PREFIX + "-FAIL"; the host-side wrappers grep
for them."""
import errno
import hashlib
import os
import subprocess
import time

N = os.environ.get("KVFS_NODE", "A")
OTHER = "B" if N == "A" else "A"
WAIT = 120.0  # seconds a node waits for the other's change (TCG is slow)
_prefix = "MN-NFS"
fails = 0


def set_prefix(p):
    global _prefix
    _prefix = p


def sig(name, text="ok"):
    subprocess.run(["tb-signal", name, text], check=True)


def wait(name, t=900):
    return subprocess.run(["tb-wait", name, str(t)], capture_output=True, text=True).stdout.strip()


def ops_snap(path):
    with open(path, "w") as f:
        f.write(subprocess.run(["nfsops"], capture_output=True, text=True).stdout)


def ops_delta(path):
    out = subprocess.run(["nfsops", "--delta", path], capture_output=True, text=True).stdout
    return " ".join(out.split("\n")).strip()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def fail(msg):
    global fails
    fails += 1
    print("%s-FAIL node %s: %s" % (_prefix, N, msg), flush=True)


def say(msg):
    print("%s node %s: %s" % (_prefix, N, msg), flush=True)


def err_of(fn):
    try:
        fn()
        return None
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def read(p):
    with open(p, "rb") as f:
        return f.read()


def write(p, data):
    with open(p, "wb") as f:
        f.write(data)


def poll(fn, t=WAIT, every=0.02):
    """Calls fn until it returns true (OSError counts as false); the seconds it took, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < t:
        try:
            if fn():
                return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(every)
    return None


def readable(p, want):
    try:
        return read(p) == want
    except OSError:
        return False
