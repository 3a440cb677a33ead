#!/usr/bin/env bash
# The two README commands.
#   tools/dev.sh demo   install deps, build, mount kvfs over a local backing directory and run a
#                       vLLM-like workload (1,000 chunks of 2,359,296 B), print `kvfs stats`, unmount.
#   tools/dev.sh test   install deps, build the programs (build/) and the unit tests under ASan/UBSan
#                       (build-asan/), run the unit tests there, the S3 client's tests there against a real
#                       Ceph RADOS Gateway on loopback, and the integration tests against build/,
#                       then the NFS test bed smoke test (KVFS_SKIP_NFS=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
jobs=$(nproc)

build() {  # build DIR "TARGET..." [cmake args...]
  local dir=$1 targets=$2 gen=""; shift 2
  # Ninja when there is no build dir yet (it compiles a library's objects while the libraries it links
  # are still building: both cores busy); an existing build dir keeps the generator it was made with.
  [ -f "$dir/CMakeCache.txt" ] && gen=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$dir/CMakeCache.txt")
  [ -n "$gen" ] || { command -v ninja >/dev/null && gen=Ninja || gen="Unix Makefiles"; }
  # A unity build (8 sources per compile) takes 2-3x less CPU than one compile per source.
  cmake -S "$top" -B "$dir" -G "$gen" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON "$@" >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$jobs" --target $targets
}

unit_shards() {  # BIN N: the unit tests in N parallel shards, one process each (a process per test, as
  # ctest would run them, pays the sanitizers' start-up 250 times); on failure, the failures and the tail.
  # N is 4 per core: the tests wait (fsync, the evictor's ticks, sleeps) for a third of their time, so
  # one shard per core left a core idle (2 cores, 2026-12-07: 2 shards 285 s, 3 shards 286 s, 8 shards
  # 207 s, CPU 1.9 cores busy).
  local bin=$1 n=$2 rc=0 i pids=()
  for ((i = 0; i < n; i++)); do
    GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout 1200 "$bin" --gtest_brief=1 >"$bin.shard$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < n; i++)); do
    if wait "${pids[$i]}"; then
      grep -h "^\[  PASSED  \]" "$bin.shard$i.log" | sed "s/^/shard $i: /"
    else
      rc=1
      echo "shard $i of $n FAILED ($bin.shard$i.log):"
      grep -n -B2 -A12 -E "Failure$|^\[  FAILED  \]|ERROR: (Address|Leak)Sanitizer|runtime error" \
        "$bin.shard$i.log" | head -300
      tail -n 20 "$bin.shard$i.log"
    fi
  done
  return $rc
}

case "${1:-}" in
  demo)
    # The demo needs no S3 test server (Ceph RADOS Gateway, ~100 s to install): leave it out.
    KVFS_NO_S3_SERVER=${KVFS_NO_S3_SERVER:-1} packaging/install-deps.sh
    build build all -DKVFS_BUILD_TESTS=OFF
    exec tools/demo.sh build
    ;;
  test)
    echo "== $(date +%T) dependencies, then the optimised build =="
    KVFS_NO_S3_SERVER=1 packaging/install-deps.sh
    # The S3 tests' server (Ceph RADOS Gateway: ~100 s of download and unpacking on a fresh machine)
    # installs while the optimised build compiles; it is needed only after the unit tests. It must end
    # before the NFS test bed starts, which may apt-get install its own host packages (one dpkg lock).
    (packaging/install-deps.sh > install-s3-server.log 2>&1) &
    s3_deps_pid=$!
    # The optimised build: the programs, the package and the integration tests. The unit tests run in
    # the sanitizer build below (one compile of them instead of two).
    build build all -DKVFS_BUILD_UNIT_TESTS=OFF
    wait "$s3_deps_pid" || { echo "installing the S3 test server failed:"; tail -20 install-s3-server.log; exit 1; }
    nfs_pid=""
    if [ "${KVFS_SKIP_NFS:-0}" != 1 ]; then
      # The NFS guest image (debootstrap: mostly download and disk; it packs the runtime libraries of
      # build/tools/kvfs, so it starts once that exists) builds while the sanitizer build compiles.
      (tests/nfs/testbed.sh build > build-nfs-image.log 2>&1) &
      nfs_pid=$!
    fi
    # -O0 compiles in half the time of -O1 and the tests still run in about two minutes; -g1 (line
    # tables) is all a sanitizer report needs.
    echo "== $(date +%T) the sanitizer build =="
    build build-asan "kvfs_unit_tests kvfs_s3_tests" -DKVFS_SANITIZE=ON -DKVFS_BUILD_BENCHMARKS=OFF -DKVFS_PACKAGING=OFF \
      -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O0"
    echo "== $(date +%T) unit tests (ASan/UBSan) =="
    unit_shards build-asan/tests/kvfs_unit_tests $((4 * jobs))
    # The S3 client's tests (ASan build) start Ceph RADOS Gateway themselves and mostly wait on it: they
    # run beside the integration tests. Here a missing server is a failure, not a skip (install-deps.sh
    # installed it).
    echo "== $(date +%T) S3 client tests (ASan/UBSan, Ceph RGW on loopback) in the background =="
    (cd build-asan && KVFS_S3_REQUIRED=${KVFS_S3_REQUIRED:-1} ctest -L s3 --output-on-failure --timeout 600 \
      > s3-tests.log 2>&1) &
    s3_pid=$!
    echo "== $(date +%T) integration tests =="
    # py_s3_mount_test (kvfs over a bucket) starts its own Ceph RGW: a missing server fails here too.
    # Three at a time on 2 cores: the tests wait (mounts, sleeps, commit delays) for much of their time
    # (2026-12-07, loaded: integration ~10 min with -j2, 7m38s with -j3).
    (cd build && KVFS_S3_REQUIRED=${KVFS_S3_REQUIRED:-1} ctest --output-on-failure --timeout 900 -j3)
    if wait "$s3_pid"; then
      grep -E "tests passed|PASSED|SKIPPED" build-asan/s3-tests.log
    else
      echo "S3 client tests FAILED:"; cat build-asan/s3-tests.log; exit 1
    fi
    if [ "${KVFS_SKIP_NFS:-0}" != 1 ]; then
      echo "== $(date +%T) NFS test bed smoke test (qemu guest: knfsd + two NFS client nodes) =="
      wait "$nfs_pid" || { echo "NFS guest image build failed:"; tail -20 build-nfs-image.log; }
      KVFS_BIN="$top/build/tools/kvfs" KVFS_NFS_SKIP_UNSUPPORTED=1 bash tests/nfs/smoke_test.sh
    fi
    echo "== $(date +%T) all passed =="
    ;;
  *)
    echo "usage: tools/dev.sh demo|test" >&2
    exit 2
    ;;
esac
