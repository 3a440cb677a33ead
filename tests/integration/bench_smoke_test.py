#!/usr/bin/env python3
"""Smoke run of every kvfs-bench profile (tiny sizes, no added latency): correctness only.

Every profile replays its connector's syscall sequence against the kvfs-nfsim mount (direct) and against kvfs
mounted over it, and verifies every byte of every load. The ceiling mode (a passthrough kvfs-nfsim at 0 latency
over the same directory), --repeat and the cold load with a full cache are run once at tiny size.
Timing is not checked. Needs kvfs-bench and
kvfs-nfsim next to the kvfs binary (KVFS_BINARY=<build>/tools/kvfs); skips when they were not built.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

KVFS = os.environ.get("KVFS_BINARY", os.path.join(os.path.dirname(__file__), "../../build/tools/kvfs"))
TOOLS = os.path.dirname(os.path.abspath(KVFS))
BENCH = os.path.join(TOOLS, "kvfs-bench")
NFSIM = os.path.join(TOOLS, "kvfs-nfsim")
PROFILES = ["vllm", "llmd", "lmcache-fs", "lmcache-nixl", "sglang-file", "sglang-nixl", "creates"]
# The connector patterns of 2026 (issue #18; docs/benchmarks.md "Profiles of the 2026 connector patterns").
PROFILES_2026 = ["lmcache-link", "dynamo-g4", "vua-trie", "vllm-tp-pwrite", "vllm-slotfile"]


def unmount_all(work):
    # kvfs-bench unmounts what it mounted; a crash may leave mounts behind (deepest first: ceil/ sits on nfs/).
    mounts = []
    for root, dirs, _ in os.walk(work):
        mounts += [os.path.join(root, d) for d in dirs if os.path.ismount(os.path.join(root, d))]
    for path in sorted(mounts, key=len, reverse=True):
        subprocess.run(["fusermount3", "-u", path], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)


@unittest.skipUnless(os.path.exists(BENCH) and os.path.exists(NFSIM) and os.path.exists("/dev/fuse"),
                     "kvfs-bench / kvfs-nfsim not built or no FUSE")
class BenchSmokeTest(unittest.TestCase):
    def test_every_profile_round_trips(self):
        work = tempfile.mkdtemp(prefix="kvfs-bench-smoke-", dir="/var/tmp")
        try:
            out = os.path.join(work, "r.json")
            p = subprocess.run([BENCH, "--profile", ",".join(PROFILES), "--chunks", "6", "--chunk-bytes", "147456",
                                "--threads", "2", "--lookup-batch", "8", "--latency-us", "0", "--no-progress",
                                "--work", os.path.join(work, "w"), "--json", out],
                               capture_output=True, text=True, timeout=600)
            self.assertTrue(os.path.exists(out), p.stderr[-2000:])
            with open(out) as f:
                j = json.load(f)
            self.assertEqual([x["profile"] for x in j["profiles"]], PROFILES)
            for prof in j["profiles"]:
                for mode in ("direct", "kvfs"):
                    r = prof["modes"][mode]
                    self.assertTrue(r["ok"], f"{prof['profile']}/{mode}: {r.get('error')}")
                    ph = r["phases"]
                    self.assertEqual(ph["store"]["units"], 6)
                    self.assertEqual(ph["load"]["bytes"], 6 * 147456)
                    self.assertEqual(ph["warm_load"]["bytes"], 6 * 147456)
                    self.assertEqual(ph["lookup"]["hits"], 4)  # half of the one request of 8 keys
                # the tmpfs baseline of the warm-load target: same loads, verified, and the ratio reported
                t = prof["modes"]["tmpfs"]
                self.assertTrue(t["ok"], f"{prof['profile']}/tmpfs: {t.get('error')}")
                self.assertEqual(t["phases"]["warm_load"]["bytes"], 6 * 147456)
                self.assertGreater(prof["warm_load_vs_tmpfs"]["tmpfs_mb_per_s"], 0)
                self.assertIn("kvfs", prof["warm_load_vs_tmpfs"])
                # kvfs mode reports the FUSE requests its daemon served; read-only closes send no FLUSH
                # (FOPEN_NOFLUSH). The two nixl profiles load through O_RDWR opens, which do flush.
                k_load = prof["modes"]["kvfs"]["phases"]["load"]["kvfs_fuse_requests_per_unit"]
                self.assertGreaterEqual(k_load.get("open", 0), 1.0)
                if "nixl" not in prof["profile"]:
                    self.assertNotIn("flush", k_load, prof["profile"])
                # kvfs does no per-chunk metadata round trip on the backing store while storing
                self.assertLess(prof["modes"]["kvfs"]["phases"]["store"]["backing"]["metadata_ops_per_unit"],
                                prof["modes"]["direct"]["phases"]["store"]["backing"]["metadata_ops_per_unit"])
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        finally:
            unmount_all(work)

    def test_2026_profiles_round_trip(self):
        """Each 2026 pattern stores, looks up and loads (every byte verified) in every mode, with its syscalls."""
        work = tempfile.mkdtemp(prefix="kvfs-bench-smoke-", dir="/var/tmp")
        size, n = 147456, 6
        try:
            out = os.path.join(work, "r.json")
            p = subprocess.run([BENCH, "--profile", ",".join(PROFILES_2026), "--chunks", str(n), "--chunk-bytes", str(size),
                                "--threads", "2", "--lookup-batch", "8", "--latency-us", "0", "--no-progress",
                                "--ranks", "3", "--trie-depth", "4", "--file-bytes", "4MiB",
                                "--work", os.path.join(work, "w"), "--json", out],
                               capture_output=True, text=True, timeout=600)
            self.assertTrue(os.path.exists(out), p.stderr[-2000:])
            with open(out) as f:
                j = json.load(f)
            self.assertEqual([x["profile"] for x in j["profiles"]], PROFILES_2026)
            prof = {x["profile"]: x for x in j["profiles"]}
            for name, pj in prof.items():
                for mode in ("direct", "kvfs", "tmpfs"):
                    r = pj["modes"][mode]
                    self.assertTrue(r["ok"], f"{name}/{mode}: {r.get('error')}")
                    ph = r["phases"]
                    self.assertEqual(ph["store"]["units"], n)
                    self.assertEqual(ph["load"]["bytes"], n * size, f"{name}/{mode}")
                    self.assertEqual(ph["warm_load"]["bytes"], n * size, f"{name}/{mode}")
                    self.assertEqual(ph["lookup"]["hits"], 4, f"{name}/{mode}")
                # direct writes each chunk's bytes once to the export (vua-trie: and its 2,400 B _tokens file)
                self.assertEqual(pj["modes"]["direct"]["phases"]["store"]["backing"]["bytes_written"],
                                 n * (size + (2400 if name == "vua-trie" else 0)), name)
            self.assertIn("backing B w / r /unit", p.stdout)

            def sys_n(name, mode, phase, call):
                return prof[name]["modes"][mode]["phases"][phase]["syscalls"].get(call, {}).get("n", 0)

            def ops(name, mode, phase):
                return prof[name]["modes"][mode]["phases"][phase]["backing"]["ops"]

            # lmcache-link: one link, one unlink of the temp, fsync of the file and of the directory per chunk
            for call in ("link", "unlink", "fsync"):
                self.assertEqual(sys_n("lmcache-link", "kvfs", "store", call), n * (2 if call == "fsync" else 1), call)
            d = ops("lmcache-link", "direct", "store")
            self.assertEqual((d["link"], d["unlink"], d["fsync"], d["fsyncdir"]), (n, n, n, n))
            # dynamo-g4: no rename, no temp; the warm load is preads on cached fds (no open at all)
            self.assertEqual(sys_n("dynamo-g4", "kvfs", "store", "rename"), 0)
            self.assertEqual(sys_n("dynamo-g4", "kvfs", "warm_load", "openat"), 0)
            self.assertEqual(sys_n("dynamo-g4", "kvfs", "warm_load", "pread64"), n)
            self.assertEqual(sys_n("dynamo-g4", "kvfs", "load", "openat"), n)
            self.assertNotIn("open", ops("dynamo-g4", "direct", "warm_load"))
            # vua-trie: chunk k of a 4-chunk sequence at depth k+1: ids 0..5 = depths 1,2,3,4,1,2, so a load
            # pass opens the trie's root 6 times, 13 levels and 2 files per chunk (every open is an openat);
            # one new level (mkdirat) per chunk, more when the other thread's chunk of the sequence (its
            # parent level) is not stored yet (EEXIST when both make it)
            self.assertEqual(sys_n("vua-trie", "kvfs", "load", "openat"), n + 13 + 2 * n)
            self.assertGreaterEqual(sys_n("vua-trie", "kvfs", "store", "mkdirat"), n)
            # vllm-tp-pwrite: 3 ranks: one ftruncate, 3 pwrites (2 on their own opens) and one rename per chunk
            for call, want in (("ftruncate", n), ("pwrite64", 3 * n), ("openat", 3 * n), ("rename", n)):
                self.assertEqual(sys_n("vllm-tp-pwrite", "kvfs", "store", call), want, call)
            # vllm-slotfile: one pwrite per chunk through one long-lived fd (closed by the last store), one
            # open for the loads; the file is 4 MiB rounded up to whole slots
            self.assertEqual(prof["vllm-slotfile"]["file_bytes"], 29 * size)
            self.assertEqual(sys_n("vllm-slotfile", "kvfs", "store", "pwrite64"), n)
            self.assertEqual(sys_n("vllm-slotfile", "kvfs", "store", "close"), 1)
            self.assertEqual(sys_n("vllm-slotfile", "kvfs", "load", "openat"), 1)
            self.assertEqual(sys_n("vllm-slotfile", "kvfs", "warm_load", "openat"), 0)
            # the close of its copy-on-write version appends only the slots written (files as extents,
            # design.md §13), not the whole file again (as before issue #18's step 3)
            slot_bw = prof["vllm-slotfile"]["modes"]["kvfs"]["phases"]["store"]["backing"]["bytes_written"]
            self.assertGreaterEqual(slot_bw, n * size)
            self.assertLess(slot_bw, 1.2 * n * size + 64 * 1024)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        finally:
            unmount_all(work)

    def test_ceiling_repeat_and_full_cache_load(self):
        """direct, ceiling and kvfs, twice each; the cold load with a full cache fills kvfs's 8 MiB cache."""
        work = tempfile.mkdtemp(prefix="kvfs-bench-smoke-", dir="/var/tmp")
        try:
            out = os.path.join(work, "r.json")
            p = subprocess.run([BENCH, "--profile", "vllm", "--chunks", "6", "--chunk-bytes", "147456",
                                "--threads", "2", "--lookup-batch", "8", "--latency-us", "0", "--no-progress",
                                "--modes", "direct,ceiling,kvfs", "--repeat", "2", "--fill-bytes", "auto",
                                "--kvfs-arg", "--cache-size", "--kvfs-arg", "8MiB",
                                "--work", os.path.join(work, "w"), "--json", out],
                               capture_output=True, text=True, timeout=600)
            self.assertTrue(os.path.exists(out), p.stderr[-2000:])
            with open(out) as f:
                j = json.load(f)
            self.assertEqual(j["config"]["repeat"], 2)
            self.assertEqual([x["profile"] for x in j["profiles"]], ["vllm"])
            for prof in j["profiles"]:
                name, size = prof["profile"], prof["chunk_bytes"]
                self.assertEqual(size, 147456)
                self.assertEqual(len(prof["runs"]), 2)
                for run in prof["runs"]:
                    for mode in ("direct", "ceiling", "kvfs"):
                        r = run["modes"][mode]
                        self.assertTrue(r["ok"], f"{name}/{mode}: {r.get('error')}")
                        ph = r["phases"]
                        self.assertEqual(ph["store"]["units"], 6)
                        # every load verified every byte (a mismatch fails the run)
                        for load in ("load", "load_full", "warm_load"):
                            self.assertEqual(ph[load]["bytes"], 6 * size, f"{name}/{mode} {load}")
                        self.assertEqual(ph["lookup"]["hits"], 4)
                        self.assertIn("end", r["loadavg"])
                        self.assertGreaterEqual(r["loadavg"]["start"]["1m"], 0)
                    # the ceiling is a FUSE daemon stacked on nfsim: its stored bytes reach the backing mount
                    c = run["modes"]["ceiling"]
                    self.assertGreaterEqual(c["phases"]["store"]["backing"]["bytes_written"], 6 * size)
                    self.assertIn("ceiling", c["phases"]["store"]["cpu_s"])
                    self.assertGreater(c["daemon_vmhwm_kb"], 0)
                    # kvfs's cache was filled before the full-cache load (80% of 8 MiB at least)
                    fill = run["modes"]["kvfs"]["fill"]
                    self.assertEqual(fill["cache_size"], 8 << 20)
                    self.assertEqual(fill["files"] * fill["file_bytes"], 10 << 20)  # 1.25 x 8 MiB
                    self.assertGreater(fill["cache_bytes_after_fill"], 0.8 * (8 << 20))
                    for ph in ("store", "lookup", "load", "load_full", "warm_load"):
                        row = run["ratios"][ph]
                        self.assertGreater(row["ceiling_units_per_s"], 0, f"{name} {ph}")
                        self.assertGreater(row["kvfs_vs_ceiling"], 0, f"{name} {ph}")
                        self.assertGreater(row["kvfs_vs_direct"], 0, f"{name} {ph}")
                for ph in ("store", "lookup", "load", "load_full", "warm_load"):
                    self.assertIn("kvfs_vs_ceiling", prof["median"][ph])
            self.assertIn("kvfs/ceil", p.stdout)
            self.assertIn("median of the 2 runs", p.stdout)
            self.assertIn("cold load, full cache", p.stdout)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        finally:
            unmount_all(work)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:])
