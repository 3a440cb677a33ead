#!/usr/bin/env bash
# The main job on an embedded default: mount kvfs over a local backing directory, run a vLLM fs-tier-like
# workload (1,000 chunks of 2,359,296 B, verified), print `kvfs stats`, unmount.
# Usage: tools/demo.sh BUILD_DIR   (tools/dev.sh demo builds and calls it)
set -euo pipefail
build=${1:-build}
kvfs="$build/tools/kvfs"
work=${KVFS_DEMO_DIR:-/var/tmp/kvfs-demo}
chunks=${KVFS_DEMO_CHUNKS:-1000}
rm -rf "$work"
mkdir -p "$work/backing" "$work/mnt" "$work/index"
cleanup() {
  if mountpoint -q "$work/mnt"; then "$kvfs" umount "$work/mnt" || fusermount3 -u "$work/mnt" || true; fi
}
trap cleanup EXIT

echo "== kvfs mount $work/mnt --backing $work/backing"
"$kvfs" mount "$work/mnt" --backing "$work/backing" --index-dir "$work/index" --node-id demo
echo "== vLLM fs-tier workload: $chunks chunks of 2,359,296 B (store, lookup, load with verification)"
echo "   (MB/s and µs figures depend on this machine and its load: compare runs on one machine only)"
python3 "$(dirname "$0")/vllm_workload.py" "$work/mnt" --chunks "$chunks"
echo "== kvfs stats"
echo "   (files = the $chunks chunk files + the workload's config.json; directories = vLLM's hash-prefix"
echo "   directories; compare both with the files created on the backing store below)"
"$kvfs" stats "$work/mnt"
echo "== files on the backing store (what NFS would see)"
find "$work/backing" -type f | wc -l | xargs echo "backing files:"
du -sh "$work/backing" | cut -f1 | xargs echo "backing bytes:"
"$kvfs" umount "$work/mnt"
echo "== unmounted; the backing directory ($(du -sh "$work/backing" | cut -f1)) is kept in $work: rm -rf $work frees it"
