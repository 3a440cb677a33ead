"""Concurrent writers and readers of a few shared names on one mount (python3 stdlib unittest).

Runs the workload of tests/stress/shared_names.py (threads that rewrite names in place with
O_WRONLY|O_CREAT|O_TRUNC, publish them with temp + rename, and read them; every read is classified
against the exact bytes of the version its header names) for a few seconds per mode, and asserts:
no open/create fails (ESTALE: the kernel retries an ESTALE open only once, docs/semantics.md §1
"Inode numbers"), and no read returns bytes that are not one whole version.

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/shared_names_test.py [-v]
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "stress"))
import kvfs_fixture as kf  # noqa: E402
import shared_names  # noqa: E402

THREADS = 6
SECONDS = 4


@kf.skip_unless_fuse
class SharedNames(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._cm = kf.mounted()
        cls.mnt, cls.backing, cls.proc = cls._cm.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls._cm.__exit__(None, None, None)

    def run_mode(self, mode, seconds=SECONDS):
        r = shared_names.run(self.mnt, THREADS, seconds, mode)
        sys.stderr.write("%s: ops %s reads %s errors %s\n" % (mode, r["ops"], r["reads"], r["errors"]))
        return r

    def test_in_place_rewriters_and_readers(self):
        # The fixed bug: 6 threads rewriting 4 names in place (O_TRUNC) while others read them got
        # 15-26 ESTALE per 15 s from open(2): the first writable open of a committed file moves it to a
        # new inode number and answers ESTALE; the kernel's retry then met another writer's renumber.
        renumbered0 = kf.stats(self.mnt)["fuse"]["inodes_renumbered"]
        r = self.run_mode("norename-nounlink-trunc")
        self.assertGreater(r["ops"].get("trunc", 0), 50)
        self.assertGreater(r["ops"].get("read", 0), 50)
        self.assertEqual(r["errors"], {})
        # Names are never unlinked: a rewrite of a committed file is hidden until its writer closes it,
        # so every read is one whole version (never a prefix, never cut, never mixed).
        self.assertEqual(set(r["reads"]), {"whole"}, r["bad"])
        # The renumbering path was exercised (new content, new number).
        self.assertGreater(kf.stats(self.mnt)["fuse"]["inodes_renumbered"] - renumbered0, 10)

    def test_publishers_and_readers(self):
        # temp + rename over the shared names, no in-place writer: no error, never a cut or mixed read.
        # (One prefix read was seen once in this mode, under load: docs/semantics.md Known bugs.)
        r = self.run_mode("nounlink", seconds=2)
        self.assertGreater(r["ops"].get("publish", 0), 50)
        self.assertEqual(r["errors"], {})
        self.assertGreater(r["reads"].get("whole", 0), 50)
        self.assertEqual(r["reads"].get("cut", 0) + r["reads"].get("mixed", 0), 0, r["bad"])


if __name__ == "__main__":
    unittest.main()
