#!/usr/bin/env bash
# Deterministic regression guard for the data path (issue #15): the kvfs daemon's user-space
# instructions per stored and per loaded chunk, counted by valgrind's callgrind (this VM has no PMU:
# `perf stat -e instructions` answers "not supported").
#
#   tools/instr_per_chunk.sh BUILD_DIR [CHUNKS (200)] [CHUNK_BYTES (2359296)]
#
# One kvfs daemon under `valgrind --tool=callgrind` (--foreground, so its pid is valgrind's), local
# backing and index directories under a fresh /var/tmp/kvfs-instr.XXXXXX, peer polling off. A single-
# threaded Python writer replays the vLLM fs-tier store (access, stat + mkdir of the fan-out, O_DIRECT
# O_EXCL tmp file, one write, close, rename) of CHUNKS chunks; the daemon is unmounted and mounted again
# (cold: empty cache) and every chunk is read back with O_DIRECT and compared byte for byte. The counters
# are zeroed (callgrind_control -z) before and dumped (-d) after each phase; the phase includes a 2 s
# settle so the group commit of the last chunks is counted. An idle interval (no requests, 1 s + the settle) is measured
# first on the same daemon: background threads (group commit timer, heartbeat) cost instructions per second
# of wall time, and under valgrind a phase takes ~50x longer than natively, so compare idle Ir/s x phase
# seconds with the phase's Ir before reading small differences. Counts are user space only: page faults,
# kernel copies and FUSE's kernel side are not in them (daemon CPU s/GB from kvfs-bench covers those).
# The load's verify path is fixed, not probed (a probe under valgrind would time valgrind): --verify-copy
# kernel, the path the figures in docs/benchmarks.md were counted with; VERIFY_COPY=inplace counts the other.
#
# Prints Ir per stored chunk, Ir per loaded chunk, idle Ir/s and the seconds of each phase, plus one
# machine-readable line "instr_per_chunk store=... load=... idle_per_s=...". It unmounts and kills only
# what it started; KEEP=1 keeps the work directory (callgrind dumps: callgrind_annotate FILE).
set -euo pipefail
build=$(cd "${1:?usage: tools/instr_per_chunk.sh BUILD_DIR [CHUNKS] [CHUNK_BYTES]}" && pwd)
chunks=${2:-200}
chunk_bytes=${3:-2359296}
kvfs="$build/tools/kvfs"
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
for t in valgrind callgrind_control fusermount3 mountpoint; do
  command -v "$t" >/dev/null || { echo "instr_per_chunk: $t not found (apt-get install valgrind fuse3)" >&2; exit 2; }
done
[ -x "$kvfs" ] || { echo "instr_per_chunk: $kvfs not built (cmake --build $build --target kvfs)" >&2; exit 2; }

work=$(mktemp -d /var/tmp/kvfs-instr.XXXXXX)
mnt=$work/mnt
mkdir -p "$work/backing" "$work/idx" "$mnt"
pid=""
cleanup() {
  if mountpoint -q "$mnt" 2>/dev/null; then fusermount3 -u "$mnt" 2>/dev/null || true; fi
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill "$pid" 2>/dev/null || true
  fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

start_daemon() {  # tag
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.%p" \
    "$kvfs" mount "$mnt" --backing "$work/backing" --index-dir "$work/idx" --node-id instr \
    --foreground --log-level warn --peer-poll-ms 0 --verify-copy "${VERIFY_COPY:-kernel}" \
    >"$work/daemon.$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    mountpoint -q "$mnt" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "instr_per_chunk: kvfs did not mount under valgrind:" >&2
  tail -20 "$work/daemon.$1.log" >&2
  exit 1
}
stop_daemon() {
  "$kvfs" umount "$mnt" >/dev/null 2>&1 || fusermount3 -u "$mnt"
  wait "$pid" 2>/dev/null || true
  pid=""
}
# Ir of the newest dump of this daemon (callgrind writes cg.TAG.PID.N per callgrind_control -d)
last_dump_ir() {  # tag
  local f
  f=$(ls -t "$work"/cg."$1".*.* 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "instr_per_chunk: no callgrind dump for $1" >&2; exit 1; }
  awk '/^summary:/ {print $2; exit}' "$f"
}
phase() {  # tag name command...: zero, run, settle, dump; writes "IR SECONDS" to $work/phase.out
  local tag=$1 name=$2; shift 2
  callgrind_control -z "$pid" >>"$work/callgrind_control.log" 2>&1
  local t0 t1
  t0=$(date +%s.%N)
  "$@"
  sleep 2
  t1=$(date +%s.%N)
  callgrind_control -d "$name" "$pid" >>"$work/callgrind_control.log" 2>&1
  echo "$(last_dump_ir "$tag") $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')" >"$work/phase.out"
}
workload() {  # store|lookup|load
  "$py" - "$1" "$mnt" "$chunks" "$chunk_bytes" <<'EOF'
import errno, hashlib, mmap, os, sys
what, root, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
def content(i):
    return (i.to_bytes(8, "little") * (size // 8 + 1))[:size]
def final(i):
    k = hashlib.sha256(b"chunk %d" % i).hexdigest()
    return f"{root}/Qwen_Qwen3-8B_0611cf79f8f1_r0/{k[:3]}/{k[3:5]}_g0/{k}.bin"
for i in range(n):
    f = final(i)
    if what == "store":
        assert not os.path.exists(f), f
        d = os.path.dirname(f)
        todo = []
        while not os.path.isdir(d) and d != root:
            todo.append(d)
            d = os.path.dirname(d)
        for d in reversed(todo):
            try:
                os.mkdir(d, 0o777)
            except FileExistsError:
                pass
        buf.seek(0)
        buf.write(content(i))
        tmp = f"{f}_{i}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_DIRECT, 0o644)
        assert os.write(fd, buf) == size
        os.close(fd)
        os.rename(tmp, f)
    elif what == "lookup":  # vLLM's lookup: access(F_OK) of a stored key and of one never stored
        assert os.access(f, os.F_OK), f
        assert not os.access(f[:-4] + "x.bin", os.F_OK), f
    else:
        fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
        got = os.readv(fd, [buf])
        os.close(fd)
        if got != size or buf[:] != content(i):
            sys.exit(f"chunk {i}: read {got} bytes, content differs")
EOF
}

echo "kvfs daemon under callgrind: $chunks chunks x $chunk_bytes B, vLLM store pattern, one writer"
start_daemon a
phase a idle sleep 1
read -r idle_ir idle_s <"$work/phase.out"
phase a store workload store
read -r store_ir store_s <"$work/phase.out"
phase a lookup workload lookup
read -r lookup_ir lookup_s <"$work/phase.out"
stop_daemon
start_daemon b
phase b cold_lookup workload lookup
read -r cold_lookup_ir cold_lookup_s <"$work/phase.out"
phase b load workload load
read -r load_ir load_s <"$work/phase.out"
stop_daemon

div() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f", a / b}'; }
idle_per_s=$(div "$idle_ir" "$idle_s")
store_per=$(div "$store_ir" "$chunks")
load_per=$(div "$load_ir" "$chunks")
lookup_per=$(div "$lookup_ir" "$chunks")
cold_lookup_per=$(div "$cold_lookup_ir" "$chunks")
printf '%-8s %16s %10s %16s\n' phase "Ir" seconds "Ir per chunk"
printf '%-8s %16s %10.1f %16s\n' idle "$idle_ir" "$idle_s" "($idle_per_s per s)"
printf '%-8s %16s %10.1f %16s\n' store "$store_ir" "$store_s" "$store_per"
printf '%-8s %16s %10.1f %16s\n' lookup "$lookup_ir" "$lookup_s" "$lookup_per"
printf '%-8s %16s %10.1f %16s\n' coldlook "$cold_lookup_ir" "$cold_lookup_s" "$cold_lookup_per"
printf '%-8s %16s %10.1f %16s\n' load "$load_ir" "$load_s" "$load_per"
echo "instr_per_chunk chunks=$chunks chunk_bytes=$chunk_bytes store=$store_per load=$load_per lookup=$lookup_per cold_lookup=$cold_lookup_per idle_per_s=$idle_per_s"
