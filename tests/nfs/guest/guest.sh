#!/bin/sh
# kvfs NFS test bed: PID 1 of the guest (copied into the run directory /tb by testbed.sh; runs after the
# initramfs switch_root'ed into the Debian root file system).
#
# 1. mounts proc/sys/dev/tmpfs, loads nfsd/nfs/veth/bridge/netem/fuse;
# 2. knfsd: exports a tmpfs (/srv/nfs, fsid=1) to 10.99.0.0/24, NFSv3+ only (rpc.nfsd -N 3 ...; -N 2
#    fails on 6.1), rpc.mountd, ends the NFSv4 grace period (/proc/fs/nfsd/v4_end_grace);
# 3. per node X (A, B, ...): network namespace nX + its own UTS namespace (host name nodeX), a veth pair on
#    bridge tb0 (server 10.99.0.1, node i at 10.99.0.(10+i)), optional netem delay on both ends;
#    runs /tb/node.sh inside it, which mounts the export (retry=0) and runs the user's command;
# 4. waits for every node, writes /tb/out/guest.done, powers off.
# Configuration comes from /tb/config.sh (written by the host).
export PATH=/tb/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /run/netns /run/lock
hostname server

now() { cut -d' ' -f1 /proc/uptime; }
log() { echo "[tb $(now)] $*"; }
poweroff_now() {
  sync
  echo o > /proc/sysrq-trigger
  sleep 60
}
fail() {
  log "GUEST-FAIL: $*"
  echo "$*" > /tb/out/guest.fail
  poweroff_now
}

. /tb/config.sh
mkdir -p /tb/out /tb/sync
log "guest up (kernel $(uname -r), $(nproc) cpus)"

# in parallel: module loading (signature checks) is slow under TCG
modprobe nfsd || log "modprobe nfsd failed" &
modprobe nfsv4 || log "modprobe nfsv4 failed" &
for m in veth bridge sch_netem fuse; do modprobe "$m" || log "modprobe $m failed"; done
wait
log "modules loaded"
ip link set lo up

# ---- knfsd ----
mkdir -p /srv/nfs /var/lib/nfs/v4recovery /run/rpc_pipefs
mount -t tmpfs -o "size=${TB_EXPORT_SIZE:-1g},mode=1777" tmpfs /srv/nfs
mount -t rpc_pipefs rpc_pipefs /run/rpc_pipefs 2>/dev/null
mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd || fail "cannot mount /proc/fs/nfsd"
echo "/srv/nfs 10.99.0.0/24(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=1)" > /etc/exports
exportfs -ra || fail "exportfs failed"
rpc.mountd --no-udp 2>/dev/null || rpc.mountd || fail "rpc.mountd failed"
rpc.nfsd -N 3 "${TB_NFSD_THREADS:-8}" || fail "rpc.nfsd -N 3 failed"
echo Y > /proc/fs/nfsd/v4_end_grace 2>/dev/null || log "could not end the v4 grace period"
log "nfsd up: versions $(cat /proc/fs/nfsd/versions)"

# ---- network: bridge tb0 with the server's address, one veth per node ----
ip link add tb0 type bridge || fail "no bridge support"
ip addr add 10.99.0.1/24 dev tb0
ip link set tb0 up

i=0
for n in $TB_NODES; do
  i=$((i + 1))
  ns="n$n"
  ip netns add "$ns" || fail "ip netns add $ns"
  ip link add "veth$n" type veth peer name eth0 netns "$ns" || fail "veth for $n"
  ip link set "veth$n" master tb0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.99.0.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
  if [ "${TB_DELAY_MS:-0}" != 0 ]; then
    # one-way delay on each direction: the round trip gains 2 x TB_DELAY_MS
    tc qdisc add dev "veth$n" root netem delay "${TB_DELAY_MS}ms" || fail "tc netem (host side)"
    ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "${TB_DELAY_MS}ms" || fail "tc netem ($n)"
  fi
done
log "network up: nodes $TB_NODES (delay ${TB_DELAY_MS:-0} ms each way)"

# ---- run every node ----
pids=""
i=0
for n in $TB_NODES; do
  i=$((i + 1))
  mkdir -p "/tb/out/$n"
  ip netns exec "n$n" unshare --uts --mount --propagation private \
    /bin/sh /tb/node.sh "$n" "$((i - 1))" "10.99.0.$((10 + i))" > "/tb/out/$n/node.log" 2>&1 &
  pids="$pids $!"
done
for p in $pids; do wait "$p"; done
log "all nodes done"
for n in $TB_NODES; do
  log "node $n: rc=$(cat "/tb/out/$n/rc" 2>/dev/null || echo missing)"
done
nfsstat -s > /tb/out/server.nfsstat 2>&1
dmesg > /tb/out/dmesg.txt 2>&1
now > /tb/out/guest.done
log "powering off"
poweroff_now
