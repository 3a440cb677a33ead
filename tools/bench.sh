#!/usr/bin/env bash
# kvfs-bench suites, JSON + text per run.
#   tools/bench.sh BUILD_DIR [OUT_DIR] [quick|moderate|full] [connectors|ceiling]
# Suite "connectors" (default): every connector profile, direct on kvfs-nfsim vs kvfs over it, + plots.
# Suite "ceiling" (issue #15): vllm 2.25 MiB, vllm 36 MiB, sglang-file 144 KiB, lmcache-nixl (4 KiB
#   writes) and creates (1 KiB files, one directory), each at 0 and at 0.5 ms per metadata op, in modes
#   direct, ceiling (kvfs-nfsim at 0 latency as a bare passthrough daemon over the same directory) and
#   kvfs, every mode 3 times interleaved (BENCH_REPEAT); prints per run and as median the throughput,
#   kvfs/direct, kvfs/ceiling, daemon CPU s/GB of kvfs and of the ceiling, and the load average.
# quick    (connectors < 5 min on 2 cores; ceiling ~3 min per repeat): small counts; the ceiling suite skips the
#          "cold load, full cache" phase (it loads 1.25 GiB of filler per kvfs run)
# moderate (docs/benchmarks.md tables): a few minutes per profile
# full     (the issue's targets): long; run once, on a quiet machine
set -euo pipefail
build=${1:?usage: tools/bench.sh BUILD_DIR [OUT_DIR] [quick|moderate|full] [connectors|ceiling]}
out=${2:-docs/bench}
size=${3:-quick}
suite=${4:-connectors}
bench="$build/tools/kvfs-bench"
mkdir -p "$out"
run() {  # name, args...
  local name=$1; shift
  echo "== $name: kvfs-bench $*"
  "$bench" --json "$out/$name.json" "$@" | tee "$out/$name.txt"
}

if [ "$suite" = ceiling ]; then
  # chunks: vllm 2.25 MiB, vllm 36 MiB, sglang-file, lmcache-nixl, creates; nixl chunk size; full-cache filler
  case "$size" in
    quick)    c2=24;  c36=2;  csm=200;  cnx=3;  nxb=4194304;  ccr=300;   fill=0 ;;
    moderate) c2=200; c36=12; csm=1000; cnx=4;  nxb=37748736; ccr=2000;  fill=auto ;;
    full)     c2=400; c36=24; csm=4000; cnx=12; nxb=37748736; ccr=10000; fill=auto ;;
    *) echo "unknown size $size" >&2; exit 2 ;;
  esac
  common=(--modes direct,ceiling,kvfs --repeat "${BENCH_REPEAT:-3}" --threads 4 --fill-bytes "$fill" --no-progress)
  # every data set fits kvfs's default 1 GiB value cache, so the warm load is warm
  for lat in 0 500; do
    run "ceiling-vllm-lat$lat"        --profile vllm --chunks "$c2" --latency-us "$lat" "${common[@]}"
    run "ceiling-vllm-36MiB-lat$lat"  --profile vllm --chunks "$c36" --chunk-bytes 37748736 --latency-us "$lat" "${common[@]}"
    run "ceiling-sglang-file-lat$lat" --profile sglang-file --chunks "$csm" --latency-us "$lat" "${common[@]}"
    run "ceiling-lmcache-nixl-lat$lat" --profile lmcache-nixl --chunks "$cnx" --chunk-bytes "$nxb" --latency-us "$lat" "${common[@]}"
    run "ceiling-creates-lat$lat"     --profile creates --chunks "$ccr" --latency-us "$lat" "${common[@]}"
  done
  exit 0
fi
# vLLM loads are O_DIRECT: a warm load is served by kvfs's LRU, which must hold the chunks (2,000 x 2.25 MiB
# = 4.7 GB in the full run; the default --cache-size is 1 GiB).
cache=()
[ "$size" = full ] && cache=(--kvfs-arg --cache-size --kvfs-arg 6GiB)
run vllm          --profile vllm --chunks "$n2" "${cache[@]}"
run vllm-36MiB    --profile vllm --chunks "$n36" --chunk-bytes 37748736
run vllm-36MiB-nolat --profile vllm --chunks "$n36" --chunk-bytes 37748736 --latency-us 0
run llmd          --profile llmd --chunks "$n36"
run lmcache-fs    --profile lmcache-fs --chunks "$n36"
run lmcache-nixl  --profile lmcache-nixl --chunks "$nnixl"
run sglang-file   --profile sglang-file --chunks "$nsm"
run sglang-file-p64 --profile sglang-file --chunks "$n9" --chunk-bytes 9437184
run sglang-nixl   --profile sglang-nixl --chunks "$n9"
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3  # Debian's python3-matplotlib lives there
if $py -c 'import matplotlib' 2>/dev/null; then
  $py "$(dirname "$0")/bench_plot.py" "$out"/*.json --out "$out"
else
  echo "(python3-matplotlib not installed: no plots; apt-get install python3-matplotlib)"
fi
