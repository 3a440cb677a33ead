"""The 2026 connector patterns (docs/semantics.md, issue 18) across two kvfs nodes, each on its own NFS
client of one export: run on each node of the NFS test bed by `tests/nfs/multinode_nfs.sh --patterns2026`,
with kvfs already mounted at $MNT (--backing $KVFS_NFS/kvfs, own node id and index dir, --peer-direct-io).

  1. link publish race (LMCache fs_native): both nodes write their own bytes to a unique O_EXCL temp,
     fsync, then at one barrier link(tmp, final), unlink(tmp), fsync(dirfd), then link 8 more temps to
     final0..final7 one after the other. For every name exactly one node's link returns 0 and the
     other's EEXIST (the claim on the export, design.md §5 "link(2) across nodes"); every read of `final`
     on either node is the winner's file whole (never a mix or a short file), on both nodes.
  2. writes straight to the final name (Dynamo G4, VUA, SGLang nixl): A writes 8 MiB to its final name
     in 8 pieces, 0.3 s apart, then closes; B polls the name all along: every observation is ENOENT or
     the whole file (never a partial size or partial bytes), and it sees the whole file after A's close.
  3. xattrs set on the final name after rename (vLLM's user.vllm_kv_crc32): B publishes, A sees the value.
  4. statvfs: f_bsize = f_frsize = 4096 on both nodes, and B's used space counts A's files.
  5. a preallocated slot file (vLLM SimpleCPUOffloadConnector disk backend): A fallocates 8 MiB, closes,
     reopens O_RDWR|O_DIRECT, rewrites slots 1 and 3 (2 MiB each) with pwrite, closes; B reads the whole
     file byte-exact (zeros elsewhere).
Result lines start with "P26-NFS" (failures "P26-NFS-FAIL")."""
import errno
import json
import mmap
import os
import sys
import time

sys.path.insert(0, os.environ.get("KVFS_NFS_HERE", os.path.dirname(os.path.abspath(__file__))))
import nodelib  # noqa: E402
from nodelib import N, OTHER, WAIT, err_of, fail, poll, read, say, sha, sig, wait, write  # noqa: E402

nodelib.set_prefix("P26-NFS")
M = os.environ["MNT"]
P = M + "/p26"
MiB = 1 << 20


def barrier(name):
    sig("%s-%s" % (name, N))
    return wait("%s-%s" % (name, OTHER))


def aligned(data):
    """An anonymous (page-aligned) buffer holding data, for O_DIRECT."""
    m = mmap.mmap(-1, len(data))
    m.write(data)
    return m


if wait("mounted-" + OTHER) != "ok":
    fail("the other node's kvfs did not mount")
    sys.exit(1)
if N == "A":
    os.makedirs(P, exist_ok=True)
    sig("dir", "ok")
else:
    wait("dir")
    if poll(lambda: os.path.isdir(P)) is None:
        fail("A's directory %s not seen within %.0f s" % (P, WAIT))
        sys.exit(1)

# 1. link publish race
mine = os.urandom(2 * MiB)
tmp = "%s/final.tmp.%s.%d" % (P, N, os.getpid())
fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.write(fd, mine)
os.fsync(fd)
os.close(fd)
barrier("p1-ready")
try:
    os.link(tmp, P + "/final")
    linked = 0
except OSError as e:
    linked = errno.errorcode.get(e.errno, str(e.errno))
os.unlink(tmp)
more = []
for i in range(8):
    t = "%s/final%d.tmp.%s.%d" % (P, i, N, os.getpid())
    fd = os.open(t, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, mine[:64 * 1024])
    os.close(fd)
    more.append(t)
barrier("p1-more")
rcs = []
for i, t in enumerate(more):
    try:
        os.link(t, "%s/final%d" % (P, i))
        rcs.append(0)
    except OSError as e:
        rcs.append(errno.errorcode.get(e.errno, str(e.errno)))
    os.unlink(t)
dfd = os.open(P, os.O_RDONLY | os.O_DIRECTORY)
os.fsync(dfd)
os.close(dfd)
sig("p1-linked-" + N, json.dumps({"rc": linked, "sha": sha(mine), "rcs": rcs}))
theirs = json.loads(wait("p1-linked-" + OTHER))
shas = {sha(mine): N, theirs["sha"]: OTHER}
say("1. link(tmp, final): this node %s, the other %s; final0..7: this node %s, the other %s"
    % (linked, theirs["rc"], rcs, theirs["rcs"]))
if sorted([str(linked), str(theirs["rc"])]) != ["0", "EEXIST"]:
    fail("1. link(tmp, final): expected exactly one 0 and one EEXIST, got %s and %s" % (linked, theirs["rc"]))
for i, (x, y) in enumerate(zip(rcs, theirs["rcs"])):
    if sorted([str(x), str(y)]) != ["0", "EEXIST"]:
        fail("1. link(tmp, final%d): expected exactly one 0 and one EEXIST, got %s and %s" % (i, x, y))
winner = N if linked == 0 else OTHER
observed, bad = [], []


def settled():
    h = sha(read(P + "/final"))
    if h not in shas:
        bad.append(h)
    observed.append(shas.get(h, "?"))
    return len(observed) >= 10 and len(set(observed[-10:])) == 1


if poll(settled, every=0.2) is None:
    fail("1. final never settled on one file within %.0f s (reads: %s)" % (WAIT, observed[-20:]))
if bad:
    fail("1. %d read(s) of final were neither node's bytes whole" % len(bad))
sig("p1-seen-" + N, observed[-1] if observed else "?")
other_seen = wait("p1-seen-" + OTHER)
if observed and other_seen != observed[-1]:
    fail("1. the nodes did not converge: this node reads %s's bytes, the other %s's" % (observed[-1], other_seen))
if observed and observed[-1] != winner:
    fail("1. final reads %s's bytes, but %s's link won" % (observed[-1], winner))
else:
    say("1. both nodes read %s's bytes under final (%d reads, all whole)" % (observed[-1] if observed else "?",
                                                                           len(observed)))

# 2. writes straight to the final name
if N == "A":
    data = os.urandom(8 * MiB)
    sig("p2-start", sha(data))
    with open(P + "/direct", "wb") as f:
        for i in range(8):
            f.write(data[i * MiB:(i + 1) * MiB])
            f.flush()
            time.sleep(0.3)
    sig("p2-closed", "ok")
    wait("p2-done")
else:
    want = wait("p2-start")
    seen = {"enoent": 0, "whole": 0, "partial": 0}
    t0 = time.monotonic()
    while time.monotonic() - t0 < WAIT:
        try:
            b = read(P + "/direct")
            if sha(b) == want:
                seen["whole"] += 1
            else:
                seen["partial"] += 1
                if seen["partial"] <= 3:
                    fail("2. read a partial file under the final name: %d bytes" % len(b))
        except FileNotFoundError:
            seen["enoent"] += 1
        if seen["whole"] >= 3:
            break
        time.sleep(0.05)
    if seen["whole"] == 0:
        fail("2. the whole file never appeared under its final name within %.0f s (%s)" % (WAIT, seen))
    say("2. B's reads of a file A wrote straight to its final name: %s" % seen)
    sig("p2-done", "ok")

# 3. xattrs after rename
if N == "B":
    write(P + "/x.tmp", os.urandom(MiB))
    os.rename(P + "/x.tmp", P + "/x")
    os.setxattr(P + "/x", "user.vllm_kv_crc32", b"1234abcd")
    sig("p3", "ok")
    wait("p3-done")
else:
    wait("p3")
    dt = poll(lambda: os.getxattr(P + "/x", "user.vllm_kv_crc32") == b"1234abcd")
    if dt is None:
        fail("3. user.vllm_kv_crc32 set on B after rename not seen on A within %.0f s (%s)"
             % (WAIT, err_of(lambda: os.getxattr(P + "/x", "user.vllm_kv_crc32")) or "other value"))
    else:
        say("3. B's xattr on the final name seen on A after %.2f s" % dt)
    sig("p3-done", "ok")

# 4. statvfs
st = os.statvfs(M)
if st.f_bsize != 4096 or st.f_frsize != 4096:
    fail("4. statvfs f_bsize %d f_frsize %d (want 4096)" % (st.f_bsize, st.f_frsize))
if N == "B":
    # A's 8 MiB file plus the published 2 MiB: B's used space includes A's live bytes.
    need = 8 * MiB

    def used():
        s = os.statvfs(M)
        return (s.f_blocks - s.f_bfree) * s.f_frsize
    if poll(lambda: used() >= need) is None:
        fail("4. B's statvfs used %d B < A's 8 MiB file" % used())
    else:
        say("4. statvfs on B: bsize %d, used %.1f MiB (includes A's files)" % (st.f_bsize, used() / MiB))
barrier("p4")

# 5. preallocated slot file rewritten with O_DIRECT
if N == "A":
    path = P + "/kv.rank_0"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.posix_fallocate(fd, 0, 8 * MiB)
    except OSError as e:
        if e.errno != errno.EOPNOTSUPP:
            raise
        os.ftruncate(fd, 8 * MiB)
    os.close(fd)
    want = bytearray(8 * MiB)
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    for slot in (1, 3):
        d = os.urandom(2 * MiB)
        want[slot * 2 * MiB:(slot + 1) * 2 * MiB] = d
        buf = aligned(d)
        if os.pwritev(fd, [buf], slot * 2 * MiB) != len(d):
            fail("5. short O_DIRECT pwrite of slot %d" % slot)
        buf.close()
    os.close(fd)
    if read(path) != bytes(want):
        fail("5. A reads its own slot file wrong")
    sig("p5", sha(bytes(want)))
    wait("p5-done")
else:
    want = wait("p5")
    dt = poll(lambda: sha(read(P + "/kv.rank_0")) == want)
    if dt is None:
        fail("5. B never read A's rewritten slot file byte-exact within %.0f s" % WAIT)
    else:
        say("5. A's slot file (2 O_DIRECT slot rewrites of a preallocated 8 MiB file) read byte-exact on B after %.2f s" % dt)
    sig("p5-done", "ok")

barrier("end")
say("result: %s" % ("PASS" if nodelib.fails == 0 else "%d failure(s)" % nodelib.fails))
sys.exit(1 if nodelib.fails else 0)
