#!/usr/bin/env bash
# The two README commands.
#   tools/dev.sh demo   install deps, build, mount kvfs over a local backing directory and run a
#                       vLLM-like workload (1,000 chunks of 2,359,296 B), print `kvfs stats`, unmount.
#   tools/dev.sh test   install deps, build (plus an ASan/UBSan build of the unit tests) and run every test,
#                       then the NFS test bed smoke test (KVFS_SKIP_NFS=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
jobs=$(nproc)

build() {  # build DIR TARGET|all [cmake args...]
  local dir=$1 target=$2; shift 2
  cmake -S "$top" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" --target "$target"
}

case "${1:-}" in
  demo)
    packaging/install-deps.sh
    build build all -DKVFS_BUILD_TESTS=OFF
    exec tools/demo.sh build
    ;;
  test)
    packaging/install-deps.sh
    build build all
    nfs_pid=""
    if [ "${KVFS_SKIP_NFS:-0}" != 1 ]; then
      # The NFS guest image (debootstrap: mostly download and disk; it packs the runtime libraries of
      # build/tools/kvfs, so it starts once that exists) builds while the sanitizer build compiles.
      (tests/nfs/testbed.sh build > build-nfs-image.log 2>&1) &
      nfs_pid=$!
    fi
    # -O1 keeps the sanitizer build quick to compile and still fast enough to run; -g1 (line tables) is
    # all a sanitizer report needs.
    build build-asan kvfs_unit_tests -DKVFS_SANITIZE=ON -DKVFS_BUILD_BENCHMARKS=OFF -DKVFS_PACKAGING=OFF \
      -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1"
    echo "== unit tests (ASan/UBSan) =="
    (cd build-asan && ctest -L unit --output-on-failure -j"$jobs" --timeout 600)
    echo "== all tests =="
    (cd build && ctest --output-on-failure --timeout 900 -j2)
    if [ "${KVFS_SKIP_NFS:-0}" != 1 ]; then
      echo "== NFS test bed smoke test (qemu guest: knfsd + two NFS client nodes) =="
      wait "$nfs_pid" || { echo "NFS guest image build failed:"; tail -20 build-nfs-image.log; }
      KVFS_BIN="$top/build/tools/kvfs" KVFS_NFS_SKIP_UNSUPPORTED=1 bash tests/nfs/smoke_test.sh
    fi
    ;;
  *)
    echo "usage: tools/dev.sh demo|test" >&2
    exit 2
    ;;
esac
