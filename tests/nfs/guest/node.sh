#!/bin/sh
# kvfs NFS test bed: one node (runs inside the node's own network, UTS and mount namespaces).
# Usage: node.sh NAME INDEX ADDRESS
# Sets the host name, gives the node a private /tmp, mounts the export at /nfs/NAME (retry=0, so a
# failed server is an error, not a 2-minute retry), runs the user's command (/tb/cmd.sh) with:
#   KVFS_NODE=NAME  KVFS_NODE_INDEX=INDEX  KVFS_NODES="A B ..."  KVFS_NFS=/nfs/NAME
#   KVFS_RESULTS=/tb/out/NAME (rw, copied back to the host)  KVFS_REPO=<host tree, ro>
#   KVFS_SERVER=10.99.0.1  KVFS_NODE_ADDR=ADDRESS  KVFS_DELAY_MS
# then saves /proc/self/mountstats (this node's mount namespace) as mountstats and its per-op RPC
# counts as rpc_counts, ends the node's leftover processes, and unmounts.
NODE=$1
INDEX=$2
ADDR=$3
. /tb/config.sh
export PATH=/tb/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
OUT=/tb/out/$NODE
now() { cut -d' ' -f1 /proc/uptime; }
log() { echo "[node $NODE $(now)] $*"; }

hostname "node$NODE"
mount -t tmpfs -o mode=1777 tmpfs /tmp
MNT=/nfs/$NODE
mkdir -p "$MNT"
OPTS="retry=0${TB_MOUNT_OPTS:+,$TB_MOUNT_OPTS}"
t0=$(now)
if ! mount -t nfs -o "$OPTS" "10.99.0.1:/srv/nfs" "$MNT"; then
  log "NFS mount failed (options $OPTS)"
  echo 99 > "$OUT/rc"
  exit 0
fi
log "mounted 10.99.0.1:/srv/nfs at $MNT ($(grep " $MNT " /proc/mounts | cut -d' ' -f4)) in $(awk "BEGIN{print $(now) - $t0}") s"
grep " $MNT " /proc/mounts > "$OUT/mount_options"

export KVFS_NODE=$NODE KVFS_NODE_INDEX=$INDEX KVFS_NODES="$TB_NODES" KVFS_NFS=$MNT KVFS_RESULTS=$OUT \
  KVFS_REPO=$TB_REPO KVFS_SERVER=10.99.0.1 KVFS_NODE_ADDR=$ADDR KVFS_DELAY_MS=${TB_DELAY_MS:-0} \
  HOME=/root
cd "$OUT" || exit 1
log "running command"
/bin/sh /tb/cmd.sh > "$OUT/log" 2>&1
rc=$?
log "command exited $rc"
echo "$rc" > "$OUT/rc"

cat /proc/self/mountstats > "$OUT/mountstats"
nfsops "$MNT" > "$OUT/rpc_counts"

# end whatever the command left running in this node (e.g. a kvfs daemon), then unmount
for m in $(awk '$3 ~ /^fuse/ {print $2}' /proc/mounts); do fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m"; done
for p in $(ip netns pids "n$NODE" 2>/dev/null); do
  [ "$p" != $$ ] && kill "$p" 2>/dev/null
done
sleep 0.2
umount "$MNT" 2>/dev/null || umount -l "$MNT"
exit 0
