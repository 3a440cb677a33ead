#!/bin/bash
# Two kvfs daemons on two NFS clients (the NFS test bed, docs/nfs-testbed.md): the same store / load /
# rename / unlink checks as tests/integration/multinode_test.py, plus visibility timings and NFS RPC counts.
#
#   tests/nfs/multinode_nfs.sh [testbed run options...]     # host: boots the guest, runs "node" on A and B
#   KVFS_BIN=build-multi/tools/kvfs tests/nfs/multinode_nfs.sh
#   tests/nfs/multinode_nfs.sh --patterns2026 [testbed run options...]   # the 2026 connector patterns
#     across two NFS clients instead (tests/nfs/patterns2026_node.py: link publish race, writes straight
#     to the final name, xattrs after rename, statvfs, a preallocated slot file rewritten with O_DIRECT)
#
# Each node mounts kvfs over ITS OWN NFS mount: --backing $KVFS_NFS/kvfs --node-id A|B --index-dir
# /tmp/idx-X (node-private) --peer-direct-io (NFS attribute caches hide journal growth otherwise).
#   1. A writes a 1 MiB chunk; B reads it byte-identical (time from A's close to B's first good read)
#   2. B renames it; A sees the new name with the same bytes and ENOENT for the old one
#   3. A writes a second chunk; B unlinks it; A's stat and open give ENOENT (not EIO)
#   4. visibility: A writes KVFS_MN_NFS_CHUNKS (20) chunks of 256 KiB one by one; B polls stat; the
#      delay from A's close to B's successful stat (one guest kernel: one CLOCK_MONOTONIC) -> p50/p99
#   5. idle cost: both nodes idle for KVFS_MN_NFS_IDLE_S (10) s; NFS RPCs per second per node
# RPC counts come from nfsops (this node's NFS mount, daemon included). Under TCG latencies are 20-40x
# native: report them as coherence timings, not performance figures.
# Lines starting with "MN-NFS" are the results; "MN-NFS-FAIL" lines are failures. Exit: 0 pass, 1 fail,
# 2 the host cannot run the test bed (testbed.sh's code).
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [ "${1:-}" != node ]; then
  suite=basic
  if [ "${1:-}" = --patterns2026 ]; then suite=patterns2026; shift; fi
  bin=${KVFS_BIN:-$repo/build-multi/tools/kvfs}
  [ -x "$bin" ] || bin=$repo/build/tools/kvfs
  [ -x "$bin" ] || { echo "multinode_nfs: no kvfs binary (set KVFS_BIN)" >&2; exit 2; }
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
  out=$(mktemp /tmp/kvfs-mn-nfs.XXXXXX)
  trap 'rm -f "$out"' EXIT
  start=$(date +%s)
  KVFS_BIN=$bin "$here/testbed.sh" run --nodes 2 --timeout "${KVFS_MN_NFS_TIMEOUT:-900}" --env "KVFS_BIN=$bin" \
    --env "KVFS_MN_NFS_CHUNKS=${KVFS_MN_NFS_CHUNKS:-20}" --env "KVFS_MN_NFS_IDLE_S=${KVFS_MN_NFS_IDLE_S:-10}" \
    "$@" -- "bash $here/multinode_nfs.sh node $suite" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  echo "multinode-nfs: testbed exit $rc after $(($(date +%s) - start)) s"
  grep -h -E '^(MN|P26)-NFS' "$out" | sort -u | sed 's/^/  /'
  rundir=$(ls -dt /var/tmp/kvfs-nfs-testbed/runs/run-* 2>/dev/null | head -1)
  [ -n "$rundir" ] && for n in A B; do
    [ -f "$rundir/out/$n/log" ] && grep -h -E '^(MN|P26)-NFS' "$rundir/out/$n/log" | sed "s/^/  [$n] /"
  done
  if [ "$rc" = 0 ] && ! grep -q -E '(MN|P26)-NFS-FAIL' "$out" ${rundir:+$rundir/out/*/log}; then
    echo "multinode-nfs: PASS"
    exit 0
  fi
  [ "$rc" = 2 ] && exit 2
  echo "multinode-nfs: FAIL"
  exit 1
fi

# ------------------------------------------------------------------ on each node (inside the guest)
N=$KVFS_NODE
MNT=/tmp/kvfs-$N
mkdir -p "$MNT" "$KVFS_NFS/kvfs"
nfsops >/tmp/ops-mount0
"$KVFS_BIN" mount "$MNT" --backing "$KVFS_NFS/kvfs" --node-id "$N" --index-dir "/tmp/idx-$N" \
  --peer-direct-io --foreground >"$KVFS_RESULTS/kvfs.log" 2>&1 &
kpid=$!
i=0
while ! mountpoint -q "$MNT" && kill -0 $kpid 2>/dev/null && [ $i -lt 1800 ]; do sleep 0.1; i=$((i + 1)); done
if ! mountpoint -q "$MNT"; then
  echo "MN-NFS-FAIL node $N: kvfs did not mount:"; tail -5 "$KVFS_RESULTS/kvfs.log"
  tb-signal "mounted-$N" FAIL
  exit 1
fi
echo "MN-NFS node $N: mount RPCs: $(nfsops --delta /tmp/ops-mount0 | tr '\n' ' ')"
tb-signal "mounted-$N" ok

here=$(cd "$(dirname "$0")" && pwd)
if [ "${2:-basic}" = patterns2026 ]; then
  MNT=$MNT KVFS_NFS_HERE=$here python3 "$here/patterns2026_node.py"
else
MNT=$MNT KVFS_NFS_HERE=$here python3 - <<'EOF'
import json, os, sys, time
sys.path.insert(0, os.environ["KVFS_NFS_HERE"])
from nodelib import *  # noqa: F401,F403 (sig, wait, ops_snap, ops_delta, sha, fail, say, err_of, read, write, poll, readable)
import nodelib
M = os.environ["MNT"]
CHUNKS = int(os.environ.get("KVFS_MN_NFS_CHUNKS", "20")); IDLE_S = float(os.environ.get("KVFS_MN_NFS_IDLE_S", "10"))

if wait("mounted-" + OTHER) != "ok":
    fail("the other node's kvfs did not mount"); sys.exit(1)
if N == "A":
    os.makedirs(M + "/kv", exist_ok=True)
    d = os.urandom(1 << 20); open("/tmp/c0", "wb").write(d)
    ops_snap("/tmp/o"); t = time.monotonic(); write(M + "/kv/chunk0", d)
    say("1. wrote chunk0 (1 MiB) in %.2f s; RPCs write+close (before group commit): %s" % (time.monotonic() - t, ops_delta("/tmp/o")))
    sig("stored", json.dumps({"sha": sha(d), "t": t}))
    # 2. rename on B
    wait("renamed")
    ops_snap("/tmp/o")
    dt = poll(lambda: readable(M + "/kv/chunk0.moved", d) and err_of(lambda: os.stat(M + "/kv/chunk0")) == "ENOENT")
    if dt is None: fail("2. rename on B: expected chunk0.moved with A's bytes and chunk0 ENOENT within %.0f s; got moved=%s old=%s"
                        % (WAIT, err_of(lambda: read(M + "/kv/chunk0.moved")) or "readable", err_of(lambda: os.stat(M + "/kv/chunk0")) or "exists"))
    else: say("2. B's rename visible on A after %.2f s (old name ENOENT, same bytes); RPCs on A meanwhile: %s" % (dt, ops_delta("/tmp/o")))
    # 3. unlink on B
    d1 = os.urandom(300000); write(M + "/kv/chunk1", d1); sig("stored1", sha(d1))
    wait("unlinked")
    dt = poll(lambda: err_of(lambda: os.stat(M + "/kv/chunk1")) == "ENOENT")
    e_open = err_of(lambda: read(M + "/kv/chunk1"))
    if dt is None or e_open != "ENOENT":
        fail("3. unlink on B: expected stat and open of chunk1 ENOENT on A, got stat %s, open %s"
             % (err_of(lambda: os.stat(M + "/kv/chunk1")) or "success", e_open or "success"))
    else: say("3. B's unlink visible on A after %.2f s (stat and open ENOENT)" % dt)
    # 4. visibility series
    wait("vis-ready")
    os.makedirs(M + "/vis", exist_ok=True)
    closes = []
    ops_snap("/tmp/o")
    for i in range(CHUNKS):
        write(M + "/vis/c%04d" % i, os.urandom(256 << 10)); closes.append(time.monotonic())
        sig("vis-%d" % i, repr(closes[-1]))
        wait("seen-%d" % i, 300)
    say("4. RPCs on A for %d chunks of 256 KiB (incl. its polling): %s" % (CHUNKS, ops_delta("/tmp/o")))
    sig("vis-done")
else:
    w = json.loads(wait("stored"))
    ops_snap("/tmp/o")
    dt = poll(lambda: os.path.exists(M + "/kv/chunk0") and sha(read(M + "/kv/chunk0")) == w["sha"])
    now = time.monotonic()
    if dt is None: fail("1. load on B: expected chunk0 (sha %s) within %.0f s, got %s" % (w["sha"][:12], WAIT, err_of(lambda: read(M + "/kv/chunk0")) or "other bytes"))
    else: say("1. A's chunk0 read byte-identical on B %.2f s after A's close; RPCs on B (polls + read): %s" % (now - w["t"], ops_delta("/tmp/o")))
    ops_snap("/tmp/o"); os.rename(M + "/kv/chunk0", M + "/kv/chunk0.moved")
    say("2. rename on B: RPCs %s" % ops_delta("/tmp/o")); sig("renamed")
    h1 = wait("stored1")
    dt = poll(lambda: os.path.exists(M + "/kv/chunk1") and sha(read(M + "/kv/chunk1")) == h1)
    if dt is None: fail("3. load chunk1 on B: expected sha %s within %.0f s" % (h1[:12], WAIT))
    ops_snap("/tmp/o"); os.unlink(M + "/kv/chunk1"); say("3. unlink on B: RPCs %s" % ops_delta("/tmp/o")); sig("unlinked")
    # 4. visibility series: poll stat of each name from the moment A signals its close time
    sig("vis-ready")
    lat = []
    for i in range(CHUNKS):
        t_close = float(wait("vis-%d" % i, 300))
        p = M + "/vis/c%04d" % i
        while True:
            try: os.stat(p); break
            except FileNotFoundError: pass
            if time.monotonic() - t_close > WAIT: fail("4. chunk c%04d never visible on B" % i); break
            time.sleep(0.002)
        lat.append((time.monotonic() - t_close) * 1000); sig("seen-%d" % i)
    lat.sort()
    if lat:
        say("4. visibility A close -> B stat over %d chunks: p50 %.0f ms, p99 %.0f ms, min %.0f, max %.0f (TCG; includes the 9p signal delay)"
            % (len(lat), lat[len(lat) // 2], lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))], lat[0], lat[-1]))
    wait("vis-done")
# 5. idle cost (both idle at once)
sig("idle-" + N); wait("idle-" + OTHER)
ops_snap("/tmp/o"); time.sleep(IDLE_S); d = ops_delta("/tmp/o")
tot = sum(int(x) for x in d.split()[1::2]) if d else 0
say("5. idle %.0f s: %d RPCs (%.1f/s): %s" % (IDLE_S, tot, tot / IDLE_S, d))
sig("end-" + N); wait("end-" + OTHER)
say("result: %s" % ("PASS" if nodelib.fails == 0 else "%d failure(s)" % nodelib.fails))
sys.exit(1 if nodelib.fails else 0)
EOF
fi
rc=$?
"$KVFS_BIN" stats "$MNT" 2>/dev/null | sed 's/^/  kvfs stats: /' | head -20
"$KVFS_BIN" umount "$MNT" --timeout 60 >/dev/null 2>&1 || fusermount3 -u -z "$MNT"
wait $kpid 2>/dev/null
exit $rc
