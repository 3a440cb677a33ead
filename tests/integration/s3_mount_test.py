"""kvfs over an S3 bucket (`kvfs mount --backing s3://BUCKET/PREFIX`, docs/s3.md), against a real S3
server: Ceph RADOS Gateway on loopback, started by tests/s3/s3_server.sh (KVFS_S3_SERVER names it; CMake
sets it). Without the Ceph packages the test skips with a message, unless KVFS_S3_REQUIRED=1 (CI), where
that fails. KVFS_S3_ENDPOINT (+ AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) uses a server already up.

What it checks, one node: connector-style writes (temp file + rename of 2.25 MiB files in nested dirs,
exists checks, reads) byte-exact; sealed segments become objects and leave the staging directory; after
an unmount, a remount with an EMPTY staging directory and a FRESH index directory reads every file back
byte-exact from the bucket alone. Prints the S3 requests per chunk (the daemon's counters, logged at
unmount).
"""
import datetime
import errno
import hashlib
import json
import hmac
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvfs_fixture import kvfs_binary, mounted, skip_unless_fuse, stats  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.environ.get("KVFS_S3_SERVER", os.path.join(os.path.dirname(HERE), "s3", "s3_server.sh"))
CHUNK = 2304 * 1024  # 2.25 MiB, a vLLM-style chunk file


class S3:
    """The few S3 calls the test makes itself (create bucket, list), signed with SigV4 (stdlib only)."""

    def __init__(self, endpoint, access, secret, region="us-east-1"):
        self.endpoint, self.access, self.secret, self.region = endpoint.rstrip("/"), access, secret, region

    def request(self, method, path, query=None, data=None):
        u = urllib.parse.urlsplit(self.endpoint)
        query = sorted((query or {}).items())
        qs = "&".join("%s=%s" % (urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~"))
                      for k, v in query)
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload = hashlib.sha256(data or b"").hexdigest()
        headers = {"host": u.netloc, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        signed = ";".join(sorted(headers))
        canonical = "\n".join([method, urllib.parse.quote(path, safe="/-_.~"), qs] +
                              ["%s:%s" % (k, headers[k]) for k in sorted(headers)] + ["", signed, payload])
        scope = "%s/%s/s3/aws4_request" % (day, self.region)
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + self.secret).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (
            self.access, scope, signed, sig)
        req = urllib.request.Request(self.endpoint + path + ("?" + qs if qs else ""), method=method, headers=headers,
                                     data=data)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def create_bucket(self, bucket):
        self.request("PUT", "/" + bucket)

    def get(self, bucket, key):
        return self.request("GET", "/%s/%s" % (bucket, key))

    def put(self, bucket, key, data):
        self.request("PUT", "/%s/%s" % (bucket, key), data=data)

    def list(self, bucket, prefix):
        """Every (key, size) under prefix."""
        out, token = [], None
        while True:
            q = {"list-type": "2", "prefix": prefix}
            if token:
                q["continuation-token"] = token
            root = ET.fromstring(self.request("GET", "/" + bucket, q))
            ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            for c in root.findall(ns + "Contents"):
                out.append((c.find(ns + "Key").text, int(c.find(ns + "Size").text)))
            if root.findtext(ns + "IsTruncated") != "true":
                return out
            token = root.findtext(ns + "NextContinuationToken")


_server = {}


def s3_server():
    """Starts the server once per process (or takes KVFS_S3_ENDPOINT); {} plus 'skip' when unavailable."""
    if _server:
        return _server
    if os.environ.get("KVFS_S3_ENDPOINT"):
        _server.update(endpoint=os.environ["KVFS_S3_ENDPOINT"], access=os.environ.get("AWS_ACCESS_KEY_ID", ""),
                       secret=os.environ.get("AWS_SECRET_ACCESS_KEY", ""), dir=None)
        return _server
    d = tempfile.mkdtemp(prefix="kvfs-s3-server-")
    r = subprocess.run(["bash", SERVER, "start", d], capture_output=True, text=True, timeout=300)
    kv = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    if r.returncode != 0 or "S3_ENDPOINT" not in kv:
        subprocess.run(["bash", SERVER, "stop", d], capture_output=True, timeout=120)
        shutil.rmtree(d, ignore_errors=True)
        _server.update(skip="tests/s3/s3_server.sh start failed (%d): %s" % (r.returncode, (r.stderr or r.stdout).strip()[-500:]))
        return _server
    _server.update(endpoint=kv["S3_ENDPOINT"], access=kv["AWS_ACCESS_KEY_ID"], secret=kv["AWS_SECRET_ACCESS_KEY"], dir=d)
    return _server


def stop_s3_server():
    d = _server.get("dir")
    if d:
        subprocess.run(["bash", SERVER, "stop", d], capture_output=True, timeout=120)
        shutil.rmtree(d, ignore_errors=True)


def chunk_bytes(i, n=CHUNK):
    seed = hashlib.sha256(b"kvfs-s3-%d" % i).digest()
    return (seed * (n // len(seed) + 1))[:n]


def s3_requests(log_path):
    """The S3 counters of the last unmount logged in log_path: {'put': N, ..., 'total': N}."""
    with open(log_path, errors="replace") as f:
        lines = [l for l in f if "kvfs: s3:" in l and "requests put=" in l]
    if not lines:
        return None
    return {k: int(v) for k, v in re.findall(r"\b(put|get|head|delete|list|total)=(\d+)", lines[-1])}


def s3_stats(mnt):
    """The daemon's S3 counters (kvfs stats --json: "s3")."""
    return stats(mnt)["s3"]


@skip_unless_fuse
class S3MountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        srv = s3_server()
        if "skip" in srv:
            if os.environ.get("KVFS_S3_REQUIRED") == "1":
                raise RuntimeError("KVFS_S3_REQUIRED=1 but no S3 server: " + srv["skip"])
            raise unittest.SkipTest(srv["skip"])
        cls.srv = srv
        cls.s3 = S3(srv["endpoint"], srv["access"], srv["secret"])

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="kvfs-s3-mount-")
        self.bucket = "kvfs-" + os.path.basename(self.root).lower().replace("_", "-")[-20:].strip("-")
        self.s3.create_bucket(self.bucket)
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID=self.srv["access"], AWS_SECRET_ACCESS_KEY=self.srv["secret"])

    def tearDown(self):
        if os.environ.get("KVFS_TEST_KEEP"):
            sys.stderr.write("keeping %s\n" % self.root)
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def node(self, name, staging_name=None):
        class Spec:
            pass
        s = Spec()
        s.backing = "s3://%s/kv" % self.bucket
        s.index = os.path.join(self.root, "idx-" + name)
        s.mnt = os.path.join(self.root, "mnt-" + name)
        s.staging = os.path.join(self.root, staging_name or ("staging-" + name))
        s.log = os.path.join(self.root, "log-" + name + ".log")
        os.makedirs(s.mnt, exist_ok=True)
        os.makedirs(s.staging, exist_ok=True)
        return s

    def mount(self, n, node_id="a", **flags):
        os.environ.update(self.env)  # the daemon takes its credentials from the environment
        return mounted(backing=n, s3_endpoint=self.srv["endpoint"], s3_staging=n.staging, s3_path_style=True,
                       log_file=n.log, node_id=node_id, log_level=os.environ.get("KVFS_TEST_LOG_LEVEL", "info"),
                       **flags)

    def staged_segments(self, n):
        out = []
        for d, _, files in os.walk(n.staging):
            out += [os.path.join(d, f) for f in files if f.endswith(".kseg")]
        return out

    def test_cold_read_bodies_land_through_the_kernel(self):
        """A GET's body is written into the value's never-touched buffer by the kernel (process_vm_writev)
        when --verify-copy chose the kernel copy, by memcpy when it chose in place; the bytes are the same
        (docs/operations.md "S3 backing")."""
        a = self.node("a", "staging-a")
        files = {"kv/c%d.bin" % i: chunk_bytes(i) for i in range(3)}
        with self.mount(a, node_id="a") as (mnt, _, _):
            os.makedirs(os.path.join(mnt, "kv"))
            for rel, data in files.items():
                with open(os.path.join(mnt, rel), "wb") as f:
                    f.write(data)
        for i, mode in enumerate(("kernel", "inplace")):
            n = self.node("r%d" % i, "staging-r%d" % i)  # a fresh index and staging: every byte from the bucket
            with self.mount(n, node_id="r%d" % i, verify_copy=mode) as (mnt, _, _):
                before = stats(mnt)["buffer_pool"]
                for rel, data in files.items():
                    with open(os.path.join(mnt, rel), "rb") as f:
                        self.assertEqual(f.read(), data, (mode, rel))
                after = stats(mnt)["buffer_pool"]
            written = after["kernel_write_bytes"] - before["kernel_write_bytes"]
            self.assertEqual(after["kernel_write_fallbacks"], 0, mode)
            if mode == "kernel":
                self.assertGreaterEqual(written, len(files) * CHUNK)
            else:
                self.assertEqual(written, 0)

    def test_store_remount_from_bucket_alone(self):
        files = {}
        a = self.node("a", "staging-1")
        # KVFS_S3_CHUNKS / KVFS_S3_SEGMENT scale the run for figures (default: 12 chunks, 8 MiB segments).
        chunks = int(os.environ.get("KVFS_S3_CHUNKS", "12"))
        segment = os.environ.get("KVFS_S3_SEGMENT", "8MiB")
        with self.mount(a, segment_size=segment) as (mnt, _, _):
            at_mount = s3_stats(mnt)
            for i in range(chunks):
                d = os.path.join(mnt, "vllm", "model-%d" % (i % 3), "layer-%02d" % (i % 4))
                os.makedirs(d, exist_ok=True)
                rel = os.path.relpath(os.path.join(d, "chunk-%03d.bin" % i), mnt)
                path = os.path.join(mnt, rel)
                self.assertFalse(os.path.exists(path))  # the connector's exists check before a store
                tmp = path + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(chunk_bytes(i))
                os.rename(tmp, path)
                files[rel] = chunk_bytes(i)
                self.assertTrue(os.path.exists(path))
            # The sealed segments are uploaded by the uploader thread (woken by each seal) and leave the
            # staging directory; only the active one stays there.
            self.assertTrue(self.wait_for(lambda: s3_stats(mnt)["segments_pending"] == 0))
            self.assertTrue(self.wait_for(lambda: len(self.staged_segments(a)) == 1), self.staged_segments(a))
            stored = s3_stats(mnt)
            self.assertEqual(stored["failures"], 0)
            text = subprocess.run([kvfs_binary(), "stats", mnt], capture_output=True, text=True, timeout=60).stdout
            self.assertRegex(text, r"s3 requests +\d+: .*put=\d+")
            self.assertRegex(text, r"s3 segments uploaded +\d+ \(0 waiting\)")
            for rel, data in files.items():
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), data, rel)
        # After the unmount: every segment is an object, none is left in the staging directory.
        keys = self.s3.list(self.bucket, "kv/")
        segs = [k for k, _ in keys if k.endswith(".kseg")]
        journals = [k for k, _ in keys if "/journal-" in k]
        if (chunks, segment) == (12, "8MiB"):
            self.assertEqual(len(segs), 4, keys)  # 3 chunks per segment
        self.assertTrue(journals, keys)
        self.assertIn("kv/.kvfs/v1/FORMAT", [k for k, _ in keys])
        self.assertEqual(self.staged_segments(a), [])
        at_unmount = s3_requests(a.log)
        self.assertIsNotNone(at_unmount, "no s3 counter line in " + a.log)

        # A fresh index and an EMPTY staging directory: everything comes from the bucket.
        b = self.node("b", "staging-2")
        with self.mount(b) as (mnt, _, _):
            at_remount = s3_stats(mnt)
            for rel, data in files.items():
                self.assertTrue(os.path.exists(os.path.join(mnt, rel)), rel)
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), data, rel)
            self.assertEqual(sorted(os.listdir(os.path.join(mnt, "vllm"))), ["model-0", "model-1", "model-2"])
            loaded = s3_stats(mnt)
            self.assertEqual(sorted(os.listdir(b.staging + "/.kvfs/v1/nodes/a/seg")), [])  # nothing staged
        gets = loaded["requests"]["get"] - at_remount["requests"]["get"]
        self.assertGreaterEqual(gets, len(files))  # every value came from the bucket (ranged GETs)
        # Each 2.25 MiB value (+ its 4 KiB metadata block) is ONE ranged GET: under --s3-read-split-min
        # (default 4 MiB) no read is split (one GET per value measured faster than 4 parts: docs/s3.md).
        d = lambda k: loaded[k] - at_remount[k]
        self.assertEqual((d("split_reads"), d("read_parts"), d("read_parts_parallel")), (0, 0, 0))
        self.assertEqual(gets, len(files))
        self.assertGreaterEqual(loaded["gets_in_flight_peak"], 1)
        self.assertEqual(loaded["bytes_received"] - at_remount["bytes_received"] >= len(files) * CHUNK, True)

        def per_chunk(after, before):
            d = {k: after["requests"][k] - before["requests"][k] for k in after["requests"]}
            d = {k: v for k, v in d.items() if v}
            return "%s = %.2f per chunk" % (d, d.get("total", 0) / len(files))
        print("\n%d x 2.25 MiB chunks, segment %s (%d segment objects). S3 requests:" % (len(files), segment, len(segs)))
        print("  mount (fresh bucket):              %s" % {k: v for k, v in at_mount["requests"].items() if v})
        print("  store (exists, write, rename, exists; uploads): %s" % per_chunk(stored, at_mount))
        print("  whole first mount incl. read-back and unmount: %s" % at_unmount)
        print("  remount, fresh index + empty staging: %s" % {k: v for k, v in at_remount["requests"].items() if v})
        print("  cold read of every chunk from the bucket: %s" % per_chunk(loaded, at_remount))

    def wait_for(self, cond, timeout=20.0):
        deadline = time.time() + timeout
        while not cond():
            if time.time() > deadline:
                return False
            time.sleep(0.1)
        return True

    def crash_with_a_staged_segment(self, a):
        """Stores 12 chunks (3 per 8 MiB segment: segments 1-3 sealed and uploaded, 4 active and staged),
        waits for the uploads and the publication, then SIGKILLs the daemon. Returns {path: bytes}."""
        files = {}
        with self.mount(a, segment_size="8MiB") as (mnt, _, proc):
            os.makedirs(os.path.join(mnt, "kv"))
            for i in range(12):
                rel = "kv/chunk-%03d.bin" % i
                with open(os.path.join(mnt, rel + ".tmp"), "wb") as f:
                    f.write(chunk_bytes(i))
                os.rename(os.path.join(mnt, rel + ".tmp"), os.path.join(mnt, rel))
                files[rel] = chunk_bytes(i)
            segs = lambda: [k for k, _ in self.s3.list(self.bucket, "kv/") if k.endswith(".kseg")]
            self.assertTrue(self.wait_for(lambda: len(segs()) == 3), segs())
            self.assertTrue(self.wait_for(lambda: len(self.staged_segments(a)) == 1), self.staged_segments(a))
            self.assertTrue(self.wait_for(lambda: s3_stats(mnt)["segments_pending"] == 0))
            time.sleep(2.0)  # the uploader publishes what the uploads made publishable within a second
            proc.send_signal(signal.SIGKILL)  # the pid the fixture started
            proc.wait()
        return files

    def read_all(self, mnt, files):
        """The names under kv/ (each must be one of files and read back byte-exact)."""
        seen = sorted(os.listdir(os.path.join(mnt, "kv")))
        for name in seen:
            rel = "kv/" + name
            self.assertIn(rel, files)
            with open(os.path.join(mnt, rel), "rb") as f:
                self.assertEqual(f.read(), files[rel], rel)  # visible => readable, byte-exact
        return seen

    def test_crash_then_remount_from_the_bucket_alone(self):
        """A node killed with its active segment not uploaded: a remount from the bucket alone (empty staging,
        fresh index) sees exactly the files whose segments are objects, byte-exact, none pointing at the
        missing segment. Its old staging directory's leftovers are obsolete after that takeover: set aside,
        never published under the new generation."""
        a = self.node("a", "staging-1")
        files = self.crash_with_a_staged_segment(a)
        published = self.s3.list(self.bucket, "kv/")
        b = self.node("b", "staging-2")
        with self.mount(b) as (mnt, _, _):
            seen = self.read_all(mnt, files)
        self.assertGreaterEqual(len(seen), 6, seen)
        for i in range(9, 12):
            self.assertNotIn("chunk-%03d.bin" % i, seen)  # segment 4 never reached the bucket
        print("\nafter a crash, from the bucket alone: %d of %d files (the rest were in the staged segment)"
              % (len(seen), len(files)))
        self.assertEqual([k for k, _ in published if k.endswith(".kseg")],
                         [k for k, _ in self.s3.list(self.bucket, "kv/") if k.endswith(".kseg")])
        c = self.node("c", "staging-1")
        with self.mount(c) as (mnt, _, _):
            self.assertEqual(self.read_all(mnt, files), seen)
        self.assertEqual(self.staged_segments(c), [])
        aside = [f for f in os.listdir(c.staging + "/.kvfs/v1/nodes/a/seg") if f.endswith(".obsolete")]
        self.assertEqual(len(aside), 1, aside)
        with open(c.log) as f:
            self.assertIn("was mounted from another staging directory since", f.read())
        self.assertFalse(any(k.endswith("-00000000000000000004.kseg") for k, _ in self.s3.list(self.bucket, "kv/")))

    def test_crash_then_remount_with_its_staging_directory(self):
        """The same node killed with its active segment staged, remounted with its staging directory (and a
        fresh index): the leftovers are uploaded and published first, every file is back; then from the
        bucket alone too."""
        a = self.node("a", "staging-1")
        files = self.crash_with_a_staged_segment(a)
        c = self.node("c", "staging-1")
        with self.mount(c) as (mnt, _, _):
            self.assertEqual(len(self.read_all(mnt, files)), len(files))
        self.assertEqual(self.staged_segments(c), [])
        d = self.node("d", "staging-3")
        with self.mount(d) as (mnt, _, _):
            self.assertEqual(len(self.read_all(mnt, files)), len(files))

    def test_gateway_down_then_back(self):
        """The S3 gateway stops while a node stores: writes keep working and staged files read locally (a
        file only in the bucket: EIO, never wrong bytes), the failed uploads are counted and retried; once
        the gateway is back everything is uploaded and published, and a remount from the bucket alone
        reads every file."""
        if not self.srv.get("dir"):
            self.skipTest("external server (KVFS_S3_ENDPOINT): not stopped by the tests")
        files = {}
        a = self.node("a", "staging-1")

        def store(mnt, lo, hi):
            for i in range(lo, hi):
                rel = "kv/chunk-%03d.bin" % i
                with open(os.path.join(mnt, rel + ".tmp"), "wb") as f:
                    f.write(chunk_bytes(i))
                os.rename(os.path.join(mnt, rel + ".tmp"), os.path.join(mnt, rel))
                files[rel] = chunk_bytes(i)

        gateway = lambda cmd: subprocess.run(["bash", SERVER, cmd, self.srv["dir"]], capture_output=True,
                                             text=True, timeout=120)
        with self.mount(a, segment_size="8MiB", backing_deadline_ms=2000) as (mnt, _, _):
            os.makedirs(os.path.join(mnt, "kv"))
            store(mnt, 0, 6)
            self.assertTrue(self.wait_for(lambda: s3_stats(mnt)["segments_uploaded"] >= 1))
            r = gateway("stop-rgw")
            self.assertEqual(r.returncode, 0, r.stderr)
            try:
                store(mnt, 6, 12)  # seals segments 2 and 3: their uploads fail
                self.assertTrue(self.wait_for(lambda: s3_stats(mnt)["failures"] > 0, timeout=30))
                self.assertGreaterEqual(s3_stats(mnt)["segments_pending"], 1)
                for i in range(12):
                    rel = "kv/chunk-%03d.bin" % i
                    try:
                        with open(os.path.join(mnt, rel), "rb") as f:
                            self.assertEqual(f.read(), files[rel], rel)
                    except OSError as e:
                        # Segment 1 is only in the bucket: EIO while the gateway is down, never wrong bytes.
                        # Segments 2-4 are staged (uploads failing, or active): read locally.
                        self.assertEqual((i < 3, e.errno), (True, errno.EIO), rel)
            finally:
                r = gateway("start-rgw")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(self.wait_for(lambda: s3_stats(mnt)["segments_pending"] == 0, timeout=60))
        with open(a.log) as f:
            log = f.read()
        self.assertIn("kvfs: s3: upload or journal publication failed", log)
        self.assertIn("kvfs: s3: uploads work again", log)
        b = self.node("b", "staging-2")
        with self.mount(b) as (mnt, _, _):
            self.assertEqual(len(self.read_all(mnt, files)), 12)

    def test_frozen_gateway_read_ends_within_the_deadline(self):
        """A gateway that accepts requests and never answers (SIGSTOP): a read of a file only in the bucket
        fails with EIO, and every FUSE READ waits on at most one round of S3 calls, bounded together by
        --backing-deadline-ms: the ranged GET of a segment already open (no HEAD after them, as the check
        whether the segment vanished made before), or the HEAD that opens one (no GET, no second HEAD); the
        kernel's immediate retry of the failed page fails at once (no request). Once the gateway runs
        again the same files read back byte-exact. Counts, not durations: the read's time is printed only."""
        if not self.srv.get("dir"):
            self.skipTest("external server (KVFS_S3_ENDPOINT): not stopped by the tests")
        a, b = self.node("a", "staging-a"), self.node("b", "staging-b")
        files = {}
        with self.mount(a, segment_size="8MiB") as (mnt, _, _):
            os.makedirs(os.path.join(mnt, "kv"))
            for i in range(6):  # segments 1 (chunks 0-2) and 2 (3-5), both objects after the unmount
                rel = "kv/chunk-%03d.bin" % i
                with open(os.path.join(mnt, rel), "wb") as f:
                    f.write(chunk_bytes(i))
                files[rel] = chunk_bytes(i)
        with open(os.path.join(self.srv["dir"], "rgw.pid")) as f:
            rgw = int(f.read())  # the gateway this test's server script started
        with self.mount(b, backing_deadline_ms=1000, peer_poll_ms=0) as (mnt, _, _):
            with open(os.path.join(mnt, "kv/chunk-000.bin"), "rb") as f:  # opens segment 1 (a HEAD)
                self.assertEqual(f.read(), files["kv/chunk-000.bin"])
            os.kill(rgw, signal.SIGSTOP)
            try:
                for rel, opened in (("kv/chunk-001.bin", True), ("kv/chunk-003.bin", False)):
                    s0, t0 = stats(mnt), time.time()
                    with self.assertRaises(OSError) as cm:
                        with open(os.path.join(mnt, rel), "rb") as f:
                            f.read()
                    secs = time.time() - t0
                    self.assertEqual(cm.exception.errno, errno.EIO, rel)
                    s1 = stats(mnt)
                    req = {k: s1["s3"]["requests"][k] - s0["s3"]["requests"][k] for k in ("get", "head")}
                    reads = s1["fuse_ops"]["read"]["count"] - s0["fuse_ops"]["read"]["count"]
                    print("\nfrozen gateway, %s (segment %s): EIO after %.1f s (deadline 1 s), %d READs, requests %s"
                          % (rel, "open" if opened else "not open", secs, reads, req))
                    # One load, the rest of the READs (the kernel's retry) answered without a request.
                    self.assertEqual(req, {"get": 1, "head": 0} if opened else {"get": 0, "head": 1}, rel)
            finally:
                os.kill(rgw, signal.SIGCONT)
            after = stats(mnt)["s3"]
            self.assertEqual(after["gets_in_flight"], 0)
            # A load that succeeds forgets the timed-out ones: the two failed files read back from the bucket.
            for rel in ("kv/chunk-005.bin", "kv/chunk-001.bin", "kv/chunk-003.bin"):
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), files[rel], rel)

    def test_frozen_gateway_first_read_of_a_peer_segment(self):
        """Node B (peer tailer on) opens and reads a file in a segment of peer A it never held, with the
        gateway frozen (SIGSTOP): the read fails with EIO within 1.5 x --backing-deadline-ms, and the open's
        hold of A's segment sends no request (no LIST of A's journal: hold markers are local on S3, the owner
        never sees them), so the read's HEAD is the one request. Before, the hold's LIST waited a whole
        deadline before the read's own (2 x, up to 6 x with several segments held one after another). After
        SIGCONT the same file reads back byte-exact."""
        if not self.srv.get("dir"):
            self.skipTest("external server (KVFS_S3_ENDPOINT): not stopped by the tests")
        a, b = self.node("a", "staging-a"), self.node("b", "staging-b")
        files = {}
        with self.mount(a, node_id="a", segment_size="8MiB") as (mnt, _, _):
            os.makedirs(os.path.join(mnt, "kv"))
            for i in range(6):  # A's segments 1 (chunks 0-2) and 2 (3-5), objects after the unmount
                rel = "kv/chunk-%03d.bin" % i
                with open(os.path.join(mnt, rel), "wb") as f:
                    f.write(chunk_bytes(i))
                files[rel] = chunk_bytes(i)
        with open(os.path.join(self.srv["dir"], "rgw.pid")) as f:
            rgw = int(f.read())
        deadline_ms = 2000
        # The tailer runs (its background polls far apart, so the counts below are the read's alone).
        with self.mount(b, node_id="b", backing_deadline_ms=deadline_ms, peer_poll_ms=60000,
                        peer_poll_max_ms=60000) as (mnt, _, _):
            self.assertTrue(self.wait_for(lambda: len(os.listdir(os.path.join(mnt, "kv"))) == 6))
            with open(os.path.join(mnt, "kv/chunk-000.bin"), "rb") as f:  # A's segment 1: held, opened
                self.assertEqual(f.read(), files["kv/chunk-000.bin"])
            rel = "kv/chunk-003.bin"  # A's segment 2: never held or opened by B
            s0 = stats(mnt)["s3"]["requests"]
            os.kill(rgw, signal.SIGSTOP)
            try:
                t0 = time.time()
                with self.assertRaises(OSError) as cm:
                    with open(os.path.join(mnt, rel), "rb") as f:
                        f.read()
                secs = time.time() - t0
            finally:
                os.kill(rgw, signal.SIGCONT)
            s1 = stats(mnt)["s3"]["requests"]
            req = {k: s1[k] - s0[k] for k in ("list", "head", "get")}
            print("\nfrozen gateway, first read of a peer's segment: errno %d after %.2f s (deadline %d ms), "
                  "requests %s" % (cm.exception.errno, secs, deadline_ms, req))
            self.assertEqual(cm.exception.errno, errno.EIO)
            self.assertLess(secs, 1.5 * deadline_ms / 1000.0)
            self.assertEqual(req, {"list": 0, "head": 1, "get": 0})
            # A load that succeeds forgets the timed-out one (else a retry within the deadline fails at once).
            for r in ("kv/chunk-004.bin", rel):
                with open(os.path.join(mnt, r), "rb") as f:
                    self.assertEqual(f.read(), files[r], r)

    def test_two_nodes_share_one_bucket(self):
        """Node A stores; node B (its own node id, staging directory and index) mounted on the same bucket
        reads A's files once A's segments are uploaded and its journal published, byte-exact; files A stores
        later appear on B after their segment's seal and upload (B tails A's published journal)."""
        files = {}
        a, b = self.node("a", "staging-a"), self.node("b", "staging-b")

        def store(mnt, lo, hi):
            for i in range(lo, hi):
                rel = "kv/chunk-%03d.bin" % i
                with open(os.path.join(mnt, rel + ".tmp"), "wb") as f:
                    f.write(chunk_bytes(i))
                os.rename(os.path.join(mnt, rel + ".tmp"), os.path.join(mnt, rel))
                files[rel] = chunk_bytes(i)

        with self.mount(a, node_id="a", segment_size="8MiB") as (ma, _, _):
            os.makedirs(os.path.join(ma, "kv"))
            store(ma, 0, 7)  # segments 1 and 2 sealed (3 chunks each), chunk 6 in the active segment 3
            self.assertTrue(self.wait_for(lambda: s3_stats(ma)["segments_uploaded"] == 2))
            time.sleep(2.0)  # the publication behind the uploads
            with self.mount(b, node_id="b", peer_poll_ms=100) as (mb, _, _):
                seen = self.read_all(mb, files)
                self.assertEqual(seen, ["chunk-%03d.bin" % i for i in range(6)])  # not chunk 6: unpublished
                store(ma, 7, 12)  # seals segment 3 (chunks 6-8); 9-11 in the active segment 4
                self.assertTrue(self.wait_for(lambda: s3_stats(ma)["segments_uploaded"] == 3))
                self.assertTrue(self.wait_for(lambda: "chunk-008.bin" in os.listdir(os.path.join(mb, "kv"))))
                seen = self.read_all(mb, files)
                self.assertEqual(seen, ["chunk-%03d.bin" % i for i in range(9)])
            # A's unmount seals and publishes the rest; B, mounted again (its clean index), tails it.
        with self.mount(b, node_id="b") as (mb, _, _):
            self.assertTrue(self.wait_for(lambda: len(os.listdir(os.path.join(mb, "kv"))) == 12))
            self.assertEqual(self.read_all(mb, files), sorted(os.path.basename(r) for r in files))

    def test_link_publish_claims_an_object(self):
        """The LMCache fs_native publish (O_EXCL temp, link(tmp, final), unlink(tmp)) on a bucket: the link
        claims its name with a conditional PUT of an empty object under .kvfs/v1/links/ (a bucket has no
        directories to mkdir, so the claim is an object there); a second link of the name is EEXIST; the
        file reads back byte-exact after a remount from the bucket; the unmount deletes its claims."""
        a = self.node("a")
        data = chunk_bytes(7)
        prefix = "kv/.kvfs/v1/links/"
        with self.mount(a) as (mnt, _, _):
            os.makedirs(os.path.join(mnt, "kv"))
            for tmp in ("t1", "t2"):
                fd = os.open(os.path.join(mnt, "kv", tmp), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, data)
                os.fsync(fd)
                os.close(fd)
            os.link(os.path.join(mnt, "kv", "t1"), os.path.join(mnt, "kv", "final"))
            with self.assertRaises(FileExistsError):
                os.link(os.path.join(mnt, "kv", "t2"), os.path.join(mnt, "kv", "final"))
            os.unlink(os.path.join(mnt, "kv", "t1"))
            os.unlink(os.path.join(mnt, "kv", "t2"))
            claims = stats(mnt)["link_claims"]
            self.assertEqual((claims["won"], claims["lost"], claims["errors"]), (1, 0, 0), claims)
            objs = [(k, n) for k, n in self.s3.list(self.bucket, prefix) if k != prefix]
            self.assertEqual(len(objs), 1, objs)
            self.assertRegex(objs[0][0], "^" + re.escape(prefix) + "[0-9a-f]{32}$")
        self.assertEqual([k for k, _ in self.s3.list(self.bucket, prefix) if k != prefix], [],
                         "a clean unmount deletes its claims")
        shutil.rmtree(a.index)
        shutil.rmtree(a.staging)
        os.makedirs(a.staging)
        with self.mount(a) as (mnt, _, _):
            with open(os.path.join(mnt, "kv", "final"), "rb") as f:
                self.assertEqual(f.read(), data)

    def test_seal_after_bounds_peer_visibility(self):
        """--seal-after-ms: a file in A's active segment (64 MiB, far from full) reaches the bucket and node B
        once the segment has held it that long, without A's unmount; without the option it stays invisible."""
        a, b = self.node("a", "staging-a"), self.node("b", "staging-b")
        with self.mount(a, node_id="a", seal_after_ms=1500) as (ma, _, _):
            os.makedirs(os.path.join(ma, "kv"))
            with self.mount(b, node_id="b", peer_poll_ms=100) as (mb, _, _):
                with open(os.path.join(ma, "kv", "one.bin"), "wb") as f:
                    f.write(chunk_bytes(1))
                self.assertTrue(self.wait_for(lambda: os.path.exists(os.path.join(mb, "kv", "one.bin")), timeout=30))
                with open(os.path.join(mb, "kv", "one.bin"), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(1))
                self.assertEqual(s3_stats(ma)["segments_uploaded"], 1)
        r = subprocess.run([kvfs_binary(), "mount", a.mnt, "--backing", self.root, "--index-dir", a.index,
                            "--seal-after-ms", "1000"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--seal-after-ms needs --backing s3://", r.stderr)

    def rgw_admin(self, *args):
        """radosgw-admin on the test server's cluster (the key tests); skips on an external server."""
        d = self.srv.get("dir")
        if not d:
            self.skipTest("external server (KVFS_S3_ENDPOINT): its users are not ours to change")
        r = subprocess.run(["radosgw-admin", "-c", os.path.join(d, "ceph.conf"), "-n", "client.rgw.test"] +
                           list(args), capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def add_key(self, access, secret):
        self.rgw_admin("key", "create", "--uid=kvfs-test", "--key-type=s3", "--access-key=" + access,
                       "--secret-key=" + secret)

    def remove_key(self, access):
        self.rgw_admin("key", "rm", "--uid=kvfs-test", "--key-type=s3", "--access-key=" + access)

    def key_refused(self, access, secret):
        """True once the gateway answers 403 for this key (a removal reaches the gateway's cache)."""
        try:
            S3(self.srv["endpoint"], access, secret).request("GET", "/" + self.bucket, {"list-type": "2", "max-keys": "1"})
            return False
        except urllib.error.HTTPError as e:
            return e.code == 403

    def test_idle_nodes_cost_few_requests(self):
        """Two mounted nodes with nothing to do: the S3 requests each sends in 30 s (kvfs stats --json, by
        type) stay under a bound. Idle tailing backs off (the poll of a peer doubles from --peer-poll-ms up
        to 10 s on S3; the nodes listing waits as long): one idle node made 134 requests in 30 s before
        (a LIST + HEAD + GET poll of its peer every ~0.8 s, a nodes LIST every 5 s, a HEARTBEAT PUT every
        5 s); 21 and 17 when each poll of an idle peer was a LIST, a HEAD and a GET of its journal object
        (now the LIST alone). The peer is still polled, and a lookup miss on B still polls A at once."""
        a, b = self.node("a", "staging-a"), self.node("b", "staging-b")
        window = 30.0
        polls = lambda st: sum(p["polls"] for p in st["peer_journals"])
        with self.mount(a, node_id="a") as (ma, _, _):
            with open(os.path.join(ma, "first.bin"), "wb") as f:
                f.write(chunk_bytes(1, 65536))
            with self.mount(b, node_id="b") as (mb, _, _):
                time.sleep(15.0)  # both mounted, listed each other, backed off (200 ms doubling to 10 s)
                s0 = {n: stats(m) for n, m in (("a", ma), ("b", mb))}
                time.sleep(window)
                s1 = {n: stats(m) for n, m in (("a", ma), ("b", mb))}
                for n in ("a", "b"):
                    r0, r1 = s0[n]["s3"]["requests"], s1[n]["s3"]["requests"]
                    d = {k: r1[k] - r0[k] for k in r1 if r1[k] - r0[k]}
                    print("\nidle node %s, %.0f s: S3 requests %s = %.0f per idle minute; %d polls of its peer"
                          % (n, window, d, d.get("total", 0) * 60 / window, polls(s1[n]) - polls(s0[n])))
                    # Per node and 30 s: 6 HEARTBEAT PUTs, ~3 polls of the peer at 10 s (one LIST each: the
                    # listing gives the journal object's size, read to its end already, so no HEAD + GET of
                    # it), ~3 nodes LISTs, and the ramp of the backoff where it falls inside the window.
                    self.assertLessEqual(d.get("total", 0), 18, (n, d))
                    self.assertEqual((d.get("head", 0), d.get("get", 0)), (0, 0), (n, d))
                    self.assertGreaterEqual(polls(s1[n]) - polls(s0[n]), 2, n)  # still tailing
                # A lookup miss on B polls A at once (and puts it back on the short interval).
                p0 = polls(stats(mb))
                self.assertFalse(os.path.exists(os.path.join(mb, "no-such-key.bin")))
                self.assertTrue(self.wait_for(lambda: polls(stats(mb)) > p0, timeout=3.0))

    def test_access_denied_is_eacces(self):
        """403 from the gateway answers EACCES, as docs/s3.md says: a mount with a wrong secret fails (exit 1)
        naming the credentials; a key removed while a node is mounted makes a read of a file only in the
        bucket fail with EACCES (not EIO: nothing is wrong with the data or the gateway, and retrying does
        not help until the credentials are fixed), never wrong bytes, with a log line naming the credentials."""
        a, b = self.node("a", "staging-a"), self.node("b", "staging-b")
        files = {}
        with self.mount(a, node_id="a", segment_size="8MiB") as (ma, _, _):
            os.makedirs(os.path.join(ma, "kv"))
            for i in range(6):
                rel = "kv/chunk-%03d.bin" % i
                with open(os.path.join(ma, rel), "wb") as f:
                    f.write(chunk_bytes(i))
                files[rel] = chunk_bytes(i)
        access, secret = "KVFSTESTDENIEDKEY0003", "kvfs-test-secret-key-denied-0000000000003"
        self.add_key(access, secret)
        saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        try:
            env = dict(self.env, AWS_ACCESS_KEY_ID=access, AWS_SECRET_ACCESS_KEY=secret)
            self.env, old_env = env, self.env
            with self.mount(b, node_id="b", peer_poll_ms=0) as (mb, _, _):
                with open(os.path.join(mb, "kv/chunk-000.bin"), "rb") as f:
                    self.assertEqual(f.read(), files["kv/chunk-000.bin"])
                self.remove_key(access)
                self.assertTrue(self.wait_for(lambda: self.key_refused(access, secret), timeout=30))
                with self.assertRaises(OSError) as cm:
                    with open(os.path.join(mb, "kv/chunk-003.bin"), "rb") as f:
                        f.read()
                self.assertEqual(cm.exception.errno, errno.EACCES, cm.exception)
                self.assertGreaterEqual(sum(s3_stats(mb)["requests"].values()), 1)
            self.env = old_env
        finally:
            for k, v in saved.items():
                if v is not None:
                    os.environ[k] = v
        with open(b.log, errors="replace") as f:
            self.assertIn("check the credentials", f.read())
        r = subprocess.run([kvfs_binary(), "mount", b.mnt, "--backing", b.backing, "--index-dir", b.index + "-2",
                            "--foreground", "--s3-endpoint", self.srv["endpoint"], "--s3-staging", b.staging,
                            "--s3-path-style", "--node-id", "c"], capture_output=True, text=True, timeout=120,
                           env=dict(self.env, AWS_SECRET_ACCESS_KEY="wrong-secret"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("HTTP 403", r.stderr)
        self.assertIn("check the credentials", r.stderr)

    def test_rotated_credentials_file_keeps_writes_working(self):
        """Credentials from the shared credentials file (AWS_SHARED_CREDENTIALS_FILE), rotated under a running
        mount (an agent renewing temporary credentials; the gateway user has two keys, the old one removed
        after the rotation): uploads keep working. First rotation: a new file renamed over the old (mtime,
        inode: re-read at the next request); second: rewritten in place with the old mtime and size (only the
        403 InvalidAccessKeyId tells: re-read, the request retried once). A remount with the last key reads
        every file back byte-exact from the bucket."""
        keys = [("KVFSTESTROTATEKEY0001", "kvfs-test-secret-key-rotate-0000000000001"),
                ("KVFSTESTROTATEKEY0002", "kvfs-test-secret-key-rotate-0000000000002"),
                ("KVFSTESTROTATEKEY0003", "kvfs-test-secret-key-rotate-0000000000003")]
        self.add_key(*keys[0])
        cred = os.path.join(self.root, "credentials")

        def write_creds(k, path):
            with open(path, "w") as f:
                f.write("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % k)

        write_creds(keys[0], cred)
        a = self.node("a", "staging-a")
        files = {}
        saved = {k: os.environ.pop(k, None) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        old_env = self.env
        try:
            self.env = {k: v for k, v in self.env.items() if k not in saved}
            self.env["AWS_SHARED_CREDENTIALS_FILE"] = cred
            with self.mount(a, node_id="a", segment_size="4MiB") as (ma, _, _):
                os.makedirs(os.path.join(ma, "kv"))

                def store_and_upload(i):
                    rel = "kv/chunk-%03d.bin" % i
                    with open(os.path.join(ma, rel), "wb") as f:
                        f.write(chunk_bytes(i))
                    files[rel] = chunk_bytes(i)
                    want = s3_stats(ma)["segments_uploaded"] + 1
                    with open(os.path.join(ma, "kv/seal-%d.bin" % i), "wb") as f:  # seals the segment
                        f.write(chunk_bytes(100 + i, 3 << 20))
                    files["kv/seal-%d.bin" % i] = chunk_bytes(100 + i, 3 << 20)
                    return self.wait_for(lambda: s3_stats(ma)["segments_uploaded"] >= want and
                                         s3_stats(ma)["segments_pending"] == 0, timeout=30)

                self.assertTrue(store_and_upload(0))
                # Rotation 1: a new file renamed over the old one, the old key removed.
                self.add_key(*keys[1])
                write_creds(keys[1], cred + ".tmp")
                os.rename(cred + ".tmp", cred)
                self.remove_key(keys[0][0])
                self.assertTrue(self.wait_for(lambda: self.key_refused(*keys[0]), timeout=30))
                self.assertTrue(store_and_upload(1), s3_stats(ma))
                st = s3_stats(ma)
                self.assertEqual(st["credential_reloads"], 1, st)
                # Rotation 2: same file, same size, the old mtime: only the gateway's 403 tells.
                self.add_key(*keys[2])
                before = os.stat(cred)
                with open(cred, "r+") as f:
                    f.write("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % keys[2])
                os.utime(cred, ns=(before.st_atime_ns, before.st_mtime_ns))
                self.assertEqual((os.stat(cred).st_size, os.stat(cred).st_ino), (before.st_size, before.st_ino))
                self.remove_key(keys[1][0])
                self.assertTrue(self.wait_for(lambda: self.key_refused(*keys[1]), timeout=30))
                self.assertTrue(store_and_upload(2), s3_stats(ma))
                st = s3_stats(ma)
                self.assertEqual(st["credential_reloads"], 2, st)
                self.assertGreaterEqual(st["credential_retries"], 1, st)
                self.assertEqual(st["segments_pending"], 0, st)
            b = self.node("b", "staging-b")
            with self.mount(b, node_id="b") as (mb, _, _):
                self.assertEqual(self.read_all(mb, files), sorted(os.path.basename(r) for r in files))
        finally:
            self.env = old_env
            os.environ.pop("AWS_SHARED_CREDENTIALS_FILE", None)
            for k, v in saved.items():
                if v is not None:
                    os.environ[k] = v

    def test_unmount_under_a_hung_gateway_is_bounded(self):
        """The gateway frozen (SIGSTOP: it accepts connections and never answers) while a node holds an
        unsealed segment: kvfs umount fails (exit 1: the staging directory keeps the data) after ONE round
        of uploads timed out, not ten: the S3 requests sent from the freeze to the end of the unmount (the
        daemon's last counter line) are a handful (the uploader's and the unmount's segment PUT, a heartbeat
        PUT, a tailer LIST), where ten rounds of retries sent 10+ PUTs and took 63 s at a 5 s deadline. The
        time is printed only (a bound of 10 x the deadline only tells "returned" from "hung")."""
        if not self.srv.get("dir"):
            self.skipTest("external server (KVFS_S3_ENDPOINT): not stopped by the tests")
        a = self.node("a", "staging-a")
        with open(os.path.join(self.srv["dir"], "rgw.pid")) as f:
            rgw = int(f.read())
        deadline_ms = 2000
        with self.mount(a, node_id="a", backing_deadline_ms=deadline_ms) as (ma, _, proc):
            with open(os.path.join(ma, "one.bin"), "wb") as f:
                f.write(chunk_bytes(1))
            before = s3_stats(ma)["requests"]["total"]
            os.kill(rgw, signal.SIGSTOP)
            try:
                t0 = time.time()
                r = subprocess.run([kvfs_binary(), "umount", ma], capture_output=True, text=True, timeout=300)
                secs = time.time() - t0
                proc.wait(timeout=60)
            finally:
                os.kill(rgw, signal.SIGCONT)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        after = s3_requests(a.log)
        self.assertIsNotNone(after, "no s3 counter line in " + a.log)
        sent = after["total"] - before
        print("\nhung gateway, deadline %d ms: kvfs umount exit %d after %.1f s, %d S3 requests sent (%s)"
              % (deadline_ms, r.returncode, secs, sent, after))
        self.assertLessEqual(sent, 6, after)
        self.assertLess(secs, 10 * deadline_ms / 1000.0)
        with open(a.log, errors="replace") as f:
            self.assertIn("did not answer within the deadline", f.read())
        # The data is not lost: the next mount with the staging directory uploads it.
        with self.mount(a, node_id="a") as (ma, _, _):
            with open(os.path.join(ma, "one.bin"), "rb") as f:
                self.assertEqual(f.read(), chunk_bytes(1))

    def test_config_file_and_fstab_forms(self):
        """The S3 options as config-file keys (`kvfs mount MNT --config FILE`, what kvfs@.service runs) and as
        fstab options (the mount(8) helper form mount.fuse3 runs, `kvfs s3://BUCKET/PREFIX MNT -o
        s3_endpoint=...,s3_staging=...,s3_path_style`, and, as root with mount.fuse3, a real fstab line through
        `mount --fstab FILE`): each mounts the bucket as a daemon, and what one wrote the next reads back."""
        a = self.node("a", "staging-a")
        cfg = os.path.join(self.root, "kvfs.conf")
        with open(cfg, "w") as f:
            f.write("# the S3 keys of docs/operations.md\n"
                    "backing = s3://%s/kv\ns3-endpoint = %s\ns3-region = us-east-1\ns3-path-style = true\n"
                    "s3-staging = %s\nseal-after-ms = 0\ns3-read-parts = 4\ns3-read-split-min = 4MiB\n"
                    "peer-poll-max-ms = 10000\nbacking-deadline-ms = 30000\nnode-id = cfg\nindex-dir = %s\n"
                    "log-file = %s\n" % (self.bucket, self.srv["endpoint"], a.staging, a.index, a.log))
        run = lambda cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=self.env)
        r = run([kvfs_binary(), "mount", a.mnt, "--config", cfg, "--quiet"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        try:
            self.assertTrue(s3_stats(a.mnt)["requests"]["list"] >= 1)  # an S3 backing, from the file's keys
            with open(os.path.join(a.mnt, "from-config.bin"), "wb") as f:
                f.write(chunk_bytes(1))
        finally:
            r = run([kvfs_binary(), "umount", a.mnt])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        opts = ("_netdev,nofail,node_id=cfg,index_dir=%s,s3_endpoint=%s,s3_staging=%s,s3_path_style,"
                "s3_read_split_min=4MiB,log_file=%s" % (a.index, self.srv["endpoint"], a.staging, a.log))
        r = run([kvfs_binary(), "s3://%s/kv" % self.bucket, a.mnt, "-o", opts + ",dev,suid"])  # as mount.fuse3
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        try:
            with open(os.path.join(a.mnt, "from-config.bin"), "rb") as f:
                self.assertEqual(f.read(), chunk_bytes(1))
            with open(os.path.join(a.mnt, "from-helper.bin"), "wb") as f:
                f.write(chunk_bytes(2))
        finally:
            r = run([kvfs_binary(), "umount", a.mnt])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        helper = [p for p in ("/sbin/mount.fuse3", "/usr/sbin/mount.fuse3") if os.path.exists(p)]
        link = "/usr/local/sbin/kvfs"
        if os.geteuid() != 0 or not helper or not shutil.which("mount") or os.path.lexists(link):
            print("\nfstab line through mount(8): skipped (needs root, mount.fuse3 and a free %s)" % link)
            return
        # mount(8) finds the helper's kvfs only in sh's default path (docs/operations.md "fstab").
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.realpath(kvfs_binary()), link)
        try:
            fstab = os.path.join(self.root, "fstab")
            with open(fstab, "w") as f:
                f.write("s3://%s/kv %s fuse.kvfs %s 0 0\n" % (self.bucket, a.mnt, opts))
            r = run(["mount", "--fstab", fstab, a.mnt])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            try:
                for name, i in (("from-config.bin", 1), ("from-helper.bin", 2)):
                    with open(os.path.join(a.mnt, name), "rb") as f:
                        self.assertEqual(f.read(), chunk_bytes(i), name)
            finally:
                r = run([kvfs_binary(), "umount", a.mnt])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        finally:
            os.unlink(link)

    def test_usage_errors(self):
        a = self.node("u")
        r = subprocess.run([kvfs_binary(), "mount", a.mnt, "--backing", a.backing,
                            "--index-dir", a.index, "--foreground"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--s3-endpoint", r.stderr)
        r = subprocess.run([kvfs_binary(), "mount", a.mnt, "--backing", a.backing,
                            "--index-dir", a.index, "--foreground", "--s3-endpoint", self.srv["endpoint"],
                            "--s3-staging", a.staging, "--s3-path-style"],
                           capture_output=True, text=True, timeout=60,
                           env=dict(self.env, AWS_SECRET_ACCESS_KEY="wrong-secret"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("s3", r.stderr)
        self.assertFalse(os.listdir(a.staging))
        # No credentials at all: one line naming what to set, exit 2, before anything is started or written.
        env = {k: v for k, v in self.env.items() if not k.startswith("AWS_")}
        env["HOME"] = self.root  # no ~/.aws/credentials there
        for fg in (["--foreground"], []):
            r = subprocess.run([kvfs_binary(), "mount", a.mnt, "--backing", a.backing, "--index-dir", a.index,
                                "--s3-endpoint", self.srv["endpoint"], "--s3-staging", a.staging] + fg,
                               capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", r.stderr)
            self.assertFalse(os.listdir(a.staging))


BENCH = os.path.join(os.path.dirname(os.path.abspath(os.environ.get("KVFS_BINARY", "build/tools/kvfs"))), "kvfs-bench")
FSCK = os.path.join(os.path.dirname(os.path.abspath(os.environ.get("KVFS_BINARY", "build/tools/kvfs"))), "kvfs-fsck")


class S3ToolsTest(S3MountTest):
    """kvfs-bench's s3 modes and kvfs-fsck s3://, against the same server (S3MountTest's fixture)."""

    def test_bench_s3_modes_count_requests(self):
        """kvfs-bench --modes s3: the vllm and sglang-file profiles through kvfs over the bucket and as one object
        per chunk, every load verified; the S3 requests per chunk are what each design sends: the baseline one
        PUT per store, one HEAD per probe, one GET per load; kvfs far less than a PUT per chunk stored (the
        chunks go into segment objects) and no request per probe (the index answers)."""
        if not os.path.exists(BENCH):
            self.skipTest("kvfs-bench not built")
        out = os.path.join(self.root, "bench.json")
        work = os.path.join(self.root, "bench-work")
        n = {"vllm": 16, "sglang-file": 48}
        results = {}
        for prof, chunks in n.items():
            p = subprocess.run([BENCH, "--profile", prof, "--modes", "s3", "--chunks", str(chunks), "--threads", "2",
                                "--lookup-batch", "16", "--no-progress", "--work", work, "--json", out,
                                "--s3", "s3://%s/bench" % self.bucket, "--s3-endpoint", self.srv["endpoint"],
                                "--s3-path-style"],
                               capture_output=True, text=True, timeout=600, env=self.env)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            self.assertIn("S3 requests per chunk", p.stdout)
            print("\n" + p.stdout)
            with open(out) as f:
                results[prof] = json.load(f)["profiles"][0]
        for prof, pj in results.items():
            chunks, size = n[prof], pj["chunk_bytes"]
            k, o = pj["modes"]["s3-kvfs"], pj["modes"]["s3-object"]
            for m in (k, o):
                self.assertTrue(m["ok"], "%s: %s" % (prof, m.get("error")))
                self.assertEqual(m["phases"]["load"]["bytes"], chunks * size)
                self.assertEqual(m["phases"]["warm_load"]["bytes"], chunks * size)
                self.assertEqual(m["phases"]["lookup"]["hits"], chunks // 16 * 8)  # half of each request of 16
            per = lambda m, ph: m["phases"][ph]["s3"]["requests_per_unit"]
            # one object per chunk: exactly its requests
            self.assertEqual(per(o, "store"), {"put": 1.0, "total": 1.0}, prof)
            self.assertEqual(per(o, "lookup")["head"], 1.0, prof)
            self.assertEqual(per(o, "load"), {"get": 1.0, "total": 1.0}, prof)
            # kvfs: PUTs per chunk stored < 1, counting the unmount that uploads the last segment and publishes
            # the journal; probes answered locally; every chunk of the cold load read from the bucket
            through = k["s3_store_through_unmount"]["requests_per_unit"]
            self.assertLess(through.get("put", 0), 1.0, (prof, through))
            self.assertLess(through["total"], 1.0, (prof, through))
            self.assertLess(per(k, "lookup")["total"], 0.2, prof)
            self.assertGreaterEqual(k["phases"]["load"]["s3"]["requests"].get("get", 0), chunks, prof)
            self.assertGreaterEqual(k["phases"]["load"]["s3"]["bytes_received"], chunks * size, prof)
            # a 2.25 MiB value and a 144 KiB one are one GET each (under --s3-read-split-min: not split)
            self.assertLess(per(k, "load")["total"], 1.5, prof)
        # every run's objects were deleted
        self.assertEqual([x for x in self.s3.list(self.bucket, "bench/")], [])

    def fsck(self, *args):
        p = subprocess.run([FSCK] + list(args) + ["--json"], capture_output=True, text=True, timeout=300, env=self.env)
        try:
            return p.returncode, json.loads(p.stdout), p.stderr
        except ValueError:
            self.fail("kvfs-fsck %s: exit %d, %s %s" % (args, p.returncode, p.stdout[-2000:], p.stderr[-2000:]))

    def normalized(self, rep, root):
        out = []
        for f in rep["findings"]:
            f = dict(f)
            for k in ("file", "detail"):
                f[k] = f[k].replace(root, "ROOT")
            out.append(f)
        return sorted(out, key=lambda f: (f["kind"], f["file"], f["offset"], f["path"]))

    def test_fsck_s3_reports_as_on_posix(self):
        """kvfs-fsck s3://... checks the bucket through the mount's S3 Env; a copy of the same objects in a
        directory checked by the POSIX path gives the same report: clean before, the same findings after the
        same byte range of a segment object is corrupted, and the same repair (journaled as an object: a
        mount from the bucket alone then sees the repaired state)."""
        if not os.path.exists(FSCK):
            self.skipTest("kvfs-fsck not built")
        a = self.node("a", "staging-a")
        files = {}
        with self.mount(a, segment_size="8MiB") as (mnt, _, _):
            os.makedirs(os.path.join(mnt, "kv"))
            for i in range(6):
                rel = "kv/chunk-%03d.bin" % i
                with open(os.path.join(mnt, rel + ".tmp"), "wb") as f:
                    f.write(chunk_bytes(i))
                os.rename(os.path.join(mnt, rel + ".tmp"), os.path.join(mnt, rel))
                files[rel] = chunk_bytes(i)
        url = "s3://%s/kv" % self.bucket
        flags = ["--s3-endpoint", self.srv["endpoint"], "--s3-path-style"]
        posix = os.path.join(self.root, "posix")

        def copy_bucket():
            shutil.rmtree(posix, ignore_errors=True)
            for key, _ in self.s3.list(self.bucket, "kv/"):
                path = os.path.join(posix, key[len("kv/"):])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(self.s3.get(self.bucket, key))

        copy_bucket()
        c3, r3, e3 = self.fsck(url, "--verify-data", *flags)
        cp, rp, ep = self.fsck(posix, "--verify-data")
        self.assertEqual((c3, cp), (0, 0), (r3, rp, e3, ep))
        self.assertEqual(r3["backing"], url)
        self.assertEqual(self.normalized(r3, url), self.normalized(rp, posix))
        strip = lambda r, root: json.loads(json.dumps([{k: v for k, v in n.items() if k != "owner"} for n in r["nodes"]])
                                           .replace(root, "ROOT"))
        self.assertEqual(strip(r3, url), strip(rp, posix))
        self.assertEqual(r3["nodes"][0]["live_files"], 6)

        # The same 8 KiB inside the first segment's first value, in the bucket and in the copy.
        seg = sorted(k for k, _ in self.s3.list(self.bucket, "kv/") if k.endswith(".kseg"))[0]
        data = bytearray(self.s3.get(self.bucket, seg))
        off = 1 << 20
        data[off:off + 8192] = bytes(b ^ 0xA5 for b in data[off:off + 8192])
        self.s3.put(self.bucket, seg, bytes(data))
        with open(os.path.join(posix, seg[len("kv/"):]), "r+b") as f:
            f.seek(off)
            f.write(bytes(data[off:off + 8192]))
        c3, r3, e3 = self.fsck(url, "--verify-data", *flags)
        cp, rp, ep = self.fsck(posix, "--verify-data")
        print("\nfsck of a corrupted segment object: exit %d, %s" % (c3, [(f["kind"], f["file"], f["offset"])
                                                                        for f in r3["findings"]]))
        self.assertEqual(c3, cp, (r3, rp))
        self.assertNotEqual(c3, 0, r3)
        self.assertTrue(r3["findings"], r3)
        self.assertEqual(self.normalized(r3, url), self.normalized(rp, posix))
        self.assertTrue(all(f["file"].startswith(url + "/.kvfs/v1/") for f in r3["findings"] if f["file"]), r3)

        # --repair: the same repairs on both; the repair journal is an object (a journal of a new generation).
        journals = lambda: sorted(k for k, _ in self.s3.list(self.bucket, "kv/") if "/journal-" in k)
        before = journals()
        c3, r3, e3 = self.fsck(url, "--verify-data", "--repair", *flags)
        cp, rp, ep = self.fsck(posix, "--verify-data", "--repair")
        self.assertEqual(c3, cp, (r3, rp, e3))
        norm = lambda r, root: [(f["kind"], f["repaired"], f["repair"]) for f in self.normalized(r, root)]
        self.assertEqual(norm(r3, url), norm(rp, posix))
        repaired = [f for f in r3["findings"] if f["repaired"]]
        if repaired:
            self.assertGreater(len(journals()), len(before), journals())
            c3b, r3b, _ = self.fsck(url, "--verify-data", *flags)
            cpb, rpb, _ = self.fsck(posix, "--verify-data")
            self.assertEqual(c3b, cpb)
            self.assertEqual(self.normalized(r3b, url), self.normalized(rpb, posix))
            self.assertEqual(r3b["repaired"], 0)
        # A mount from the bucket alone: every name it shows reads back byte-exact or fails with EIO; the
        # files the repair unlinked (their record damaged) are gone.
        unlinked = [f["path"] for f in r3["findings"] if f["kind"] == "dangling-entry" and f["repaired"]]
        b = self.node("b", "staging-b")
        with self.mount(b) as (mnt, _, _):
            for path in unlinked:
                self.assertFalse(os.path.exists(mnt + path), path)
            for name in sorted(os.listdir(os.path.join(mnt, "kv"))):
                rel = "kv/" + name
                try:
                    with open(os.path.join(mnt, rel), "rb") as f:
                        self.assertEqual(f.read(), files[rel], rel)
                except OSError as e:
                    self.assertEqual(e.errno, errno.EIO, rel)

    def test_node_list_and_retire_on_s3(self):
        """kvfs node list / retire --backing s3://...: the node's state, generation and bytes from the bucket
        alone; retire PUTs its RETIRED object; purge is refused on S3 (not built yet), nothing changed."""
        a = self.node("a", "staging-a")
        with self.mount(a, segment_size="8MiB") as (mnt, _, _):
            with open(os.path.join(mnt, "one.bin"), "wb") as f:
                f.write(chunk_bytes(1))
        url = "s3://%s/kv" % self.bucket
        flags = ["--backing", url, "--s3-endpoint", self.srv["endpoint"], "--s3-path-style"]
        node = lambda *args: subprocess.run([kvfs_binary(), "node"] + list(args) + flags, capture_output=True,
                                            text=True, timeout=120, env=self.env)
        r = node("list", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        (n,) = json.loads(r.stdout)
        self.assertEqual((n["node"], n["state"]), ("a", "released"), n)
        self.assertGreaterEqual(n["segment_bytes"], CHUNK)
        r = node("purge", "--node", "a", "--force")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("does not support S3", r.stderr)
        r = node("retire", "--node", "a")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("kv/.kvfs/v1/nodes/a/RETIRED", [k for k, _ in self.s3.list(self.bucket, "kv/")])
        r = node("list", "--json")
        self.assertEqual(json.loads(r.stdout)[0]["state"], "retired", r.stdout)
        r = subprocess.run([kvfs_binary(), "node", "list", "--backing", url], capture_output=True, text=True,
                           timeout=60, env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--s3-endpoint", r.stderr)

    def test_fsck_s3_truncated_segment_object_is_damage(self):
        """A sealed segment object cut short in the bucket (objects are uploaded whole, so no crash leaves
        one): kvfs-fsck s3://... reports segment-torn-tail as a truncated or damaged object, exit 1, and
        leaves it out of the note about what a crash leaves (that the next mount cuts it: no mount does);
        --repair journals the CUT and unlinks the files whose records were lost; a mount from the bucket
        then reads the others byte-exact."""
        if not os.path.exists(FSCK):
            self.skipTest("kvfs-fsck not built")
        a = self.node("a", "staging-a")
        files = {}
        with self.mount(a, segment_size="8MiB") as (mnt, _, _):
            os.makedirs(os.path.join(mnt, "kv"))
            for i in range(6):  # segments 1 (chunks 0-2) and 2 (3-5)
                rel = "kv/chunk-%03d.bin" % i
                with open(os.path.join(mnt, rel), "wb") as f:
                    f.write(chunk_bytes(i))
                files[rel] = chunk_bytes(i)
        url = "s3://%s/kv" % self.bucket
        flags = ["--s3-endpoint", self.srv["endpoint"], "--s3-path-style"]
        seg = sorted(k for k, _ in self.s3.list(self.bucket, "kv/") if k.endswith(".kseg"))[0]
        data = self.s3.get(self.bucket, seg)
        self.s3.put(self.bucket, seg, data[: len(data) // 2])  # inside the second chunk's record
        p = subprocess.run([FSCK, url] + flags, capture_output=True, text=True, timeout=300, env=self.env)
        print("\nfsck of a truncated segment object: exit %d\n%s" % (p.returncode, p.stdout))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        torn = [l for l in p.stdout.splitlines() if "segment-torn-tail" in l]
        self.assertEqual(len(torn), 1, p.stdout)
        self.assertIn("truncated or damaged object", torn[0])
        self.assertIn("damage in the bucket, not a crash's torn tail", torn[0])
        self.assertIn(url + "/.kvfs/v1/nodes/a/seg/", torn[0])
        self.assertNotIn("what a crash of the node leaves", p.stdout)
        c, rep, _ = self.fsck(url, "--repair", *flags)
        kinds = sorted((f["kind"], f["repaired"]) for f in rep["findings"] if f["severity"] == "problem")
        self.assertIn(("segment-torn-tail", True), kinds, rep)
        lost = sorted(f["path"] for f in rep["findings"] if f["kind"] == "dangling-entry" and f["repaired"])
        self.assertEqual(lost, ["/kv/chunk-001.bin", "/kv/chunk-002.bin"], rep)
        c, rep, _ = self.fsck(url, *flags)
        self.assertEqual((c, rep["problems"]), (0, 0), rep)
        b = self.node("b", "staging-b")
        with self.mount(b) as (mnt, _, _):
            self.assertEqual(sorted(os.listdir(os.path.join(mnt, "kv"))),
                             ["chunk-%03d.bin" % i for i in (0, 3, 4, 5)])
            for i in (0, 3, 4, 5):
                with open(os.path.join(mnt, "kv/chunk-%03d.bin" % i), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(i), i)

    def test_s3_errors_name_the_url_and_print_once(self):
        """Error text of the S3 CLI paths: virtual-hosted addressing against an IP endpoint (curl: could not
        resolve BUCKET.127.0.0.1) says to add --s3-path-style; a 403 of kvfs node list is printed once (was
        twice: the client's warning and the command's error); a second mount of a node in use names the
        node directory by its s3:// URL, not by the local staging path."""
        url = "s3://%s/kv" % self.bucket
        node = lambda env, *args: subprocess.run([kvfs_binary(), "node", "list", "--backing", url, "--s3-endpoint",
                                                  self.srv["endpoint"], "--backing-deadline-ms", "1500"] + list(args),
                                                 capture_output=True, text=True, timeout=120, env=env)
        r = node(self.env)  # no --s3-path-style: http://BUCKET.127.0.0.1:PORT/
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("Could not resolve host: %s.127.0.0.1" % self.bucket, r.stderr)
        self.assertIn("add --s3-path-style", r.stderr)
        r = node(dict(self.env, AWS_SECRET_ACCESS_KEY="wrong-secret"), "--s3-path-style")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertEqual(r.stderr.count("HTTP 403"), 1, r.stderr)  # not "403" alone: the port may hold it
        a, a2 = self.node("a", "staging-a"), self.node("a2", "staging-a2")
        with self.mount(a, node_id="a"):
            r = subprocess.run([kvfs_binary(), "mount", a2.mnt, "--backing", url, "--index-dir", a2.index,
                                "--node-id", "a", "--s3-endpoint", self.srv["endpoint"], "--s3-staging", a2.staging,
                                "--s3-path-style", "--foreground"], capture_output=True, text=True, timeout=120,
                               env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        (line,) = [l for l in r.stderr.splitlines() if "is in use" in l]
        self.assertIn("node 'a' is in use: node directory %s/.kvfs/v1/nodes/a is owned by" % url, line)
        self.assertNotIn(a2.staging, line)

    def test_fsck_s3_usage(self):
        if not os.path.exists(FSCK):
            self.skipTest("kvfs-fsck not built")
        r = subprocess.run([FSCK, "s3://%s/kv" % self.bucket], capture_output=True, text=True, timeout=60, env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--s3-endpoint", r.stderr)
        env = {k: v for k, v in self.env.items() if not k.startswith("AWS_")}
        env["HOME"] = self.root  # no ~/.aws/credentials there
        r = subprocess.run([FSCK, "s3://%s/kv" % self.bucket, "--s3-endpoint", self.srv["endpoint"]],
                           capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("no credentials", r.stderr)
        # a bucket that holds no kvfs backing: exit 2, as a directory without .kvfs
        r = subprocess.run([FSCK, "s3://%s/nothing-here" % self.bucket, "--s3-endpoint", self.srv["endpoint"],
                            "--s3-path-style"], capture_output=True, text=True, timeout=60, env=self.env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("'s3://%s/nothing-here' is not a kvfs backing" % self.bucket, r.stderr)
        self.assertNotIn("kvfs-fsck-staging", r.stderr)


# S3ToolsTest inherits S3MountTest's fixture, not its tests (each would run twice: every one added later
# was, until this loop replaced a list of names).
for _name in [n for n in dir(S3MountTest) if n.startswith("test_") and n not in S3ToolsTest.__dict__]:
    setattr(S3ToolsTest, _name, None)


def tearDownModule():
    stop_s3_server()


if __name__ == "__main__":
    unittest.main()
