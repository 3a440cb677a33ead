"""--verify-copy: how a value loaded into never-touched memory is verified (blockstore/kernel_copy.h;
docs/operations.md "Mount options", docs/benchmarks.md "Cold loads into an empty cache").

A cold load (a fresh mount: empty LRU, a fresh buffer pool) with each mode forced reads every byte
exactly, through read(2) and O_DIRECT, for values loaded whole and for one read by block ranges; the
kernel-copy byte counter (`kvfs stats --json` buffer_pool.kernel_copy_bytes) moves in kernel mode only.
auto probes at mount, logs its figures once and shows them in the stats; its path is the one the counter
shows. A bad value is a one-line usage error (exit 2).

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/verify_copy_test.py [-v]
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402

MIB = 1 << 20
# 2.25 MiB (vLLM), 144 KiB (SGLang) values are loaded whole; with a 64 MiB cache (a shard's quarter:
# 4 MiB) the 9 MiB one is read by block ranges.
SIZES = [2359296] * 4 + [147456] * 3 + [9 * MIB]


def read_direct(path, size):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = kf.aligned_buffer((size + 4095) // 4096 * 4096)
        got = os.readv(fd, [buf])
        return bytes(buf[:got])
    finally:
        os.close(fd)


@kf.skip_unless_fuse
class VerifyCopy(unittest.TestCase):
    def setUp(self):
        self.b = kf.Backing()
        self.log = os.path.join(self.b.root, "kvfs.log")
        self.files = {"c%d.bin" % i: os.urandom(n) for i, n in enumerate(SIZES)}

    def tearDown(self):
        self.b.cleanup()

    def mount(self, mode):
        return kf.mounted(self.b, verify_copy=mode, cache_size="64MiB", log_file=self.log)

    def cold_load(self, mode):
        """Writes the files, remounts (cold) and reads each once with read(2) and once with O_DIRECT.
        Returns the stats before and after the reads."""
        with self.mount(mode) as (mnt, _, _):
            for name, data in self.files.items():
                kf.write_file(os.path.join(mnt, name), data)
        with self.mount(mode) as (mnt, _, _):
            before = kf.stats(mnt)
            for name, data in self.files.items():
                path = os.path.join(mnt, name)
                self.assertTrue(kf.read_file(path) == data, "%s: read(2) bytes differ (%s)" % (name, mode))
            for name, data in self.files.items():
                got = read_direct(os.path.join(mnt, name), len(data))
                self.assertTrue(got == data, "%s: O_DIRECT bytes differ (%s)" % (name, mode))
            after = kf.stats(mnt)
        self.assertGreaterEqual(after["read_loaded_bytes"] - before["read_loaded_bytes"], sum(SIZES))
        self.assertEqual(after["checksum_failures"], 0)
        self.assertEqual(after["buffer_pool"]["kernel_copy_fallbacks"], 0)
        return before, after

    def kernel_copy_bytes(self, before, after):
        return after["buffer_pool"]["kernel_copy_bytes"] - before["buffer_pool"]["kernel_copy_bytes"]

    def logged(self):
        with open(self.log) as f:
            return [l for l in f if "kvfs: verify copy: " in l]

    def test_kernel(self):
        before, after = self.cold_load("kernel")
        vc = after["verify_copy"]
        self.assertEqual((vc["mode"], vc["path"], vc["probed"]), ("kernel", "kernel", False))
        self.assertNotIn("probe", vc)
        # Every value was loaded into never-touched memory and verified from kernel copies.
        self.assertGreaterEqual(self.kernel_copy_bytes(before, after), sum(SIZES))
        lines = self.logged()
        self.assertEqual(len(lines), 2, lines)  # once per mount
        self.assertIn("kernel copy (--verify-copy kernel; not probed)", lines[0])

    def test_inplace(self):
        before, after = self.cold_load("inplace")
        vc = after["verify_copy"]
        self.assertEqual((vc["mode"], vc["path"], vc["probed"]), ("inplace", "inplace", False))
        self.assertEqual(self.kernel_copy_bytes(before, after), 0)
        self.assertEqual(after["buffer_pool"]["kernel_copy_bytes"], 0)
        self.assertIn("in place (--verify-copy inplace; not probed)", self.logged()[0])

    def test_auto_probes_and_uses_its_choice(self):
        before, after = self.cold_load("auto")
        vc = after["verify_copy"]
        self.assertEqual(vc["mode"], "auto")
        self.assertTrue(vc["probed"])
        p = vc["probe"]
        self.assertEqual((p["rounds"], p["bytes"]), (4, 512 * 1024))
        self.assertTrue(p["kernel_copy_works"])
        for k in ("in_place_fresh_s_per_gb", "in_place_touched_s_per_gb", "kernel_copy_s_per_gb"):
            self.assertGreater(p[k], 0, k)
        self.assertIn(vc["path"], ("kernel", "inplace"))
        # The counter says which path the loads took: the one chosen.
        if vc["path"] == "kernel":
            self.assertGreaterEqual(self.kernel_copy_bytes(before, after), sum(SIZES))
        else:
            self.assertEqual(self.kernel_copy_bytes(before, after), 0)
        lines = self.logged()
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("(auto: in place ", lines[-1])
        self.assertIn(vc["description"], lines[-1])
        sys.stderr.write("\n  %s" % lines[-1].split("kvfs: verify copy: ", 1)[1])

    def test_bad_value_is_a_usage_error(self):
        r = kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                        "--foreground", "--verify-copy", "copy")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.strip().splitlines(),
                         ["kvfs: --verify-copy 'copy': must be auto, kernel or inplace"])
        self.assertFalse(os.path.exists(self.b.index))


if __name__ == "__main__":
    unittest.main()
