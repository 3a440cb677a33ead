"""Prometheus metrics: `kvfs mount --metrics-listen HOST:PORT` serves GET /metrics; the figures move by
what the test did, histograms are cumulative and consistent, and bad addresses are one-line errors.

Run: KVFS_BINARY=build/tools/kvfs python3 tests/integration/metrics_test.py [-v]
"""
import json
import os
import re
import socket
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfs_fixture as kf  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parse(text):
    """Exposition text -> ({(name, frozenset(labels)): value}, {name: type}). Fails on a malformed line."""
    samples, types = {}, {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "malformed sample line: %r" % line
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples, types


def fetch(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers["Content-Type"]
        return parse(r.read().decode())


def val(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


@kf.skip_unless_fuse
class Metrics(unittest.TestCase):
    def test_counters_move_and_histograms_are_consistent(self):
        port = free_port()
        with kf.mounted(metrics_listen="127.0.0.1:%d" % port) as (mnt, _, _):
            before, types = fetch(port)
            self.assertEqual(types["kvfs_fuse_operation_duration_seconds"], "histogram")
            for name, typ in types.items():
                if typ == "counter":
                    self.assertTrue(name.endswith("_total"), name)
            n_files, size = 3, 2359296  # a vLLM chunk (2.25 MiB) > max_write (1 MiB): at least 2 WRITEs per file
            blobs = [os.urandom(size) for _ in range(n_files)]
            for i, b in enumerate(blobs):
                kf.write_file(os.path.join(mnt, "chunk%d.bin" % i), b)
            # Committed (the commit runs a few ms after the last close) and journaled (the next group
            # commit): wait until the daemon shows both.
            j0 = val(before, "kvfs_journal_entries_total")
            deadline = time.time() + 10
            while time.time() < deadline:
                st = kf.stats(mnt)
                if st["files"] >= n_files and st["journal_entries"] >= j0 + n_files:
                    break
                time.sleep(0.01)
            # O_DIRECT reads reach the daemon (no page cache in between): each is one read(2) that the
            # kernel sends as 3 READs of 1 MiB at once. The cache counts per value read (issue #17): the
            # cold loads are one miss each, the re-reads one hit each, whatever the number of requests.
            buf = kf.aligned_buffer(size + 4096)

            def load_all():
                for i in range(n_files):
                    fd = os.open(os.path.join(mnt, "chunk%d.bin" % i), os.O_RDONLY | os.O_DIRECT)
                    try:
                        got = os.readv(fd, [buf])
                    finally:
                        os.close(fd)
                    self.assertEqual(got, size)
                    self.assertEqual(bytes(buf[:size]), blobs[i])
            c0 = kf.stats(mnt)
            load_all()
            c1 = kf.stats(mnt)
            self.assertEqual(c1["cache_misses"] - c0["cache_misses"], n_files)
            self.assertEqual(c1["cache_hits"] - c0["cache_hits"], 0)
            self.assertEqual(c1["read_loaded_bytes"] - c0["read_loaded_bytes"], n_files * size)  # per byte
            self.assertEqual(c1["fuse"]["bytes_read"] - c0["fuse"]["bytes_read"], n_files * size)
            load_all()
            c2 = kf.stats(mnt)
            self.assertEqual(c2["cache_hits"] - c1["cache_hits"], n_files)
            self.assertEqual(c2["cache_misses"] - c1["cache_misses"], 0)
            self.assertEqual(c2["read_loaded_bytes"], c1["read_loaded_bytes"])
            self.assertAlmostEqual(c2["cache_hit_rate"], 0.5)
            human = kf.run_kvfs("stats", mnt).stdout
            self.assertIn("cache hit rate         50.0% of value reads from offset 0 (3 hits, 3 misses;", human)
            self.assertIn("read bytes loaded      %d from the export for %d FUSE bytes read (per byte)"
                          % (c2["read_loaded_bytes"], c2["fuse"]["bytes_read"]), human)
            # The kernel sends RELEASE after close(2) returns (and a read-only handle has no FLUSH,
            # FOPEN_NOFLUSH): wait until the daemon has seen the reader's.
            # A handler counts its request after replying, so a busy machine can show a reply before
            # its count: wait for the writes' counts too.
            rel0 = val(before, "kvfs_fuse_operation_duration_seconds_count", op="release")
            wr0 = val(before, "kvfs_fuse_operation_duration_seconds_count", op="write")
            deadline = time.time() + 10
            while True:
                after, _ = fetch(port)
                js = kf.stats(mnt)  # the same snapshot source as /metrics: no I/O in between
                rel = val(after, "kvfs_fuse_operation_duration_seconds_count", op="release")
                wr = val(after, "kvfs_fuse_operation_duration_seconds_count", op="write")
                # ... and the durable round (--sync-interval-ms, 1 s by default) that follows the writes.
                syncs = val(after, "kvfs_backing_operations_total", op="sync") - \
                    val(before, "kvfs_backing_operations_total", op="sync")
                if (rel - rel0 >= 3 * n_files and wr - wr0 >= 2 * n_files and syncs >= 1) or time.time() > deadline:
                    break
                time.sleep(0.01)

        d = lambda name, **l: val(after, name, **l) - val(before, name, **l)  # noqa: E731
        written = n_files * size
        self.assertGreaterEqual(d("kvfs_fuse_written_bytes_total"), written)
        self.assertLess(d("kvfs_fuse_written_bytes_total"), written + (1 << 20))
        self.assertEqual(d("kvfs_fuse_read_bytes_total"), 2 * written)
        self.assertGreaterEqual(d("kvfs_fuse_operation_duration_seconds_count", op="write"), 2 * n_files)
        self.assertEqual(d("kvfs_fuse_operation_duration_seconds_count", op="create"), n_files)
        self.assertGreaterEqual(d("kvfs_fuse_operation_duration_seconds_count", op="read"), 1)
        self.assertGreaterEqual(d("kvfs_fuse_operation_duration_seconds_count", op="release"), 3 * n_files)
        self.assertEqual(val(after, "kvfs_files"), n_files)
        self.assertEqual(val(after, "kvfs_live_bytes"), written)
        self.assertGreaterEqual(d("kvfs_records_written_total"), n_files)
        self.assertGreaterEqual(d("kvfs_journal_entries_total"), n_files)
        self.assertEqual(d("kvfs_cache_hits_total"), n_files)  # per value read, as in the JSON
        self.assertEqual(d("kvfs_cache_misses_total"), n_files)
        self.assertEqual(d("kvfs_read_loaded_bytes_total"), written)
        self.assertGreaterEqual(d("kvfs_backing_written_bytes_total"), written)
        self.assertGreaterEqual(d("kvfs_backing_operations_total", op="write"), 1)
        self.assertGreaterEqual(d("kvfs_backing_operations_total", op="sync"), 1)
        self.assertEqual(val(after, "kvfs_checksum_failures_total"), 0)
        self.assertEqual(val(after, "kvfs_evicted_segments_total"), 0)
        # This node's segments: what it wrote is live.
        nodes = {dict(k[1])["node"] for k in after if k[0] == "kvfs_node_live_bytes"}
        self.assertEqual(len(nodes), 1)
        node = nodes.pop()
        self.assertEqual(val(after, "kvfs_node_live_bytes", node=node), written)
        self.assertGreaterEqual(val(after, "kvfs_node_segment_bytes", node=node), written)
        # The JSON of `kvfs stats` is the same figures.
        self.assertEqual(js["fuse"]["bytes_written"], val(after, "kvfs_fuse_written_bytes_total"))
        self.assertEqual(js["fuse_ops"]["create"]["count"], val(after, "kvfs_fuse_operation_duration_seconds_count",
                                                                 op="create"))

        # Histograms: per op, buckets non-decreasing in le order, +Inf == _count, _sum >= 0.
        ops = {dict(k[1])["op"] for k in after if k[0] == "kvfs_fuse_operation_duration_seconds_count"}
        self.assertIn("write", ops)
        self.assertIn("lookup", ops)
        for op in ops:
            buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in after.items()
                              if k[0] == "kvfs_fuse_operation_duration_seconds_bucket" and dict(k[1])["op"] == op))
            self.assertGreaterEqual(len(buckets), 10)
            self.assertEqual(buckets[-1][0], float("inf"))
            counts = [v for _, v in buckets]
            self.assertEqual(counts, sorted(counts), op)
            self.assertEqual(counts[-1], val(after, "kvfs_fuse_operation_duration_seconds_count", op=op), op)
            self.assertGreaterEqual(val(after, "kvfs_fuse_operation_duration_seconds_sum", op=op), 0)
            if counts[-1] > 0:
                self.assertGreater(val(after, "kvfs_fuse_operation_duration_seconds_sum", op=op), 0, op)

    def test_build_info_configuration_and_export_usage(self):
        port = free_port()
        with kf.mounted(metrics_listen="127.0.0.1:%d" % port, capacity="64MiB", segment_size="4MiB",
                        cache_size="32MiB", high_watermark="1GiB") as (mnt, backing, _):
            m, types = fetch(port)
            js = kf.stats(mnt)
            sv = os.statvfs(backing)
        info = [dict(k[1]) for k in m if k[0] == "kvfs_build_info"]
        self.assertEqual(len(info), 1)
        r = kf.run_kvfs("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[:2], ["kvfs", info[0]["version"]])
        self.assertRegex(info[0]["version"], r"^\d+\.\d+\.\d+$")
        self.assertEqual(info[0]["version"], js["version"])
        self.assertEqual(info[0]["commit"], js["commit"])
        if info[0]["commit"]:
            self.assertRegex(info[0]["commit"], r"^[0-9a-f]{12}(-dirty)?$")
            self.assertIn("(git %s)" % info[0]["commit"], r.stdout)
        self.assertEqual(types["kvfs_build_info"], "gauge")
        self.assertEqual(val(m, "kvfs_capacity_bytes"), 64 << 20)
        self.assertEqual(val(m, "kvfs_eviction_high_bytes"), 60 << 20)  # capacity - segment
        self.assertEqual(val(m, "kvfs_eviction_low_bytes"), 52 << 20)   # high - capacity / 8
        self.assertEqual(val(m, "kvfs_global_high_watermark_bytes"), 1 << 30)
        self.assertEqual(val(m, "kvfs_global_low_watermark_bytes"), (1 << 30) // 8 * 7)
        self.assertEqual(val(m, "kvfs_segment_size_bytes"), 4 << 20)
        self.assertEqual(val(m, "kvfs_cache_capacity_bytes"), 32 << 20)
        self.assertEqual(js["config"]["capacity_bytes"], 64 << 20)
        # The export's file system, as statvfs(2) of the backing directory says (free space moves a little).
        self.assertEqual(val(m, "kvfs_backing_fs_size_bytes"), sv.f_blocks * sv.f_frsize)
        self.assertEqual(js["backing_fs"]["size_bytes"], sv.f_blocks * sv.f_frsize)
        self.assertAlmostEqual(val(m, "kvfs_backing_fs_avail_bytes"), sv.f_bavail * sv.f_frsize,
                               delta=0.05 * sv.f_blocks * sv.f_frsize)
        self.assertLessEqual(val(m, "kvfs_backing_fs_avail_bytes"), val(m, "kvfs_backing_fs_size_bytes"))

    def test_every_family_is_documented(self):
        # docs/operations.md "Metrics" names every metric family the listener serves (issue #17).
        port = free_port()
        with kf.mounted(metrics_listen="127.0.0.1:%d" % port):
            _, types = fetch(port)
        doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "operations.md")
        with open(doc) as f:
            documented = set(re.findall(r"`(kvfs_[a-z0-9_]+)`", f.read()))
        self.assertEqual(sorted(set(types) - documented), [])

    def test_listener_is_gone_after_unmount(self):
        port = free_port()
        with kf.mounted(metrics_listen="127.0.0.1:%d" % port):
            fetch(port)
        with self.assertRaises(urllib.error.URLError):
            urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5)


def align4k(n):
    return (n + 4095) // 4096 * 4096


def segment_files_bytes(backing):
    """Sum of the sizes of every node's segment files on the export, and their number."""
    total, count = 0, 0
    nodes = os.path.join(backing, ".kvfs", "v1", "nodes")
    for node in os.listdir(nodes):
        seg = os.path.join(nodes, node, "seg")
        for name in os.listdir(seg) if os.path.isdir(seg) else []:
            if name.endswith(".kseg"):
                total += os.stat(os.path.join(seg, name)).st_size
                count += 1
    return total, count


@kf.skip_unless_fuse
class ExportFigures(unittest.TestCase):
    """Issue #17: `kvfs stats` / --json / /metrics show the segments on the export now (not a counter since
    the mount): segment bytes = the segment files' sizes, live bytes = the files' sizes, dead = the rest,
    overhead per file = dead / files; deletes turn live bytes into dead ones."""

    def wait_files(self, mnt, n):
        deadline = time.time() + 20
        while kf.stats(mnt)["files"] != n and time.time() < deadline:
            time.sleep(0.02)
        return kf.stats(mnt)

    def check(self, js, samples, node, backing, files, live):
        own = js["export"]["node"]
        on_disk, nsegs = segment_files_bytes(backing)
        self.assertEqual(own["segment_bytes"], on_disk)
        self.assertEqual(own["segments"], nsegs)
        self.assertEqual(js["segments"], nsegs)
        self.assertEqual(js["segment_bytes"], on_disk)
        self.assertEqual(own["files"], files)
        self.assertEqual(own["live_bytes"], live)
        self.assertEqual(own["dead_bytes"], on_disk - live)
        self.assertAlmostEqual(own["overhead_bytes_per_file"], (on_disk - live) / files)
        self.assertFalse(own["estimated"])
        self.assertEqual(js["export"]["all_nodes"]["segment_bytes"], on_disk)  # one node: the same
        self.assertEqual(js["export"]["all_nodes"]["files"], files)
        self.assertEqual(val(samples, "kvfs_node_segment_bytes", node=node), on_disk)
        self.assertEqual(val(samples, "kvfs_node_live_bytes", node=node), live)
        self.assertEqual(val(samples, "kvfs_node_dead_bytes", node=node), on_disk - live)
        self.assertEqual(val(samples, "kvfs_node_files", node=node), files)
        self.assertAlmostEqual(val(samples, "kvfs_node_overhead_per_file_bytes", node=node), (on_disk - live) / files)
        self.assertEqual(sum(val(samples, "kvfs_node_segments", node=node, state=s)
                             for s in ("open", "sealed", "unlinking")), nsegs)
        # This node's figures without a label.
        self.assertEqual(val(samples, "kvfs_export_segment_bytes"), on_disk)
        self.assertEqual(val(samples, "kvfs_export_live_bytes"), live)
        self.assertEqual(val(samples, "kvfs_export_dead_bytes"), on_disk - live)
        self.assertEqual(val(samples, "kvfs_export_files"), files)
        self.assertAlmostEqual(val(samples, "kvfs_export_overhead_per_file_bytes"), (on_disk - live) / files)
        self.assertEqual(sum(val(samples, "kvfs_export_segments", state=s) for s in ("open", "sealed", "unlinking")),
                         nsegs)
        return on_disk

    def test_segments_on_the_export_after_writes_and_deletes(self):
        port = free_port()
        n, size = 20, 100000
        with kf.mounted(metrics_listen="127.0.0.1:%d" % port, node_id="n1") as (mnt, backing, _):
            for i in range(n):
                kf.write_file(os.path.join(mnt, "f%02d" % i), os.urandom(size))
            js = self.wait_files(mnt, n)
            samples, _ = fetch(port)
            seg = self.check(js, samples, "n1", backing, n, n * size)
            # The layout of docs/format.md: a 4 KiB segment header, then per file one 4 KiB metadata block
            # (header, path, checksums) and the value padded to 4 KiB.
            self.assertEqual(seg, 4096 + n * (4096 + align4k(size)))
            # The human form says the same.
            r = kf.run_kvfs("stats", mnt)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("segments               1 on the export (1 open, 0 sealed, 0 being unlinked), %d bytes"
                          % seg, r.stdout)
            self.assertIn("segment bytes          %d live (%d records), %d dead; overhead %.0f bytes per record"
                          % (n * size, n, seg - n * size, (seg - n * size) / n), r.stdout)

            # Delete half: their bytes stay in the (open) segment as dead bytes.
            for i in range(0, n, 2):
                os.unlink(os.path.join(mnt, "f%02d" % i))
            js = self.wait_files(mnt, n // 2)
            samples, _ = fetch(port)
            seg2 = self.check(js, samples, "n1", backing, n // 2, (n // 2) * size)
            self.assertEqual(seg2, seg)
            self.assertEqual(js["export"]["node"]["dead_bytes"], seg - n * size + (n // 2) * size)
            # The cumulative figure is apart, and named so.
            self.assertEqual(js["segments_created"], 1)

    def test_peer_segments_are_sized_by_their_files(self):
        # Issue #17: a peer's segments count their files' real sizes, not this node's segment size (a
        # node with 1 GiB segments showed 11 x 1 GiB for a peer's 61.5 MiB).
        b = kf.Backing()
        try:
            with kf.mounted(backing=b, node_id="n1", segment_size="1MiB") as (mnt, backing, _):
                for i in range(7):  # 7 x 300 KB in 1 MiB segments: several segments
                    kf.write_file(os.path.join(mnt, "f%d" % i), os.urandom(300000))
                self.wait_files(mnt, 7)
            on_disk, nsegs = segment_files_bytes(b.backing)  # n1 unmounted: every segment sealed
            self.assertGreaterEqual(nsegs, 2)
            with kf.mounted(backing=b, node_id="n2", segment_size="1GiB") as (mnt, backing, _):
                js = self.wait_files(mnt, 7)
                peer = [n for n in js["nodes"] if n["node"] == "n1"][0]
                self.assertEqual(peer["segment_bytes"], on_disk)
                self.assertEqual(peer["segments"], nsegs)
                self.assertFalse(peer["estimated"])
                self.assertEqual(js["export"]["all_nodes"]["segment_bytes"], on_disk)  # n2 wrote nothing
                self.assertFalse(js["export"]["all_nodes"]["estimated"])
                self.assertLess(js["export"]["all_nodes"]["segment_bytes"], 4 << 20)
                r = kf.run_kvfs("stats", mnt)
                self.assertIn("all nodes              %d segments, %d bytes: 2100000 live (7 records)" % (nsegs, on_disk),
                              r.stdout)
        finally:
            b.cleanup()


@kf.skip_unless_fuse
class MetricsErrors(unittest.TestCase):
    def setUp(self):
        self.b = kf.Backing()

    def tearDown(self):
        self.b.cleanup()

    def mount(self, listen):
        return kf.run_kvfs("mount", self.b.mnt, "--backing", self.b.backing, "--index-dir", self.b.index,
                           "--metrics-listen", listen, timeout=60)

    def assertOneLineError(self, r, needle):
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("kvfs: --metrics-listen"), r.stderr)
        self.assertIn(needle, lines[0])
        self.assertFalse(kf.is_mounted(self.b.mnt))

    def test_bad_values(self):
        for bad, needle in (("9464", "HOST:PORT"), (":9464", "no host"), ("127.0.0.1:", "port"),
                            ("127.0.0.1:0", "port"), ("127.0.0.1:65536", "port"), ("127.0.0.1:http", "port"),
                            ("::1:9464", "brackets")):
            self.assertOneLineError(self.mount(bad), needle)
        # Nothing was created in the backing store or the index dir by a refused mount.
        self.assertEqual(os.listdir(self.b.backing), [])
        self.assertFalse(os.path.exists(self.b.index))

    def test_port_in_use(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        try:
            r = self.mount("127.0.0.1:%d" % s.getsockname()[1])  # daemon mode: the child reports it
            self.assertOneLineError(r, "in use")
        finally:
            s.close()
        self.assertFalse(os.path.exists(os.path.join(self.b.backing, ".kvfs")))

    def test_unresolvable_host(self):
        self.assertOneLineError(self.mount("no-such-host.invalid:9464"), "cannot listen")


if __name__ == "__main__":
    unittest.main()
