#!/bin/bash
# CI entry point for the NFS test bed smoke test: one guest boot, two NFS client nodes.
# Asserts the raw NFS part (a chunk file written on node A's NFS mount is read back intact on node B's);
# the kvfs part (chunk written through kvfs on A, read through kvfs on B) is printed, not asserted.
# Builds the guest the first time (~2 min, cached in $KVFS_NFS_CACHE or /var/tmp/kvfs-nfs-testbed).
# Exit: 0 pass; 1 fail; 2 this host cannot run the test bed (set KVFS_NFS_SKIP_UNSUPPORTED=1 to turn
# that into a skip, exit 0).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
start=$(date +%s)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$here/testbed.sh" smoke "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
secs=$(( $(date +%s) - start ))
if [ "$rc" = 2 ] && [ "${KVFS_NFS_SKIP_UNSUPPORTED:-0}" = 1 ]; then
  echo "nfs-smoke: skipped, this host cannot run the test bed (${secs} s)"
  echo "nfs-smoke: 0 passed, 0 failed, 1 skipped"
  exit 0
fi
pass=$(grep -c '^  | RAW-SMOKE node .: PASS' "$out")
if [ "$rc" = 0 ] && [ "$pass" = 2 ]; then
  echo "nfs-smoke: raw NFS A->B passed; kvfs: $(grep -h -o 'KVFS-SMOKE node B: .*' "$out" | head -1 | cut -c1-100) (${secs} s)"
  echo "nfs-smoke: 1 passed, 0 failed"
  exit 0
fi
echo "nfs-smoke: FAILED (testbed exit $rc, ${secs} s)"
echo "nfs-smoke: 0 passed, 1 failed"
[ "$rc" = 0 ] && rc=1
exit "$rc"
