#!/usr/bin/env bash
# kvfs-bench suite: every connector profile, direct on kvfs-nfsim vs kvfs over it, JSON per run + plots.
#   tools/bench.sh BUILD_DIR [OUT_DIR] [quick|moderate|full]
# quick    (the `make bench`-style one-liner, < 5 min on 2 cores): small chunk counts, bytes capped
# moderate (docs/benchmarks.md tables): a few minutes per profile
# full     (the issue's targets: 2,000 chunks, 4 threads, 0.5 ms): long; run once, on a quiet machine
set -euo pipefail
build=${1:?usage: tools/bench.sh BUILD_DIR [OUT_DIR] [quick|moderate|full]}
out=${2:-docs/bench}
size=${3:-quick}
bench="$build/tools/kvfs-bench"
mkdir -p "$out"
case "$size" in
  quick)    n2=64;  n36=4;  nsm=300;  n9=12; nnixl=2 ;;
  moderate) n2=400; n36=24; nsm=2000; n9=64; nnixl=12 ;;
  full)     n2=2000; n36=200; nsm=2000; n9=400; nnixl=50 ;;
  *) echo "unknown size $size" >&2; exit 2 ;;
esac
run() {  # name, args...
  local name=$1; shift
  echo "== $name: kvfs-bench $*"
  "$bench" --json "$out/$name.json" "$@" | tee "$out/$name.txt"
}
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
