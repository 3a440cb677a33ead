#!/usr/bin/env python3
"""Replays every connector trace (tests/data/traces/*.trace) against a plain temp dir and a kvfs mount.

For each trace and target:
  - sequential replay: every result equals the recording (trace_replay.py's rules), no handle is left
    open, the observation list (return values, errnos, sizes, content hashes) equals that of a replay
    into a reference plain directory, and the final trees are byte-identical (names, types, sizes,
    sha256); file modes are compared in a test of their own;
  - concurrent replay (one thread per recorded tid, barrier per phase): data ops, opens, closes and
    renames match the recording, and the final tree equals the sequential reference tree.
A plain target is compared with a second plain directory (validates the replayer itself).
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvfs_target as kt  # noqa: E402
import trace_replay as tr  # noqa: E402

TRACE_DIR = os.path.join(kt.test_data_dir(), "traces")
TRACES = sorted(f for f in os.listdir(TRACE_DIR) if f.endswith(".trace")) if os.path.isdir(TRACE_DIR) else []

_PATTERNS = tr.PatternCache()
_REFERENCE = {}  # trace -> (observations, tree, tree_with_modes)


def reference(trace):
    """Sequential replay into a fresh plain dir (computed once per trace)."""
    if trace not in _REFERENCE:
        with kt.target("plain") as t:
            r = tr.replay(os.path.join(TRACE_DIR, trace), t.root, patterns=_PATTERNS)
            assert not r.mismatches, "reference replay of %s on a plain dir: %s" % (trace, r.mismatches[:5])
            _REFERENCE[trace] = (r.observations, kt.tree_digest(t.root), kt.tree_digest(t.root, with_mode=True))
    return _REFERENCE[trace]


class _TraceReplay:
    KIND = None
    maxDiff = 4000

    def setUp(self):
        kt.skip_if_disabled(self, self.KIND)

    def _sequential(self, trace):
        ref_obs, ref_tree, _ = reference(trace)
        with kt.target(self.KIND) as t:
            r = tr.replay(os.path.join(TRACE_DIR, trace), t.root, patterns=_PATTERNS)
            self.assertTrue(t.alive(), "kvfs process died during the replay of %s" % trace)
            tree = kt.tree_digest(t.root)
        self.assertEqual([], r.mismatches[:20], "%s on %s: %d results differ from the recording"
                         % (trace, self.KIND, len(r.mismatches)))
        self.assertEqual([], r.handles_left)
        d = kt.first_diff(ref_obs, r.observations, "plain", self.KIND)
        self.assertIsNone(d, "%s: observations differ from a plain-dir replay\n%s" % (trace, d))
        self.assertEqual([], kt.diff_trees(ref_tree, tree, "plain", self.KIND),
                         "%s: final tree differs from a plain-dir replay" % trace)

    def _modes(self, trace):
        _, _, ref_modes = reference(trace)
        with kt.target(self.KIND) as t:
            tr.replay(os.path.join(TRACE_DIR, trace), t.root, patterns=_PATTERNS)
            tree = kt.tree_digest(t.root, with_mode=True)
        self.assertEqual([], kt.diff_trees(ref_modes, tree, "plain", self.KIND),
                         "%s: final tree (with permission bits) differs" % trace)

    def _concurrent(self, trace):
        _, ref_tree, _ = reference(trace)
        with kt.target(self.KIND) as t:
            r = tr.replay(os.path.join(TRACE_DIR, trace), t.root, concurrent=True, patterns=_PATTERNS)
            self.assertTrue(t.alive(), "kvfs process died during the concurrent replay of %s" % trace)
            tree = kt.tree_digest(t.root)
        self.assertEqual([], r.mismatches[:20], "%s concurrent on %s: %d results differ from the recording"
                         % (trace, self.KIND, len(r.mismatches)))
        self.assertEqual([], r.handles_left)
        self.assertEqual([], kt.diff_trees(ref_tree, tree, "plain", self.KIND),
                         "%s concurrent: final tree differs from the sequential plain replay" % trace)


def _add_trace_tests(cls):
    for trace in TRACES:
        stem = trace[:-len(".trace")].replace("-", "_")
        setattr(cls, "test_sequential_%s" % stem, lambda self, t=trace: self._sequential(t))
        setattr(cls, "test_concurrent_%s" % stem, lambda self, t=trace: self._concurrent(t))
    # Modes on the smallest trace with a created dir + files (enough to see honoured modes/umask).
    if "sglang-file.trace" in TRACES:
        setattr(cls, "test_modes_sglang_file", lambda self: self._modes("sglang-file.trace"))
    return cls


_add_trace_tests(_TraceReplay)
kt.make_target_classes(_TraceReplay, globals())


class ReplayerSelfTest(unittest.TestCase):
    """The replayer must notice wrong content, wrong sizes and wrong errnos (validated on a plain dir)."""

    def _mutated(self, trace, old, new, tmp):
        src = os.path.join(TRACE_DIR, trace)
        with open(src) as f:
            text = f.read()
        self.assertIn(old, text)
        dst = os.path.join(tmp, "mutated.trace")
        with open(dst, "w") as f:
            f.write(text.replace(old, new, 1))
        return dst

    def test_detects_wrong_content_size_and_errno(self):
        if "sglang-file.trace" not in TRACES:
            self.skipTest("sglang-file.trace missing")
        with kt.target("plain") as tmp, kt.target("plain2") as root:
            # A read that expects another page's bytes.
            p = self._mutated("sglang-file.trace", "expect=blk0 ", "expect=blk1 ", tmp.root)
            r = tr.replay(p, root.root)
            self.assertTrue(any("content differs" in m for m in r.mismatches), r.mismatches[:3])
        with kt.target("plain") as tmp, kt.target("plain2") as root:
            p = self._mutated("sglang-file.trace", "type=reg size=9437184", "type=reg size=9437185", tmp.root)
            r = tr.replay(p, root.root)
            self.assertEqual(1, len(r.mismatches), r.mismatches[:3])
        with kt.target("plain") as tmp, kt.target("plain2") as root:
            p = self._mutated("sglang-file.trace", "-> ENOENT", "-> EEXIST", tmp.root)
            r = tr.replay(p, root.root)
            self.assertEqual(1, len(r.mismatches), r.mismatches[:3])

    def test_pattern(self):
        b = tr.pattern_bytes("blk3", 24)
        self.assertEqual(b, (3 << 32).to_bytes(8, "little") + ((3 << 32) + 1).to_bytes(8, "little")
                         + ((3 << 32) + 2).to_bytes(8, "little"))
        self.assertEqual(tr.pattern_bytes("blk3@12", 8), b[12:20])
        self.assertEqual(tr.pattern_bytes("zero", 5), bytes(5))
        self.assertEqual(tr.pattern_bytes("b64:aGk=", 2), b"hi")

    def test_all_traces_present(self):
        self.assertEqual(["sglang-file.trace", "sglang-small.trace", "vllm-large-cext.trace",
                          "vllm-store-load.trace"], TRACES)


if __name__ == "__main__":
    unittest.main(verbosity=2)
