#!/bin/bash
# kvfs NFS test bed: a qemu guest (Debian 12, its own 6.1 kernel) running a kernel NFS server and N NFS
# client "nodes", each in its own network + UTS + mount namespace (so the server sees N separate NFSv4
# clients, with real delegations, attribute caches and close-to-open), sharing the host's tree read-only.
# See docs/nfs-testbed.md for how to use it and what it measured.
#
# Usage:
#   tests/nfs/testbed.sh build [--force]        build the guest once (cached; later runs skip it)
#   tests/nfs/testbed.sh run [options] -- 'CMD'  boot, run CMD on every node, collect, power off
#   tests/nfs/testbed.sh smoke [options]          one boot, two nodes: raw NFS chunk A->B (asserted),
#                                                 kvfs chunk A->B (informative), RPC counts
#   tests/nfs/testbed.sh probe                    which accelerator works here (kvm or tcg), cached
# Run options:
#   --nodes N          number of nodes (A, B, ...; default 2)
#   --delay-ms MS      netem delay on each direction of every node's link (round trip +2*MS)
#   --mount-opts OPTS  extra NFS mount options (default: the kernel's defaults, NFSv4.2)
#   --share DIR        host tree shared read-only at the same path (default: this repo)
#   --results DIR      where results go (default: $CACHE/runs/<time>); must not exist or be empty
#   --env K=V          exported to every node's command (repeatable)
#   --timeout S        hard limit for the whole guest run (default 900); qemu is killed after it
#   --mem MB, --smp N  guest size (default 2048 MB, 2 vCPUs)
# Each node's command runs in the node's results dir with KVFS_NODE, KVFS_NODE_INDEX, KVFS_NODES,
# KVFS_NFS (its NFS mount), KVFS_RESULTS, KVFS_REPO, KVFS_SERVER, KVFS_DELAY_MS; PATH has the helpers
# nfsops (per-op RPC counts of this node's mount), tb-signal / tb-wait (out-of-band barriers).
# Environment: KVFS_NFS_CACHE (default /var/tmp/kvfs-nfs-testbed), KVFS_NFS_ACCEL (auto|tcg|kvm),
# KVFS_NFS_MIRROR (Debian mirror, default http://deb.debian.org/debian), KVFS_NFS_EXTRA_PACKAGES.
# Exit codes: 0 ok; 1 a node's command failed; 2 this host cannot run the test bed (message says why);
# 3 the guest failed or timed out; 64 usage.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${KVFS_NFS_CACHE:-/var/tmp/kvfs-nfs-testbed}
MIRROR=${KVFS_NFS_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
RECIPE_VERSION=3
BASE_PACKAGES="linux-image-amd64 kmod busybox-static nfs-kernel-server nfs-common fuse3 iproute2 procps
  util-linux e2fsprogs python3 librocksdb7.8 liburing2 libxxhash0 libfuse3-3 libspdlog1.10 libfmt9"
# Module trees the guest never needs (shrinks the image by a few hundred MB).
PRUNE_MODULES="drivers/gpu drivers/media drivers/net/wireless drivers/infiniband drivers/staging
  drivers/bluetooth drivers/isdn drivers/iio drivers/usb drivers/hid drivers/input drivers/scsi
  drivers/ata drivers/md drivers/mmc drivers/mtd drivers/thunderbolt drivers/platform sound net/bluetooth
  net/wireless net/mac80211 fs/btrfs fs/xfs fs/ocfs2 fs/gfs2 fs/f2fs fs/nilfs2"

T_START=$(date +%s.%N)
elapsed() { awk -v a="$T_START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "testbed: $*" >&2; }
die_host() { echo "testbed: CANNOT RUN ON THIS HOST: $*" >&2; exit 2; }
die_usage() { echo "testbed: $*" >&2; exit 64; }

# ---------------------------------------------------------------------------------------------- host
ensure_host_tools() {
  local missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v mke2fs >/dev/null || missing+=(e2fsprogs)
  command -v cpio >/dev/null || missing+=(cpio)
  command -v flock >/dev/null || missing+=(util-linux)
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die_host "missing ${missing[*]} and not root (cannot apt-get install them)"
  command -v apt-get >/dev/null || die_host "missing ${missing[*]} and no apt-get"
  say "installing host packages: ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q --no-install-recommends \
      "${missing[@]}" >"$CACHE/apt-host.log" 2>&1; then
    timeout 300 apt-get update -q >>"$CACHE/apt-host.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q --no-install-recommends \
      "${missing[@]}" >>"$CACHE/apt-host.log" 2>&1 \
      || die_host "apt-get install ${missing[*]} failed (no network to the Debian mirror?); see $CACHE/apt-host.log"
  fi
}

check_qemu() {
  qemu-system-x86_64 -version >/dev/null 2>&1 || die_host "qemu-system-x86_64 does not run"
}

# Packages the kvfs binaries need at run time: their ldd libraries mapped to Debian packages, all of
# them (also those debootstrap installs anyway, like libc6), so the list depends on the binaries only:
# a binary that links one more library triggers a rebuild, and nothing else does. (It used to leave out
# the packages the cached image already had, which made the recipe flip: an image with library X gave
# a recipe without X, which rebuilt an image without X, whose kvfs then failed to start.)
ldd_packages() {
  local bin lib p pkgs=""
  for bin in "${KVFS_BIN:-}" "$REPO"/build/tools/kvfs "$REPO"/build/tests/kvfs_integration_tests; do
    [ -n "$bin" ] && [ -x "$bin" ] || continue
    for lib in $(ldd "$bin" 2>/dev/null | awk '/=> \// { print $3 }'); do
      lib=$(readlink -f "$lib")
      p=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null || true)
      pkgs="$pkgs $(echo "$p" | head -1 | cut -d: -f1)"
    done
  done
  echo "$pkgs" | tr ' ' '\n' | sed '/^$/d' | sort -u
}

package_list() {
  echo "$BASE_PACKAGES ${KVFS_NFS_EXTRA_PACKAGES:-} $(ldd_packages)" | tr -s ' \n' '\n' | sed '/^$/d' | sort -u
}

recipe_hash() {
  { echo "$RECIPE_VERSION $SUITE $PRUNE_MODULES"; package_list; cat "$HERE/guest/init.sh"
    declare -f build_rootfs build_initrd; } | sha256sum | cut -c1-16
}

# ---------------------------------------------------------------------------------------------- build
build_rootfs() { # $1 = staging root
  local root=$1 pkgs
  pkgs=$(package_list | tr '\n' ',' | sed 's/,$//')
  say "debootstrap $SUITE (minbase) + $pkgs"
  if ! timeout 1800 debootstrap --variant=minbase --include="$pkgs" "$SUITE" "$root" "$MIRROR" \
      >"$CACHE/debootstrap.log" 2>&1; then
    tail -5 "$CACHE/debootstrap.log" >&2
    if grep -q -i -E 'resolv|connect|download|Failed getting release' "$CACHE/debootstrap.log"; then
      die_host "debootstrap could not download from $MIRROR (no network?); see $CACHE/debootstrap.log"
    fi
    echo "testbed: debootstrap failed; see $CACHE/debootstrap.log" >&2
    exit 3
  fi
  echo server >"$root/etc/hostname"
  : >"$root/etc/fstab"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc \
    "$root"/usr/share/man "$root"/usr/share/locale "$root"/usr/share/info "$root"/boot/initrd.img*
  local kver d
  kver=$(basename "$(ls -d "$root"/lib/modules/* | head -1)")
  for d in $PRUNE_MODULES; do rm -rf "$root/lib/modules/$kver/kernel/$d"; done
  chroot "$root" depmod "$kver"
}

build_initrd() { # $1 = root, $2 = output initrd
  local root=$1 out=$2 kver stage m
  kver=$(basename "$(ls -d "$root"/lib/modules/* | head -1)")
  stage=$(mktemp -d "$CACHE/initrd.XXXXXX")
  mkdir -p "$stage"/{bin,dev,proc,sys,newroot,lib/modules}
  cp "$root/bin/busybox" "$stage/bin/busybox"
  cp "$HERE/guest/init.sh" "$stage/init"
  chmod 755 "$stage/init" "$stage/bin/busybox"
  : >"$stage/modules.list"
  for m in $(chroot "$root" modprobe -S "$kver" --show-depends -a virtio_pci virtio_blk ext4 \
      crc32c_generic 9p 9pnet_virtio 2>/dev/null | awk '$1 == "insmod" { print $2 }'); do
    grep -qxF "/lib/modules/$(basename "$m")" "$stage/modules.list" && continue
    cp "$root$m" "$stage/lib/modules/"
    echo "/lib/modules/$(basename "$m")" >>"$stage/modules.list"
  done
  (cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$out"
  rm -rf "$stage"
}

do_build() { # $1 = force (0/1)
  local force=${1:-0} hash t0
  mkdir -p "$CACHE"
  ensure_host_tools
  check_qemu
  exec 9>"$CACHE/.lock"
  flock -w 3600 9 || die_host "timed out waiting for another build ($CACHE/.lock)"
  hash=$(recipe_hash)
  if [ "$force" = 0 ] && [ -f "$CACHE/image/recipe" ] && [ "$(cat "$CACHE/image/recipe")" = "$hash" ]; then
    flock -u 9
    return 0
  fi
  t0=$(date +%s)
  say "building the guest in $CACHE/image (recipe $hash); once, a few minutes"
  local root="$CACHE/rootfs.build" img="$CACHE/image.new"
  rm -rf "$root" "$img"
  mkdir -p "$root" "$img"
  build_rootfs "$root"
  build_initrd "$root" "$img/initrd.img"
  cp "$(ls "$root"/boot/vmlinuz-* | head -1)" "$img/vmlinuz"
  # An uncompressed ELF vmlinux boots through its PVH entry point: ~5 s faster under TCG than the
  # bzImage (no self-decompression, no real-mode setup). Kept only if the extraction works.
  if command -v python3 >/dev/null; then
    python3 - "$img/vmlinuz" "$img/vmlinux" <<'PY' || rm -f "$img/vmlinux"
import lzma, sys
d = open(sys.argv[1], 'rb').read()
i = d.find(b'\xfd7zXZ\x00')
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(d[i:]) if i >= 0 else b''
if out[:4] != b'\x7fELF':
    sys.exit(1)
open(sys.argv[2], 'wb').write(out)
PY
  fi
  local mb
  mb=$(du -sm "$root" | cut -f1)
  mb=$((mb + mb / 4 + 256))
  say "ext4 image of ${mb} MB"
  mke2fs -q -F -t ext4 -L kvfsroot -E root_owner=0:0 -d "$root" "$img/rootfs.img" "${mb}M" >/dev/null \
    || { echo "testbed: mke2fs -d failed" >&2; exit 3; }
  package_list >"$img/packages.txt"
  chroot "$root" dpkg-query -W -f '${Package}\n' | sed 's/:amd64$//' | sort -u >"$img/installed.txt"
  echo "$hash" >"$img/recipe"
  rm -rf "$CACHE/image" "$root"
  mv "$img" "$CACHE/image"
  flock -u 9
  say "guest built in $(( $(date +%s) - t0 )) s"
}

# ---------------------------------------------------------------------------------------------- qemu
QEMU_PID=""
cleanup_qemu() {
  if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
    kill "$QEMU_PID" 2>/dev/null || true
    sleep 1
    kill -9 "$QEMU_PID" 2>/dev/null || true
  fi
}
trap cleanup_qemu EXIT
trap 'cleanup_qemu; exit 130' INT TERM

# run_qemu ACCEL RUNDIR SHARE TIMEOUT APPEND: boots the guest; returns qemu's exit code (124 = timeout)
run_qemu() {
  local accel=$1 run=$2 share=$3 tmo=$4 append=$5 cpu
  local args=() kernel="$CACHE/image/vmlinuz"
  [ -f "$CACHE/image/vmlinux" ] && kernel="$CACHE/image/vmlinux"
  if [ "$accel" = kvm ]; then args+=(-accel kvm -cpu host); else args+=(-accel tcg,thread=multi -cpu max); fi
  args+=(-smp "${SMP:-2}" -m "${MEM:-2048}" -nodefaults -no-user-config -display none -no-reboot
    -kernel "$kernel" -initrd "$CACHE/image/initrd.img"
    -append "console=ttyS0 root=/dev/vda panic=-1 loglevel=4 $append"
    -drive "file=$CACHE/image/rootfs.img,format=raw,if=virtio,snapshot=on"
    -virtfs "local,path=$run,mount_tag=tb,security_model=none,id=tb"
    -serial "file:$run/console.log" -monitor none)
  if [ -n "$share" ]; then
    args+=(-virtfs "local,path=$share,mount_tag=repo,security_model=none,readonly=on,multidevs=remap,id=repo")
  fi
  : >"$run/console.log"
  local rc=0
  timeout --kill-after=10 "$tmo" qemu-system-x86_64 "${args[@]}" >"$run/qemu.log" 2>&1 &
  QEMU_PID=$!
  wait "$QEMU_PID" || rc=$?
  QEMU_PID=""
  return "$rc"
}

detect_accel() {
  local want=${KVFS_NFS_ACCEL:-auto} key f run
  case "$want" in
    tcg|kvm) echo "$want"; return ;;
    auto) ;;
    *) die_usage "KVFS_NFS_ACCEL must be auto, tcg or kvm" ;;
  esac
  if [ ! -c /dev/kvm ] || [ ! -w /dev/kvm ]; then echo tcg; return; fi
  key=$( { uname -r; qemu-system-x86_64 -version | head -1; cat "$CACHE/image/recipe"; } | sha256sum | cut -c1-12)
  f="$CACHE/accel.$key"
  if [ ! -f "$f" ]; then
    say "probing KVM (a hang here is detected by a 20 s timeout)"
    run=$(mktemp -d "$CACHE/probe.XXXXXX")
    run_qemu kvm "$run" "" 20 "kvfs.probe=1" || true
    if grep -q KVFS-PROBE-OK "$run/console.log"; then echo kvm >"$f"; else echo tcg >"$f"; fi
    rm -rf "$run"
    say "KVM probe: $(cat "$f")"
  fi
  cat "$f"
}

# ---------------------------------------------------------------------------------------------- run
do_run() {
  local nodes=2 delay=0 mopts="" share="$REPO" results="" tmo=900 envs=() cmd=""
  MEM=2048 SMP=2
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) nodes=$2; shift 2 ;;
      --delay-ms) delay=$2; shift 2 ;;
      --mount-opts) mopts=$2; shift 2 ;;
      --share) share=$(cd "$2" && pwd); shift 2 ;;
      --results) results=$2; shift 2 ;;
      --env) envs+=("$2"); shift 2 ;;
      --timeout) tmo=$2; shift 2 ;;
      --mem) MEM=$2; shift 2 ;;
      --smp) SMP=$2; shift 2 ;;
      --) shift; cmd="$*"; break ;;
      *) die_usage "unknown run option '$1' (see the header of $0)" ;;
    esac
  done
  [ -n "$cmd" ] || die_usage "run needs a command after --"
  [[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 26 ] || die_usage "--nodes 1..26"
  [[ "$delay" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die_usage "--delay-ms takes a number"

  do_build 0
  local accel
  accel=$(detect_accel)
  if [ -z "$results" ]; then
    mkdir -p "$CACHE/runs"
    # keep the 10 newest runs
    { ls -1dt "$CACHE"/runs/run-* 2>/dev/null || true; } | tail -n +10 | xargs -r rm -rf
    results="$CACHE/runs/run-$(date +%Y%m%d-%H%M%S)-$$"
  fi
  mkdir -p "$results"
  [ -z "$(ls -A "$results")" ] || die_usage "results dir $results is not empty"
  results=$(cd "$results" && pwd)

  local names="" i
  for ((i = 0; i < nodes; i++)); do names="$names $(printf "\\x$(printf %x $((65 + i)))")"; done
  names=${names# }
  cp "$HERE/guest/guest.sh" "$HERE/guest/node.sh" "$results/"
  cp -r "$HERE/guest/bin" "$results/bin"
  {
    printf 'TB_NODES=%q\n' "$names"
    printf 'TB_DELAY_MS=%q\n' "$delay"
    printf 'TB_MOUNT_OPTS=%q\n' "$mopts"
    printf 'TB_REPO=%q\n' "$share"
    local e
    for e in "${envs[@]+"${envs[@]}"}"; do
      [[ "$e" == *=* ]] || die_usage "--env takes K=V"
      printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"
    done
  } >"$results/config.sh"
  printf '%s\n' "$cmd" >"$results/cmd.sh"

  local t_boot rc=0
  t_boot=$(date +%s.%N)
  say "booting ($accel, ${SMP} vCPU, ${MEM} MB), nodes: $names, delay ${delay} ms each way, results in $results"
  run_qemu "$accel" "$results" "$share" "$tmo" "kvfs.repo=$share" || rc=$?
  local secs
  secs=$(awk -v a="$t_boot" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "GUEST TIMED OUT after ${tmo} s; last console lines:"
    tail -20 "$results/console.log" >&2
    exit 3
  fi
  if [ ! -f "$results/out/guest.done" ]; then
    say "GUEST FAILED (qemu exit $rc); qemu said:"
    tail -5 "$results/qemu.log" >&2
    say "last console lines:"
    tail -30 "$results/console.log" >&2
    exit 3
  fi
  local fail=0 n r
  for n in $names; do
    r=$(cat "$results/out/$n/rc" 2>/dev/null || echo missing)
    echo "=== node $n: exit $r ($(cat "$results/out/$n/mount_options" 2>/dev/null | cut -d' ' -f4 | cut -c1-120))"
    if [ -s "$results/out/$n/log" ]; then tail -60 "$results/out/$n/log" | sed 's/^/  | /'; fi
    echo "  NFS RPCs on node $n's mount (per-op statistics of /proc/self/mountstats):"
    if [ -s "$results/out/$n/rpc_counts" ]; then
      awk '{ t += $2; s = s sprintf("%s %d, ", $1, $2) } END { sub(/, $/, "", s); print s; print "total " t }' \
        "$results/out/$n/rpc_counts" | fold -s -w 110 | sed 's/^/    /'
    else
      echo "    (none)"
    fi
    [ "$r" = 0 ] || fail=1
    [ "$r" = 99 ] && sed 's/^/  node.log: /' "$results/out/$n/node.log"
  done
  say "guest run ${secs} s (boot + commands + power-off), total $(elapsed) s; results: $results"
  return $fail
}

do_smoke() {
  local bin="${KVFS_BIN:-$REPO/build/tools/kvfs}"
  do_run --nodes 2 --timeout "${KVFS_NFS_SMOKE_TIMEOUT:-600}" --env "KVFS_BIN=$bin" "$@" \
    -- "sh $HERE/smoke_node.sh"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  build)
    f=0; [ "${1:-}" = --force ] && f=1
    do_build "$f"; say "image: $CACHE/image ($(du -sh "$CACHE/image" | cut -f1)), total $(elapsed) s" ;;
  run) do_run "$@" ;;
  smoke) do_smoke "$@" ;;
  probe) do_build 0; detect_accel ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 64 ;;
esac
