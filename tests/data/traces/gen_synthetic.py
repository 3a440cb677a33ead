#!/usr/bin/env python3
"""Writes the synthetic connector traces of tests/data/traces (README.md, "Synthetic traces").

    python3 tests/data/traces/gen_synthetic.py [OUT_DIR]      (default: this script's directory)

One trace per 2026 connector file pattern (docs/benchmarks.md "Profiles"): lmcache-link, dynamo-g4,
vua-trie, vllm-tp-pwrite, vllm-slotfile. They are NOT recordings: this script states each syscall and
its result from the pattern's description, in the "kvfs connector trace v1" format, so that
tests/integration/trace_replay.py replays them like the recorded ones. Deterministic: no clock, no
randomness; running it again writes the same bytes. Every result was checked by a sequential replay on
ext4 (0 mismatches); the trace_replay_test suite replays them on a plain directory and on a kvfs mount.

Sizes are small (KiB to 2 MiB) so that the whole set replays in seconds; every O_DIRECT transfer is a
multiple of 4 KiB at a 4 KiB-aligned offset. Thread rule (so that a concurrent replay, one thread per
tid with a barrier per phase, reproduces every result): a handle is used by the tid that opened it, or
in a later phase; two threads never create, remove or look up the same name in one phase unless the
file order between them is forced by the replayer's path dependencies (link/rename of one final name).
"""

import collections
import hashlib
import os
import sys

KIB = 1024
MIB = 1024 * KIB

FORMAT = """\
# FORMAT (kvfs connector trace v1; tests/data/traces/README.md "Format")
#   <tid> <op> <args...> -> <result>[ <k=v>...]
#   ops used here:
#     openat PATH FLAGS [MODE] | openat hDIR NAME FLAGS [MODE]  -> hN | ERRNO
#     mkdirat hDIR NAME MODE | faccessat hDIR NAME MODE          -> 0 | ERRNO
#     mkdir PATH MODE | unlink PATH | rename OLD NEW | link OLD NEW -> 0 | ERRNO
#     stat PATH | fstat hN                -> 0 type=reg|dir size=N | ERRNO
#     write hN LEN pattern=P[@OFF]        -> bytes
#     pwrite64 hN LEN OFF pattern=P[@OFF] -> bytes
#     read hN LEN expect=P[@OFF] | pread64 hN LEN OFF expect=P[@OFF] -> bytes
#     ftruncate hN LEN | fsync hN | close hN -> 0
#     fallocate hN MODE OFF LEN           -> 0 | ERRNO
#   accept=E1[,E2..] after a result: those results are correct too (fallocate's
#   EOPNOTSUPP); a replay records the rule, not which one it got.
#   data patterns: blkN = little-endian uint64 words, word k = (N << 32) + k from
#   offset 0 of the sequence; '@OFF' selects bytes [OFF, OFF+len); zero = zero bytes.
"""


def key(tag, n=16):
    return hashlib.sha256(tag.encode()).hexdigest()[:n]


class Trace:
    def __init__(self, name, about):
        self.name, self.about = name, about
        self.lines = []
        self.next_handle = 1
        self.phase_name = None
        self.counts = collections.OrderedDict()
        self.tids = set()

    def phase(self, name):
        self.phase_name = name
        self.counts[name] = collections.Counter()
        self.lines.append("# phase: %s" % name)

    def op(self, tid, text, result):
        self.tids.add(tid)
        self.lines.append("%s %s -> %s" % (tid, text, result))
        name = text.split()[0]
        c = self.counts[self.phase_name]
        c[name] += 1
        first = result.split()[0]
        if first.startswith("E"):
            c[name + ":err"] += 1
        return result

    def open(self, tid, where, flags, mode=None, fail=None):
        """openat; returns the new handle name (or the errno when `fail`)."""
        text = "openat %s %s%s" % (where, flags, "" if mode is None else " %04o" % mode)
        if fail:
            self.op(tid, text, fail)
            return fail
        h = "h%d" % self.next_handle
        self.next_handle += 1
        self.op(tid, text, h)
        return h

    def text(self):
        out = ["# kvfs connector trace: %s" % self.name,
               "# SYNTHETIC: written by tests/data/traces/gen_synthetic.py from the pattern's",
               "#   description (docs/benchmarks.md \"Profiles\"); not a recording of a connector."]
        out += ["# " + line if line else "#" for line in self.about.strip("\n").split("\n")]
        out.append("#")
        out += FORMAT.rstrip("\n").split("\n")
        out.append("# threads: %s" % " ".join(sorted(self.tids, key=lambda t: int(t[1:]))))
        out.append("# per-phase op counts (metadata = every op except read/write/pread64/pwrite64):")
        data_ops = {"read", "write", "pread64", "pwrite64"}
        for ph, c in self.counts.items():
            ops = sum(v for k, v in c.items() if ":" not in k)
            data = sum(v for k, v in c.items() if k in data_ops)
            out.append("#   %s: ops=%d data=%d metadata=%d [%s]" % (
                ph, ops, data, ops - data, " ".join("%s=%d" % kv for kv in sorted(c.items()))))
        out.append("#")
        return "\n".join(out + self.lines) + "\n"


def stat_reg(size):
    return "0 type=reg size=%d" % size


# ------------------------------------------------------------------------------------------------


def lmcache_link():
    t = Trace("lmcache-link", """
workload lmcache-link: LMCache fs_native's put as a link(2) publish, in $ROOT/lmcache.
  put     stat final (ENOENT); unique temp <final>.tmp.<pid>.<tid> openat
          O_WRONLY|O_CREAT|O_EXCL (+O_DIRECT when the size is a multiple of 4 KiB)
          0644; one write; fsync; close; link(tmp, final); unlink tmp; open the
          directory O_RDONLY|O_DIRECTORY, fsync it, close
  init    stat + mkdir of $ROOT/lmcache
  store   t1 and t2 put two objects each (sizes 64 KiB, 256 KiB, 100,000 B, 1 MiB)
  race    t1 and t2 put the same key (same bytes, own temps): the first link wins
          (0), the second gets EEXIST (another writer won) and unlinks its temp
  exists  a put of a present key stops at stat final
  load    t1/t2 open each final name (O_DIRECT when aligned), read it whole,
          close; one open of an absent key (ENOENT)""")
    d = "$ROOT/lmcache"
    objs = [("a", 64 * KIB, 0), ("b", 256 * KIB, 1), ("c", 100000, 2), ("d", MIB, 3)]
    names = {k: "%s/%s.kv" % (d, key("lmcache-" + k)) for k, _, _ in objs + [("race", 0, 0), ("absent", 0, 0)]}

    def flags(size, base):
        return base + ("|O_DIRECT" if size % 4096 == 0 else "")

    def write_temp(tid, final, size, blk, pid):
        tmp = "%s.tmp.%d.%s" % (final, pid, tid)
        h = t.open(tid, tmp, flags(size, "O_WRONLY|O_CREAT|O_EXCL"), 0o644)
        t.op(tid, "write %s %d pattern=blk%d" % (h, size, blk), str(size))
        t.op(tid, "fsync %s" % h, "0")
        t.op(tid, "close %s" % h, "0")
        return tmp

    def finish(tid, tmp, final, link_result):
        t.op(tid, "link %s %s" % (tmp, final), link_result)
        t.op(tid, "unlink %s" % tmp, "0")
        hd = t.open(tid, d, "O_RDONLY|O_DIRECTORY")
        t.op(tid, "fsync %s" % hd, "0")
        t.op(tid, "close %s" % hd, "0")

    t.phase("init")
    t.op("t0", "stat %s" % d, "ENOENT")
    t.op("t0", "mkdir %s 0755" % d, "0")
    t.phase("store")
    for i, (k, size, blk) in enumerate(objs):
        tid = "t1" if i % 2 == 0 else "t2"
        final = names[k]
        t.op(tid, "stat %s" % final, "ENOENT")
        tmp = write_temp(tid, final, size, blk, 4242)
        finish(tid, tmp, final, "0")
    t.phase("race")
    final, size = names["race"], 128 * KIB
    t.op("t1", "stat %s" % final, "ENOENT")
    t.op("t2", "stat %s" % final, "ENOENT")
    tmp1 = write_temp("t1", final, size, 9, 4242)
    tmp2 = write_temp("t2", final, size, 9, 4343)
    finish("t1", tmp1, final, "0")
    finish("t2", tmp2, final, "EEXIST")
    t.op("t2", "stat %s" % final, stat_reg(size))
    t.phase("exists")
    t.op("t0", "stat %s" % names["a"], stat_reg(64 * KIB))
    t.phase("load")
    for i, (k, size, blk) in enumerate(objs + [("race", 128 * KIB, 9)]):
        tid = "t1" if i % 2 == 0 else "t2"
        h = t.open(tid, names[k], flags(size, "O_RDONLY"))
        t.op(tid, "read %s %d expect=blk%d" % (h, size, blk), str(size))
        t.op(tid, "close %s" % h, "0")
    t.open("t1", names["absent"], "O_RDONLY|O_DIRECT", fail="ENOENT")
    t.phase("end")
    return t


def dynamo_g4():
    t = Trace("dynamo-g4", """
workload dynamo-g4: NVIDIA Dynamo KVBM G4 disk tier, in $ROOT/g4; 512 KiB blocks.
  store   the final name <hash:016x>_0_1 openat O_WRONLY|O_CREAT|O_EXCL|O_DIRECT
          0644 (no temp, no rename); fallocate(0, 0, size) (EOPNOTSUPP
          accepted); one pwrite64 of the block at 0; close. t1 and t2 store
          3 blocks each.
  store-existing  a second store of a present block: O_EXCL answers EEXIST
  load    fd cache: the first load of a block opens it O_RDONLY|O_DIRECT and keeps
          the handle; one pread64 of the whole block (t1 and t2, 3 blocks each)
  warm-load  preads through the cached handles (whole block, and 64 KiB at
          128 KiB); fstat of each cached handle
  evict   close of every cached handle; unlink of two blocks; stat (ENOENT)""")
    d = "$ROOT/g4"
    size = 512 * KIB
    blocks = [(i, "%s/%s_0_1" % (d, key("g4-%d" % i))) for i in range(6)]
    mine = {"t1": blocks[0::2], "t2": blocks[1::2]}
    t.phase("init")
    t.op("t0", "mkdir %s 0755" % d, "0")
    t.phase("store")
    for tid in ("t1", "t2"):
        for blk, path in mine[tid]:
            h = t.open(tid, path, "O_WRONLY|O_CREAT|O_EXCL|O_DIRECT", 0o644)
            t.op(tid, "fallocate %s 0 0 %d" % (h, size), "0 accept=EOPNOTSUPP")
            t.op(tid, "pwrite64 %s %d 0 pattern=blk%d" % (h, size, blk), str(size))
            t.op(tid, "close %s" % h, "0")
    t.phase("store-existing")
    t.open("t1", blocks[0][1], "O_WRONLY|O_CREAT|O_EXCL|O_DIRECT", 0o644, fail="EEXIST")
    t.phase("load")
    cache = {}
    for tid in ("t1", "t2"):
        for blk, path in mine[tid]:
            h = cache[path] = t.open(tid, path, "O_RDONLY|O_DIRECT")
            t.op(tid, "pread64 %s %d 0 expect=blk%d" % (h, size, blk), str(size))
    t.phase("warm-load")
    for tid in ("t1", "t2"):
        for blk, path in mine[tid]:
            h = cache[path]
            t.op(tid, "pread64 %s %d 0 expect=blk%d" % (h, size, blk), str(size))
            t.op(tid, "pread64 %s %d %d expect=blk%d@%d" % (h, 64 * KIB, 128 * KIB, blk, 128 * KIB),
                 str(64 * KIB))
            t.op(tid, "fstat %s" % h, stat_reg(size))
    t.phase("evict")
    for tid in ("t1", "t2"):
        for blk, path in mine[tid]:
            t.op(tid, "close %s" % cache[path], "0")
        t.op(tid, "unlink %s" % mine[tid][0][1], "0")
        t.op(tid, "stat %s" % mine[tid][0][1], "ENOENT")
    t.phase("end")
    return t


def vua_trie():
    t = Trace("vua-trie", """
workload vua-trie: VAST VUA's prefix trie, in $ROOT/vua. A sequence's chunk k
  (k = 0..7) lives at depth k+1: one 2-hex-char directory name per level, taken
  from the sequence's key. Walk: openat(hDIR, level, O_RDONLY|O_DIRECTORY) from
  the trie root handle; a missing level (ENOENT) is made with mkdirat and opened;
  the parent handle is closed once the child is open. At each depth: _tokens
  (2,400 B) and _data (16 KiB) openat(hLEVEL, name, O_WRONLY|O_CREAT|O_TRUNC,
  0644), write, close.
  store   t1 stores sequence A (depth 1-8), t2 sequence B (depth 1-8), then t1
          sequence C, which shares A's first 4 levels (walked, not made) and
          stores chunks 4-7 below them
  lookup  t1 walks A and faccessat(_data) at every depth (0); t2 walks a key
          that shares A's levels 1-2 (faccessat 0) and whose level 3 is absent
          (openat ENOENT)
  load    t1 loads B, t2 loads A and C: the walk, openat _tokens and _data
          O_RDONLY, read whole (verified), close""")
    root = "$ROOT/vua"
    depth, tok, dat = 8, 2400, 16 * KIB
    ka, kb = key("vua-A", 16), key("vua-B", 16)
    kc = ka[:8] + key("vua-C", 8)
    kx = ka[:4] + "%02x" % ((int(ka[4:6], 16) + 1) % 256) + ka[6:]   # level 3 of kx never exists
    assert ka[0:2] != kb[0:2]
    seqs = {"A": (ka, 0), "B": (kb, 100), "C": (kc, 200)}   # chunk k of a sequence: blk(base+2k), blk(base+2k+1)

    t.phase("init")
    t.op("t0", "mkdir %s 0755" % root, "0")

    def walk(tid, k, levels, create_from=None, store_from=0, base=0, lookup=False, load=False, absent=None):
        """create_from: the first level (1-based) that does not exist yet (made by mkdirat)."""
        h = t.open(tid, root, "O_RDONLY|O_DIRECTORY")
        for lvl in range(1, levels + 1):
            name = k[2 * (lvl - 1):2 * lvl]
            if absent == lvl:
                t.open(tid, h, "%s O_RDONLY|O_DIRECTORY" % name, fail="ENOENT")
                break
            if create_from is not None and lvl >= create_from:
                t.open(tid, h, "%s O_RDONLY|O_DIRECTORY" % name, fail="ENOENT")
                t.op(tid, "mkdirat %s %s 0755" % (h, name), "0")
            child = t.open(tid, h, "%s O_RDONLY|O_DIRECTORY" % name)
            t.op(tid, "close %s" % h, "0")
            h = child
            chunk = lvl - 1
            if chunk < store_from:
                continue
            btok, bdat = base + 2 * chunk, base + 2 * chunk + 1
            if lookup:
                t.op(tid, "faccessat %s _data F_OK" % h, "0")
            for fname, size, blk in (("_tokens", tok, btok), ("_data", dat, bdat)):
                if load:
                    f = t.open(tid, h, "%s O_RDONLY" % fname)
                    t.op(tid, "read %s %d expect=blk%d" % (f, size, blk), str(size))
                elif not lookup:
                    f = t.open(tid, h, "%s O_WRONLY|O_CREAT|O_TRUNC" % fname, 0o644)
                    t.op(tid, "write %s %d pattern=blk%d" % (f, size, blk), str(size))
                else:
                    continue
                t.op(tid, "close %s" % f, "0")
        t.op(tid, "close %s" % h, "0")

    t.phase("store")
    walk("t1", ka, depth, create_from=1, base=seqs["A"][1])
    walk("t2", kb, depth, create_from=1, base=seqs["B"][1])
    walk("t1", kc, depth, create_from=5, store_from=4, base=seqs["C"][1])
    t.phase("lookup")
    walk("t1", ka, depth, base=seqs["A"][1], lookup=True)
    walk("t2", kx, depth, lookup=True, absent=3)
    t.phase("load")
    walk("t1", kb, depth, base=seqs["B"][1], load=True)
    walk("t2", ka, depth, base=seqs["A"][1], load=True)
    walk("t2", kc, depth, store_from=4, base=seqs["C"][1], load=True)
    t.phase("end")
    return t


def vllm_tp_pwrite():
    t = Trace("vllm-tp-pwrite", """
workload vllm-tp-pwrite: vLLM multi-node tensor parallelism, 4 ranks (t0-t3) fill
  one 1,000,000-byte chunk file each time, in $ROOT/tp.
  create-cN  rank 0 openat <final>.tmp O_RDWR|O_CREAT|O_EXCL|O_TRUNC 0644 and
             ftruncates it to the chunk size
  ranks-cN   every rank pwrite64s its slice (size/4 rounded up to 4 KiB =
             253,952 B; the last slice is 238,144 B) at rank x slice: rank 0 on
             its handle, ranks 1-3 on their own O_RDWR opens; each closes
  publish-cN rank 0 stats the temp and renames it to the final name
  load       open, read whole (verified), a pread64 across a slice boundary,
             close; stat of a temp (ENOENT)""")
    d = "$ROOT/tp"
    size, ranks = 1000000, 4
    slice_ = ((size + ranks - 1) // ranks + 4095) // 4096 * 4096
    chunks = [(n, "%s/%s.bin" % (d, key("tp-%d" % n, 32))) for n in range(2)]
    t.phase("init")
    t.op("t0", "mkdir %s 0755" % d, "0")
    for n, final in chunks:
        tmp = final + ".tmp"
        t.phase("create-c%d" % n)
        h0 = t.open("t0", tmp, "O_RDWR|O_CREAT|O_EXCL|O_TRUNC", 0o644)
        t.op("t0", "ftruncate %s %d" % (h0, size), "0")
        t.phase("ranks-c%d" % n)
        for r in range(ranks):
            tid = "t%d" % r
            off = r * slice_
            ln = min(slice_, size - off)
            h = h0 if r == 0 else t.open(tid, tmp, "O_RDWR")
            t.op(tid, "pwrite64 %s %d %d pattern=blk%d@%d" % (h, ln, off, n, off), str(ln))
            t.op(tid, "close %s" % h, "0")
        t.phase("publish-c%d" % n)
        t.op("t0", "stat %s" % tmp, stat_reg(size))
        t.op("t0", "rename %s %s" % (tmp, final), "0")
    t.phase("load")
    for n, final in chunks:
        tid = "t%d" % (n + 1)
        h = t.open(tid, final, "O_RDONLY")
        t.op(tid, "read %s %d expect=blk%d" % (h, size, n), str(size))
        t.op(tid, "pread64 %s %d %d expect=blk%d@%d" % (h, 8192, slice_ - 4096, n, slice_ - 4096), "8192")
        t.op(tid, "fstat %s" % h, stat_reg(size))
        t.op(tid, "close %s" % h, "0")
        t.op(tid, "stat %s.tmp" % final, "ENOENT")
    t.phase("end")
    return t


def vllm_slotfile():
    t = Trace("vllm-slotfile", """
workload vllm-slotfile: vLLM SimpleCPUOffloadConnector disk backend: ONE
  preallocated file $ROOT/kv.rank_0 of 8 slots x 256 KiB (2 MiB), slot i at
  i x 256 KiB.
  init     stat (ENOENT); openat O_RDWR|O_CREAT 0644; fallocate(0, 0, 2 MiB)
           (EOPNOTSUPP accepted); ftruncate(2 MiB) (what the connector does when
           fallocate is refused; a no-op after it); fstat; close; then the
           long-lived openat O_RDWR|O_DIRECT (h2, shared by the worker threads)
  store    t1 pwrite64s slots 0, 2, 4 and t2 slots 1, 3, 5 through h2 (O_DIRECT)
  load     t1 and t2 pread64 slots 0-5 back (verified) and slot 6 (zero: never
           written)
  rewrite  t1 rewrites slot 1, t2 slot 4, each then preads its slot back
  shutdown t0 closes h2
  restart  stat; a new O_RDWR|O_DIRECT handle; t1 and t2 pread64 all 8 slots
           (rewritten slots, zero slots 6-7); fstat; close""")
    path = "$ROOT/kv.rank_0"
    slot, nslots = 256 * KIB, 8
    fsize = slot * nslots
    content = {}

    def pwrite(tid, h, i, blk):
        content[i] = blk
        t.op(tid, "pwrite64 %s %d %d pattern=blk%d" % (h, slot, i * slot, blk), str(slot))

    def pread(tid, h, i):
        exp = "blk%d" % content[i] if i in content else "zero"
        t.op(tid, "pread64 %s %d %d expect=%s" % (h, slot, i * slot, exp), str(slot))

    t.phase("init")
    t.op("t0", "stat %s" % path, "ENOENT")
    h1 = t.open("t0", path, "O_RDWR|O_CREAT", 0o644)
    t.op("t0", "fallocate %s 0 0 %d" % (h1, fsize), "0 accept=EOPNOTSUPP")
    t.op("t0", "ftruncate %s %d" % (h1, fsize), "0")
    t.op("t0", "fstat %s" % h1, stat_reg(fsize))
    t.op("t0", "close %s" % h1, "0")
    h2 = t.open("t0", path, "O_RDWR|O_DIRECT")
    t.phase("store")
    for i in range(6):
        pwrite("t1" if i % 2 == 0 else "t2", h2, i, i)
    t.phase("load")
    for i in range(7):
        pread("t1" if i < 4 else "t2", h2, i)
    t.phase("rewrite")
    pwrite("t1", h2, 1, 11)
    pwrite("t2", h2, 4, 14)
    pread("t1", h2, 1)
    pread("t2", h2, 4)
    t.phase("shutdown")
    t.op("t0", "fstat %s" % h2, stat_reg(fsize))
    t.op("t0", "close %s" % h2, "0")
    t.phase("restart")
    t.op("t0", "stat %s" % path, stat_reg(fsize))
    h3 = t.open("t0", path, "O_RDWR|O_DIRECT")
    t.phase("restart-load")
    for i in range(nslots):
        pread("t1" if i % 2 == 0 else "t2", h3, i)
    t.phase("restart-close")
    t.op("t0", "fstat %s" % h3, stat_reg(fsize))
    t.op("t0", "close %s" % h3, "0")
    t.phase("end")
    return t


GENERATORS = [lmcache_link, dynamo_g4, vua_trie, vllm_tp_pwrite, vllm_slotfile]


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for gen in GENERATORS:
        t = gen()
        p = os.path.join(out, "%s.trace" % t.name)
        with open(p, "w") as f:
            f.write(t.text())
        print("%s: %d ops" % (p, sum(1 for line in t.lines if not line.startswith("#"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
