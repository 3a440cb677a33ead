#!/usr/bin/env bash
# Installs kvfs's build and test dependencies from Debian 12 packages. Safe to re-run.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libfuse3-dev fuse3 librocksdb-dev liburing-dev libxxhash-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev libspdlog-dev nlohmann-json3-dev libcpp-httplib-dev
      libsystemd-dev libcurl4-openssl-dev libtinyxml2-dev
      python3 clang-format fio strace
      # The S3 tier's test server: Ceph RADOS Gateway over a one-node cluster (tests/s3/s3_server.sh).
      # About 100 s to install on 2 cores; KVFS_NO_S3_SERVER=1 leaves it out (its tests then skip).
      )
if [ "${KVFS_NO_S3_SERVER:-0}" != 1 ]; then pkgs+=(radosgw ceph-mon ceph-osd openssl); fi
# Fuzzing is opt-in (tests/fuzz, -DKVFS_FUZZ=ON): KVFS_FUZZ=1 also installs clang (libFuzzer). CI does not
# need it: the regression corpus runs in the unit tests with gcc.
if [ "${KVFS_FUZZ:-0}" = 1 ]; then pkgs+=(clang); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# FUSE needs the device; load the module if it is not there yet (no-op in most containers).
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true
