#!/usr/bin/env python3
"""Replays every connector trace (tests/data/traces/*.trace: the recorded ones and the synthetic 2026
patterns of gen_synthetic.py) against a plain temp dir and a kvfs mount.

For each trace and target:
  - sequential replay: every result equals the recording (trace_replay.py's rules), no handle is left
    open, the observation list (return values, errnos, sizes, content hashes) equals that of a replay
    into a reference plain directory, and the final trees are byte-identical (names, types, sizes,
    sha256), then also in their permission bits;
  - concurrent replay (one thread per recorded tid, barrier per phase), for the traces with more than one
    thread (a one-thread trace's concurrent replay is its sequential replay with fewer checks): data ops,
    opens, closes and renames match the recording, and the final tree equals the sequential reference
    tree.
  - the synthetic traces, replayed into one mount that is then unmounted and mounted again: the final
    trees still equal the reference.
A plain target is compared with a second plain directory (validates the replayer itself). The reference
replay of each trace is made once per process and parsed traces are shared by the tests; the mount tests
share one kvfs mount, each replaying into an empty directory of its own.
"""

import contextlib
import os
import shutil
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
_PARSED = {}     # trace -> (phases, ops)


def parsed(trace):
    if trace not in _PARSED:
        _PARSED[trace] = tr.parse_trace(os.path.join(TRACE_DIR, trace))
    return _PARSED[trace]


def synthetic(trace):
    """True for the traces gen_synthetic.py writes (their header says so)."""
    with open(os.path.join(TRACE_DIR, trace)) as f:
        return "# SYNTHETIC:" in f.read(4096)


def threads(trace):
    return len({op.tid for op in parsed(trace)[1]})


def replay(trace, root, concurrent=False):
    phases, ops = parsed(trace)
    r = tr.Replayer(root, _PATTERNS)
    return r.run_concurrent(ops, phases) if concurrent else r.run(ops)


def _without_modes(tree):
    return {k: v[:-1] for k, v in tree.items()}


def reference(trace):
    """Sequential replay into a fresh plain dir (computed once per trace)."""
    if trace not in _REFERENCE:
        with kt.target("plain") as t:
            r = replay(trace, t.root)
            assert not r.mismatches, "reference replay of %s on a plain dir: %s" % (trace, r.mismatches[:5])
            modes = kt.tree_digest(t.root, with_mode=True)
            _REFERENCE[trace] = (r.observations, _without_modes(modes), modes)
    return _REFERENCE[trace]


class _TraceReplay:
    KIND = None
    maxDiff = 4000
    _mount = None  # (context manager, Target): the kvfs mount the class's tests share

    def setUp(self):
        kt.skip_if_disabled(self, self.KIND)

    @classmethod
    def tearDownClass(cls):
        cls._unmount()

    @classmethod
    def _unmount(cls):
        m, cls._mount = cls._mount, None
        if m is not None:
            m[0].__exit__(None, None, None)

    @contextlib.contextmanager
    def _target(self):
        """(target, an empty directory on it for $ROOT). A plain target is a fresh temp dir. The mount is
        shared by the tests of the class (a replay needs an empty $ROOT, not a fresh daemon; mounting per
        test cost more than most synthetic replays): each test replays into its own subdirectory, removed
        afterwards; a mount whose daemon died is replaced before the next test."""
        if self.KIND != "mount":
            with kt.target(self.KIND) as t:
                yield t, t.root
            return
        cls = type(self)
        if cls._mount is not None and not cls._mount[1].alive():
            cls._unmount()
        if cls._mount is None:
            cm = kt.target("mount")
            cls._mount = (cm, cm.__enter__())
        t = cls._mount[1]
        root = os.path.join(t.root, self._testMethodName)
        os.mkdir(root)
        yield t, root
        if t.alive():
            shutil.rmtree(root)

    def _sequential(self, trace):
        ref_obs, ref_tree, ref_modes = reference(trace)
        with self._target() as (t, root):
            r = replay(trace, root)
            self.assertTrue(t.alive(), "kvfs process died during the replay of %s" % trace)
            modes = kt.tree_digest(root, with_mode=True)
        self.assertEqual([], r.mismatches[:20], "%s on %s: %d results differ from the recording"
                         % (trace, self.KIND, len(r.mismatches)))
        self.assertEqual([], r.handles_left)
        d = kt.first_diff(ref_obs, r.observations, "plain", self.KIND)
        self.assertIsNone(d, "%s: observations differ from a plain-dir replay\n%s" % (trace, d))
        self.assertEqual([], kt.diff_trees(ref_tree, _without_modes(modes), "plain", self.KIND),
                         "%s: final tree differs from a plain-dir replay" % trace)
        self.assertEqual([], kt.diff_trees(ref_modes, modes, "plain", self.KIND),
                         "%s: final tree (with permission bits) differs" % trace)

    def _concurrent(self, trace):
        _, ref_tree, _ = reference(trace)
        with self._target() as (t, root):
            r = replay(trace, root, concurrent=True)
            self.assertTrue(t.alive(), "kvfs process died during the concurrent replay of %s" % trace)
            tree = kt.tree_digest(root)
        self.assertEqual([], r.mismatches[:20], "%s concurrent on %s: %d results differ from the recording"
                         % (trace, self.KIND, len(r.mismatches)))
        self.assertEqual([], r.handles_left)
        self.assertEqual([], kt.diff_trees(ref_tree, tree, "plain", self.KIND),
                         "%s concurrent: final tree differs from the sequential plain replay" % trace)

    def test_synthetic_after_remount(self):
        # What the 2026 patterns leave behind (link-published objects, fallocated and rewritten slot
        # file, rank slices, trie levels) reads back the same after an unmount and a new mount.
        names = [t for t in TRACES if synthetic(t)]
        with kt.target(self.KIND) as t:
            for trace in names:
                root = os.path.join(t.root, trace)
                os.mkdir(root)
                r = replay(trace, root)
                self.assertEqual([], r.mismatches[:20], "%s on %s" % (trace, self.KIND))
            t.remount()
            self.assertTrue(t.alive())
            for trace in names:
                tree = kt.tree_digest(os.path.join(t.root, trace), with_mode=True)
                self.assertEqual([], kt.diff_trees(reference(trace)[2], tree, "plain", self.KIND + " remounted"),
                                 "%s: final tree differs after a remount" % trace)


def _add_trace_tests(cls):
    for trace in TRACES:
        stem = trace[:-len(".trace")].replace("-", "_")
        setattr(cls, "test_sequential_%s" % stem, lambda self, t=trace: self._sequential(t))
        if threads(trace) > 1:
            setattr(cls, "test_concurrent_%s" % stem, lambda self, t=trace: self._concurrent(t))
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

    def _replay_mutated(self, trace, old, new):
        with kt.target("plain") as tmp, kt.target("plain2") as root:
            return tr.replay(self._mutated(trace, old, new, tmp.root), root.root)

    def test_detects_wrong_content_size_and_errno(self):
        # A small trace with reads, stat sizes and errnos (lmcache-link: ~2 MB of I/O).
        trace = "lmcache-link.trace"
        if trace not in TRACES:
            self.skipTest("%s missing" % trace)
        # A read that expects another object's bytes.
        r = self._replay_mutated(trace, "expect=blk0 ", "expect=blk1 ")
        self.assertTrue(any("content differs" in m for m in r.mismatches), r.mismatches[:3])
        r = self._replay_mutated(trace, "type=reg size=65536", "type=reg size=65537")
        self.assertEqual(1, len(r.mismatches), r.mismatches[:3])
        r = self._replay_mutated(trace, "-> ENOENT", "-> EEXIST")
        self.assertEqual(1, len(r.mismatches), r.mismatches[:3])

    def test_accepted_alternatives(self):
        # fallocate `-> 0 accept=EOPNOTSUPP`: 0 and EOPNOTSUPP are right, anything else is a mismatch.
        trace = "dynamo-g4.trace"
        if trace not in TRACES:
            self.skipTest("%s missing" % trace)
        r = self._replay_mutated(trace, "-> 0 accept=EOPNOTSUPP", "-> EBADF accept=ENOSPC")
        self.assertEqual(1, len(r.mismatches), r.mismatches[:3])
        self.assertIn("fallocate", r.mismatches[0])
        r = self._replay_mutated(trace, "-> 0 accept=EOPNOTSUPP", "-> EOPNOTSUPP accept=0")
        self.assertEqual([], r.mismatches)
        line = [o for o in r.observations if o[2] == "fallocate"][0]
        self.assertEqual("EOPNOTSUPP accept=0", line[3])

    def test_pattern(self):
        b = tr.pattern_bytes("blk3", 24)
        self.assertEqual(b, (3 << 32).to_bytes(8, "little") + ((3 << 32) + 1).to_bytes(8, "little")
                         + ((3 << 32) + 2).to_bytes(8, "little"))
        self.assertEqual(tr.pattern_bytes("blk3@12", 8), b[12:20])
        self.assertEqual(tr.pattern_bytes("zero", 5), bytes(5))
        self.assertEqual(tr.pattern_bytes("b64:aGk=", 2), b"hi")

    def test_all_traces_present(self):
        self.assertEqual(["dynamo-g4.trace", "lmcache-link.trace", "sglang-file.trace", "sglang-small.trace",
                          "vllm-large-cext.trace", "vllm-slotfile.trace", "vllm-store-load.trace",
                          "vllm-tp-pwrite.trace", "vua-trie.trace"], TRACES)

    def test_synthetic_traces_up_to_date(self):
        # gen_synthetic.py is deterministic: what it writes now equals the committed traces.
        import subprocess
        import tempfile
        with tempfile.TemporaryDirectory(dir=kt.tmp_parent()) as d:
            subprocess.run([sys.executable, os.path.join(TRACE_DIR, "gen_synthetic.py"), d], check=True,
                           stdout=subprocess.DEVNULL)
            made = sorted(os.listdir(d))
            self.assertEqual(["dynamo-g4.trace", "lmcache-link.trace", "vllm-slotfile.trace",
                              "vllm-tp-pwrite.trace", "vua-trie.trace"], made)
            for name in made:
                with open(os.path.join(d, name)) as a, open(os.path.join(TRACE_DIR, name)) as b:
                    self.assertEqual(b.read(), a.read(), "%s differs from gen_synthetic.py's output" % name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
