#!/usr/bin/env python3
"""Stress: T threads publish (temp + rename), rewrite in place (O_TRUNC), unlink and read 4 shared names.

Usage: shared_names.py DIR THREADS SECONDS MODE   (run it on a kvfs mount and on a local dir to compare)
MODE words: 'norename' (no temp + rename publishers), 'nounlink' (no unlinkers), 'trunc' (in-place
O_WRONLY|O_CREAT|O_TRUNC rewriters, writing 32 KiB at a time).

Every file written carries a 24-byte header (body length, the writer's seed, a digest of the body) and a
body generated from the seed, so every read is classified against the exact bytes of the version it
claims to be:
  whole   the complete content of one version some writer wrote;
  prefix  the first k bytes of one version, k a length that version really had while it was written
          (0, a multiple of the writer's 32 KiB writes, or whole): what a reader of a file being written
          without temp + rename may see (docs/semantics.md §3 read, docs/design.md §11 case 4);
  cut     the first k bytes of one version, k a length that version never had (its bytes cut to another
          version's size: one kernel i_size shared by two versions);
  mixed   bytes that are not a prefix of the version the header names (two writers' bytes, garbage).
`cut` and `mixed` are never legitimate on kvfs. Errors other than ENOENT are counted per operation.
From an adversarial test session (docs/semantics.md, Fixed: ESTALE under concurrent same-name O_TRUNC
writers); tests/integration/shared_names_test.py runs it on a mount and asserts the result.
"""
import collections
import errno
import hashlib
import os
import random
import struct
import sys
import threading
import time

HEADER = 24
WRITE_CHUNK = 32768
SIZES = (100, 5000, 70000, 262144)


def body(seed, n):
    return random.Random(seed).randbytes(n)


def content(seed, n):
    b = body(seed, n)
    return struct.pack("<QQ", n, seed) + hashlib.blake2b(b, digest_size=8).digest() + b


def classify(b):
    """'whole', 'prefix', 'cut' or 'mixed' (see the module doc)."""
    if len(b) == 0:
        return "prefix"
    if len(b) < HEADER:
        # Only a cut can end inside the header: writers write at least 32 KiB (or the whole file) at once.
        return "cut"
    n, seed = struct.unpack("<QQ", b[:16])
    if n not in SIZES:
        return "mixed"
    full = content(seed, n)
    if not full.startswith(b):
        return "mixed"
    if len(b) == len(full):
        return "whole"
    return "prefix" if len(b) % WRITE_CHUNK == 0 else "cut"


def describe(b):
    """(bytes read, the named version's length, bytes matching it, whether the rest is all zeros)."""
    if len(b) < 16:
        return (len(b), -1, 0, not b.strip(b"\0"))
    n, seed = struct.unpack("<QQ", b[:16])
    if n not in SIZES:
        return (len(b), -1, 0, False)
    full = content(seed, n)
    k = 0
    while k < min(len(b), len(full)) and b[k] == full[k]:
        k += 1
    return (len(b), len(full), k, not b[k:].strip(b"\0"))


def run(root, threads, seconds, mode, max_errors=300):
    """Runs the workload in a new directory under root. Returns a dict of counters:
    reads {whole, prefix, cut, mixed}, examples of cut/mixed reads, errors {op:errno name: count}."""
    d = os.path.join(root, "sh_%d_%d" % (os.getpid(), random.randrange(1 << 30)))
    os.makedirs(d)
    lock = threading.Lock()
    reads = collections.Counter()
    errors = collections.Counter()
    bad = []
    ops = collections.Counter()

    def note_err(op, e):
        with lock:
            errors["%s:%s" % (op, errno.errorcode.get(e.errno, e.errno))] += 1

    def worker(t):
        rnd = random.Random(t)
        end = time.time() + seconds
        i = 0
        while time.time() < end and sum(errors.values()) < max_errors:
            f = os.path.join(d, "k%d" % rnd.randrange(4))
            op = rnd.randrange(4)
            i += 1
            seed = (t + 1) * 1000000 + i
            data = content(seed, rnd.choice(SIZES))
            if op == 0 and "norename" not in mode:
                name = "publish"
                tmp = f + ".%d_%d.tmp" % (t, i)
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    try:
                        os.write(fd, data)
                    finally:
                        os.close(fd)
                    os.rename(tmp, f)
                except OSError as e:
                    note_err(name, e)
            elif op == 1 and "trunc" in mode:
                name = "trunc"
                try:
                    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                except OSError as e:
                    note_err("open_trunc", e)
                    continue
                try:
                    for off in range(0, len(data), WRITE_CHUNK):
                        os.write(fd, data[off:off + WRITE_CHUNK])
                except OSError as e:
                    note_err("write", e)
                finally:
                    try:
                        os.close(fd)
                    except OSError as e:
                        note_err("close", e)
            elif op == 2 and "nounlink" not in mode:
                name = "unlink"
                try:
                    os.unlink(f)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    note_err(name, e)
            else:
                name = "read"
                try:
                    with open(f, "rb") as fh:
                        b = fh.read()
                except FileNotFoundError:
                    with lock:
                        reads["enoent"] += 1
                    continue
                except OSError as e:
                    note_err(name, e)
                    continue
                c = classify(b)
                with lock:
                    reads[c] += 1
                    if c in ("cut", "mixed") and len(bad) < 20:
                        bad.append((c, os.path.basename(f)) + describe(b))
            with lock:
                ops[name] += 1

    for k in range(4):
        with open(os.path.join(d, "k%d" % k), "wb") as fh:
            fh.write(content(k, SIZES[k]))
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    return {"mode": mode, "ops": dict(ops), "reads": dict(reads), "errors": dict(errors), "bad": bad,
            "dir": d}


def main():
    root, threads, seconds, mode = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    r = run(root, threads, seconds, mode)
    print(r["mode"], "ops", r["ops"], "reads", r["reads"], "errors", r["errors"])
    for b in r["bad"][:10]:
        print("  bad read:", b)
    return 1 if r["errors"] or r["reads"].get("cut") or r["reads"].get("mixed") else 0


if __name__ == "__main__":
    sys.exit(main())
