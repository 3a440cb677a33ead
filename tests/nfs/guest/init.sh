#!/bin/busybox sh
# kvfs NFS test bed: the initramfs's /init (busybox). Baked into initrd.img by testbed.sh's build step
# (a change here changes the recipe hash, so the next run rebuilds the initrd).
# Loads the virtio, ext4 and 9p modules listed in /modules.list (dependency order), mounts the root
# file system (/dev/vda, ext4, a throw-away qemu snapshot), mounts the run directory (9p tag "tb", rw) at
# /tb and the host tree (9p tag "repo", ro) at the host's own path (kvfs.repo=PATH on the kernel command
# line), then switch_root's into /tb/guest.sh. With kvfs.probe=1 it only prints KVFS-PROBE-OK and powers
# off (used to check that an accelerator boots at all).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

die() {
  echo "KVFS-INIT-FAIL: $*"
  echo o > /proc/sysrq-trigger
  sleep 30
}

for arg in $(cat /proc/cmdline); do
  case "$arg" in
    kvfs.repo=*) REPO="${arg#kvfs.repo=}" ;;
    kvfs.probe=1) echo "KVFS-PROBE-OK"; echo o > /proc/sysrq-trigger; sleep 30 ;;
  esac
done

while read -r m; do
  [ -n "$m" ] && insmod "$m" 2>/dev/null
done < /modules.list

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -b /dev/vda ] || die "no /dev/vda (virtio_blk did not load?)"
mkdir -p /newroot
mount -t ext4 /dev/vda /newroot || die "cannot mount the root file system"
mkdir -p /newroot/tb
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none tb /newroot/tb \
  || die "cannot mount the 9p run directory"
if [ -n "$REPO" ]; then
  mkdir -p "/newroot$REPO"
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro repo "/newroot$REPO" \
    || die "cannot mount the 9p host tree at $REPO"
fi
[ -f /newroot/tb/guest.sh ] || die "no guest.sh in the run directory"
umount /proc /sys
umount /dev
exec switch_root /newroot /bin/sh /tb/guest.sh
