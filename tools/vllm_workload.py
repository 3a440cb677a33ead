#!/usr/bin/env python3
"""A vLLM OffloadingConnector `fs`-tier-like workload (see docs/design.md §10), with verification.

Store: access(final) -> ENOENT; stat/mkdir the <hhh>/<hh>_g0 hash fan-out; open(tmp,
O_WRONLY|O_CREAT|O_EXCL|O_TRUNC|O_DIRECT); ONE write of the whole block; close; rename(tmp, final).
Lookup: access(F_OK) for every key of a cold request (half of them absent).
Load: open(O_RDONLY|O_DIRECT); ONE read of the whole block; close; verify the content.

Usage: vllm_workload.py ROOT [--chunks N] [--chunk-bytes B] [--seed S]
"""
import argparse
import errno
import hashlib
import mmap
import os
import random
import sys
import time


def content(i, size, seed):
    return random.Random(seed * 1_000_003 + i).randbytes(size)


def key_of(i, seed):
    return hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()


def final_path(root, key):
    return os.path.join(root, "Qwen3-8B_0123abcd_r0", key[:3], key[3:5] + "_g0", key + ".bin")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--chunk-bytes", type=int, default=2_359_296)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    size = a.chunk_bytes
    buf = mmap.mmap(-1, (size + 4095) // 4096 * 4096)  # page-aligned for O_DIRECT
    os.makedirs(os.path.join(a.root, "Qwen3-8B_0123abcd_r0"), exist_ok=True)
    with open(os.path.join(a.root, "Qwen3-8B_0123abcd_r0", "config.json"), "w") as f:
        f.write('{"model": "Qwen3-8B", "block_size": 16}\n')

    t0 = time.monotonic()
    for i in range(a.chunks):
        key = key_of(i, a.seed)
        final = final_path(a.root, key)
        try:
            os.access(final, os.F_OK) and sys.exit(f"unexpected existing {final}")
        except OSError:
            pass
        os.makedirs(os.path.dirname(final), exist_ok=True)
        tmp = f"{final}_{random.getrandbits(32):08x}.tmp"
        data = content(i, size, a.seed)
        buf.seek(0)
        buf.write(data)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_DIRECT, 0o644)
        n = os.write(fd, memoryview(buf)[: (size + 4095) // 4096 * 4096] if size % 4096 else memoryview(buf)[:size])
        if size % 4096:
            os.ftruncate(fd, size)
        os.close(fd)
        if n < size:
            sys.exit(f"short write {n} < {size}")
        os.rename(tmp, final)
    t_store = time.monotonic() - t0

    t0 = time.monotonic()
    hits = 0
    for i in range(2 * a.chunks):
        # Every other probe is for a key that was never stored (a cold request's tail).
        key = key_of(i // 2 if i % 2 == 0 else a.chunks + i, a.seed)
        if os.access(final_path(a.root, key), os.F_OK):
            hits += 1
    t_lookup = time.monotonic() - t0
    if hits != a.chunks:
        sys.exit(f"lookup: {hits} hits, expected {a.chunks}")

    t0 = time.monotonic()
    for i in range(a.chunks):
        final = final_path(a.root, key_of(i, a.seed))
        fd = os.open(final, os.O_RDONLY | os.O_DIRECT)
        n = os.readv(fd, [buf])
        os.close(fd)
        if n != size or buf[:size] != content(i, size, a.seed):
            sys.exit(f"load: {final}: got {n} bytes, content mismatch or short read")
    t_load = time.monotonic() - t0
    mb = a.chunks * size / 1e6
    print(f"store  {a.chunks} chunks x {size} B: {t_store:.2f} s ({mb / t_store:.0f} MB/s, "
          f"{a.chunks / t_store:.0f} chunks/s)")
    print(f"lookup {2 * a.chunks} access() probes, {hits} hits: {t_lookup * 1e6 / (2 * a.chunks):.1f} us each")
    print(f"load   {a.chunks} chunks verified: {t_load:.2f} s ({mb / t_load:.0f} MB/s)")


if __name__ == "__main__":
    main()
