#!/bin/sh
# NFS RPCs per chunk of kvfs-bench connector profiles, direct on a real NFSv4.2 mount vs through kvfs
# mounted over it (the "NFS RPCs/chunk" column of docs/benchmarks.md). Runs on one test-bed node:
#
#   tests/nfs/testbed.sh run --nodes 1 -- 'sh $KVFS_REPO/tests/nfs/bench_rpcs.sh'
#
# kvfs-bench's tmpfs mode runs a profile on a plain directory with no FUSE stand-in: here the node's NFS
# mount (direct) or a kvfs mount whose backing dir is on it (kvfs). --phase-hook snapshots this node's
# per-op RPC counts (nfsops, /proc/self/mountstats) around every phase; the kvfs daemon runs in the same
# mount namespace, so its RPCs are counted too. No client restart between store and load (tmpfs mode):
# loads are warm in the NFS client's and kvfs's caches; vLLM's O_DIRECT reads bypass the NFS page cache.
# Times under TCG are not performance figures; only the counts are.
#
# Env: BENCH_BUILD (default $KVFS_REPO/build), BENCH_CHUNKS (20), BENCH_PROFILES ("vllm sglang-file"),
# BENCH_THREADS (4). Output: $KVFS_RESULTS/rpcs.md (table), rpc-* snapshots, *.json.
set -u
build=${BENCH_BUILD:-$KVFS_REPO/build}
n=${BENCH_CHUNKS:-20}
threads=${BENCH_THREADS:-4}
profiles=${BENCH_PROFILES:-"vllm sglang-file"}
out=$KVFS_RESULTS
bench="$build/tools/kvfs-bench"
rc=0

run() {  # mode root profile
  mode=$1 root=$2 prof=$3
  hook="f() { nfsops \"\$KVFS_NFS\" > \"$out/rpc-$mode-\$1-\$3-\$4\"; }; f"
  "$bench" --profile "$prof" --chunks "$n" --threads "$threads" --lookup-batch "$n" --modes tmpfs \
    --tmpfs "$root" --no-progress --phase-hook "$hook" --json "$out/$mode-$prof.json" > "$out/$mode-$prof.txt" 2>&1 \
    || { echo "bench_rpcs: $mode $prof failed:"; tail -5 "$out/$mode-$prof.txt"; rc=1; }
}

mkdir -p "$KVFS_NFS/direct" "$KVFS_NFS/kvfs-backing" /tmp/kv /tmp/kv-idx
for prof in $profiles; do run direct "$KVFS_NFS/direct" "$prof"; done
# The guest has 2 GiB of RAM shared with nfsd: kvfs's defaults (1 GiB LRU + 1 GiB staging budget) got the
# daemon OOM-killed in the lmcache-fs run; 256 MiB each still hold a 20-chunk run's data.
if "$build/tools/kvfs" mount /tmp/kv --backing "$KVFS_NFS/kvfs-backing" --index-dir /tmp/kv-idx \
     --cache-size 256MiB --staging-size 256MiB \
     --node-id "$KVFS_NODE" --log-level warn; then
  for prof in $profiles; do run kvfs /tmp/kv "$prof"; done
  "$build/tools/kvfs" umount /tmp/kv || fusermount3 -u /tmp/kv
else
  echo "bench_rpcs: kvfs mount failed"; rc=1
fi

python3 - "$out" $profiles <<'EOF'
import json, os, sys
out, profiles = sys.argv[1], sys.argv[2:]
def counts(path):
    d = {}
    if os.path.exists(path):
        for line in open(path):
            p = line.split()
            if len(p) == 2: d[p[0]] = int(p[1])
    return d
lines = ["| profile | phase | unit | direct RPCs/unit (by op) | kvfs RPCs/unit (by op) |", "|---|---|---|---|---|"]
for prof in profiles:
    for phase in ("store", "lookup", "load", "warm_load"):
        cells = []
        unit = "probe" if phase == "lookup" else "chunk"
        for mode in ("direct", "kvfs"):
            try:
                j = json.load(open(f"{out}/{mode}-{prof}.json"))
                units = j["profiles"][0]["modes"]["tmpfs"]["phases"][phase]["units"]
            except Exception:
                cells.append("n/a"); continue
            a = counts(f"{out}/rpc-{mode}-{prof}-{phase}-begin")
            b = counts(f"{out}/rpc-{mode}-{prof}-{phase}-end")
            delta = {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0) > 0}
            total = sum(delta.values())
            by = ", ".join(f"{k} {v / units:.2g}" for k, v in sorted(delta.items(), key=lambda kv: -kv[1]))
            cells.append(f"**{total / units:.2f}** ({by or '-'})")
        lines.append(f"| {prof} | {phase} | {unit} | {cells[0]} | {cells[1]} |")
open(f"{out}/rpcs.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
exit $rc
