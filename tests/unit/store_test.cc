// Store: the engine end to end over a real temp directory (records, journal, index, rebuild, crash).
#include "engine/store.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "blockstore/fault_env.h"
#include "index/index_db.h"
#include "index/journal.h"
#include "store_harness.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

// The shared harness (store_harness.h) with no heartbeat I/O in the middle of counted operations; files
// here live in any directory and carry an mtime.
class StoreTest : public testing_harness::StoreHarness {
 protected:
  StoreTest() { heartbeat_interval_ms_ = 3600 * 1000; }

  static std::string Pattern(size_t n, uint64_t seed) {
    std::string v(n, '\0');
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < n; i += 8) {
      uint64_t x = rng();
      memcpy(&v[i], &x, std::min<size_t>(8, n - i));
    }
    return v;
  }

  // Creates parent/name with content through the Store as the FUSE layer does: staged create, record,
  // commit.
  uint64_t WriteFile(uint64_t parent, const std::string& name, const std::string& content) {
    auto n = store_->CreateFile(parent, name, S_IFREG | 0644, 0, 0, false);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    Location loc;
    if (!content.empty()) {
      auto l = store_->WriteRecord(n->attr.ino, {content});
      EXPECT_TRUE(l.ok()) << l.status().ToString();
      loc = *l;
    }
    Attr a = n->attr;
    a.size = content.size();
    a.mtime_ns = 1234567890123;
    EXPECT_TRUE(store_->CommitFile(n->attr.ino, loc, a).ok());
    return n->attr.ino;
  }

  std::string ReadAll(uint64_t parent, const std::string& name) {
    auto n = store_->Lookup(parent, name);
    if (!n.ok()) return "<" + n.status().ToString() + ">";
    std::string out(n->attr.size, '\0');
    size_t got = 0;
    Status s = store_->Read(n->location, 0, out.size(), out.data(), &got);
    if (!s.ok()) return "<" + s.ToString() + ">";
    out.resize(got);
    return out;
  }

  std::map<std::string, DumpEntry> DumpIndex() {
    IndexDbOptions io;
    io.dir = index_;
    io.node_id = "node-a";
    auto idx = IndexDb::Open(io);
    EXPECT_TRUE(idx.ok()) << idx.status().ToString();
    auto d = (*idx)->DumpByPath();
    EXPECT_TRUE(d.ok());
    return *d;
  }
};

TEST_F(StoreTest, RoundTripsEveryRecordSize) {
  OpenStore();
  const std::vector<size_t> sizes = {0, 1, 4095, 4096, 4097, 147456, 2359296, 37748736};
  for (size_t i = 0; i < sizes.size(); ++i) WriteFile(kRootIno, "f" + std::to_string(i), Pattern(sizes[i], i));
  ASSERT_TRUE(store_->Sync().ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(ReadAll(kRootIno, "f" + std::to_string(i)) == Pattern(sizes[i], i)) << sizes[i];
  }
  // Partial reads at unaligned offsets.
  auto n = store_->Lookup(kRootIno, "f6");
  ASSERT_TRUE(n.ok());
  std::string part(100000, '\0');
  size_t got = 0;
  ASSERT_TRUE(store_->Read(n->location, 70001, part.size(), part.data(), &got).ok());
  EXPECT_EQ(got, part.size());
  EXPECT_TRUE(part == Pattern(2359296, 6).substr(70001, 100000));
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();

  OpenStore();  // clean reopen: the index is reused
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(ReadAll(kRootIno, "f" + std::to_string(i)) == Pattern(sizes[i], i)) << sizes[i];
  }
}

// ReadPinned hands out the verified bytes without a copy: the LRU value itself for values the cache
// loads whole (two reads share one buffer), a buffer of just the covering blocks for values too large
// for a cache shard; both through aligned reads (O_DIRECT on this disk file system).
// While the LRU has room, a loaded value enters it at once; once it is (7/8) full, a value read once
// stays out (probation, engine/read_admission.h) and enters only when read again from its start.
TEST_F(StoreTest, OnlyValuesReadTwiceEnterAFullLru) {
  OpenStore();  // 64 MiB cache: room for 24 values of 2.25 MiB below 7/8
  constexpr size_t kLen = 2359296;
  constexpr int kFiles = 27;
  std::vector<Node> nodes;
  for (int i = 0; i < kFiles; ++i) WriteFile(kRootIno, "c" + std::to_string(i), Pattern(kLen, 100 + i));
  ASSERT_TRUE(store_->Sync().ok());
  for (int i = 0; i < kFiles; ++i) {
    auto n = store_->Lookup(kRootIno, "c" + std::to_string(i));
    ASSERT_TRUE(n.ok());
    nodes.push_back(*n);
  }
  const StoreStats s0 = store_->GetStats();
  // One read of each, in three FUSE-sized requests.
  for (int i = 0; i < kFiles; ++i) {
    const std::string want = Pattern(kLen, 100 + i);
    for (uint64_t off = 0; off < kLen; off += 1u << 20) {
      PinnedBytes p;
      ASSERT_TRUE(store_->ReadPinned(nodes[i].location, off, 1u << 20, &p).ok());
      ASSERT_TRUE(std::string(p.data, p.len) == want.substr(off, p.len)) << i << " " << off;
    }
  }
  const StoreStats s1 = store_->GetStats();
  // Hits and misses per value read (the request at offset 0), not per request: 27 cold reads, 27 misses.
  EXPECT_EQ(s1.cache_misses - s0.cache_misses, uint64_t(kFiles));
  EXPECT_EQ(s1.cache_hits - s0.cache_hits, 0u);  // the 2nd and 3rd requests of a read count nothing
  EXPECT_EQ(s1.read_loaded_bytes - s0.read_loaded_bytes, uint64_t(kFiles) * kLen);  // per byte
  EXPECT_EQ(s1.probation_reads - s0.probation_reads, 2u * (kFiles - 24));
  EXPECT_GE(s1.cache_bytes, 24u * kLen);
  EXPECT_LT(s1.cache_bytes, 25u * kLen);
  EXPECT_EQ(s1.probation_bytes, uint64_t(kFiles - 24) * kLen);
  // Re-reads of the cached values from the start: one hit each, nothing loaded.
  PinnedBytes p;
  for (int i = 0; i < 24; ++i) {
    for (uint64_t off = 0; off < kLen; off += 1u << 20) {
      ASSERT_TRUE(store_->ReadPinned(nodes[i].location, off, 1u << 20, &p).ok());
    }
  }
  const StoreStats s1b = store_->GetStats();
  EXPECT_EQ(s1b.cache_hits - s1.cache_hits, 24u);
  EXPECT_EQ(s1b.cache_misses - s1.cache_misses, 0u);
  EXPECT_EQ(s1b.read_loaded_bytes - s1.read_loaded_bytes, 0u);
  // A second read from the start of a value on probation: promoted (a hit), now in the LRU.
  ASSERT_TRUE(store_->ReadPinned(nodes[kFiles - 1].location, 0, 1u << 20, &p).ok());
  const StoreStats s2 = store_->GetStats();
  EXPECT_EQ(s2.cache_hits - s1b.cache_hits, 1u);
  EXPECT_EQ(s2.probation_bytes, s1.probation_bytes - kLen);
  ASSERT_TRUE(store_->ReadPinned(nodes[kFiles - 1].location, 2u << 20, 1u << 20, &p).ok());
  EXPECT_TRUE(std::string(p.data, p.len) == Pattern(kLen, 100 + kFiles - 1).substr(2u << 20));
  EXPECT_EQ(store_->GetStats().cache_hits - s2.cache_hits, 0u);  // not from offset 0: not a value read
}

TEST_F(StoreTest, ReadPinnedServesCachedAndLargeValuesWithoutCopies) {
  StoreOptions o = Options();
  o.cache_size = 4ull << 20;  // 4 shards of 1 MiB: whole-value loads only up to 256 KiB
  auto st = Store::Open(o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  store_ = std::move(*st);
  WriteFile(kRootIno, "small", Pattern(147456, 1));
  WriteFile(kRootIno, "large", Pattern(2359296, 2));
  ASSERT_TRUE(store_->Sync().ok());
  auto small = store_->Lookup(kRootIno, "small");
  auto large = store_->Lookup(kRootIno, "large");
  ASSERT_TRUE(small.ok() && large.ok());
  PinnedBytes a, b;
  ASSERT_TRUE(store_->ReadPinned(small->location, 0, 200000, &a).ok());
  ASSERT_NE(a.owner, nullptr);
  ASSERT_EQ(a.len, 147456u);
  EXPECT_TRUE(std::string(a.data, a.len) == Pattern(147456, 1));
  ASSERT_TRUE(store_->ReadPinned(small->location, 4097, 10000, &b).ok());
  EXPECT_EQ(b.owner, a.owner);  // the cached value, not a copy
  EXPECT_EQ(b.data, a.data + 4097);
  EXPECT_EQ(b.len, 10000u);
  const std::string want = Pattern(2359296, 2);
  for (auto [off, len] : std::vector<std::pair<uint64_t, size_t>>{
           {0, 1u << 20}, {1u << 20, 1u << 20}, {2u << 20, 1u << 20}, {70001, 100000}, {2359290, 100}}) {
    PinnedBytes p;
    ASSERT_TRUE(store_->ReadPinned(large->location, off, len, &p).ok());
    ASSERT_NE(p.owner, nullptr);
    ASSERT_EQ(p.len, std::min<size_t>(len, want.size() - off)) << off;
    EXPECT_TRUE(std::string(p.data, p.len) == want.substr(off, p.len)) << off;
  }
  PinnedBytes past;
  ASSERT_TRUE(store_->ReadPinned(large->location, want.size(), 10, &past).ok());
  EXPECT_EQ(past.len, 0u);
}

// With a cache too small for 4 MiB pieces (32 MiB: 4 shards of 8 MiB, loads up to 2 MiB), a 36 MiB value
// is read block range by block range, one 1 MiB FUSE READ at a time: its record metadata (a 4.5 KiB
// checksum table: two reads when not cached) is read by the first request only, so 36 requests are 36
// backing reads in all, and the bytes read are the value plus one metadata prefix. The same through
// Read() (into the caller's buffer).
TEST_F(StoreTest, LargeValueRangeReadsReadTheRecordMetadataOnce) {
  StoreOptions o = Options();
  o.cache_size = 32ull << 20;
  auto st = Store::Open(o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  store_ = std::move(*st);
  constexpr size_t kLen = 37748736, kReq = 1u << 20;
  const std::string want = Pattern(kLen, 36);
  WriteFile(kRootIno, "big", want);
  ASSERT_TRUE(store_->Sync().ok());
  auto n = store_->Lookup(kRootIno, "big");
  ASSERT_TRUE(n.ok());
  const Location loc = n->location;
  const uint64_t meta_bytes = loc.value_offset - loc.record_offset;
  EXPECT_EQ(meta_bytes, 8192u);  // header + path + 576 checksums, 4 KiB aligned
  auto& c = Env::Posix()->counters();
  const uint64_t reads0 = c.read.load(), bytes0 = c.bytes_read.load();
  for (uint64_t off = 0; off < kLen; off += kReq) {
    PinnedBytes p;
    ASSERT_TRUE(store_->ReadPinned(loc, off, kReq, &p).ok());
    ASSERT_EQ(p.len, kReq);
    ASSERT_TRUE(std::string_view(p.data, p.len) == std::string_view(want).substr(off, kReq)) << off;
  }
  EXPECT_EQ(c.read.load() - reads0, kLen / kReq);
  EXPECT_EQ(c.bytes_read.load() - bytes0, kLen + meta_bytes);
  // Read() into an (unaligned) buffer, starting past the first block: every request one backing read
  // now that the metadata is known.
  std::string out(kReq + 1, '\0');
  const uint64_t reads1 = c.read.load();
  for (uint64_t off = 3 * kReq + 1; off + out.size() <= kLen; off += 8 * kReq) {
    size_t got = 0;
    ASSERT_TRUE(store_->Read(loc, off, out.size(), out.data(), &got).ok());
    ASSERT_EQ(got, out.size());
    ASSERT_TRUE(out == want.substr(off, out.size())) << off;
  }
  EXPECT_EQ(c.read.load() - reads1, 4u);  // offsets 3, 11, 19, 27 MiB (+1)
  // A first request past the first block reads the metadata (8 KiB, its length known from the
  // Location) in one read, then the blocks: 2 reads; the next request 1.
  const std::string want2 = Pattern(kLen, 37);
  WriteFile(kRootIno, "big2", want2);
  ASSERT_TRUE(store_->Sync().ok());
  auto n2 = store_->Lookup(kRootIno, "big2");
  ASSERT_TRUE(n2.ok());
  const uint64_t reads2 = c.read.load(), bytes2 = c.bytes_read.load();
  for (uint64_t off : {5 * kReq, 6 * kReq}) {
    PinnedBytes p;
    ASSERT_TRUE(store_->ReadPinned(n2->location, off, kReq, &p).ok());
    ASSERT_TRUE(std::string_view(p.data, p.len) == std::string_view(want2).substr(off, kReq)) << off;
  }
  EXPECT_EQ(c.read.load() - reads2, 3u);
  EXPECT_EQ(c.bytes_read.load() - bytes2, 2 * kReq + meta_bytes);
}

// A value over 8 MiB is loaded and cached in 4 MiB pieces (64 MiB cache: 16 MiB shards). The first
// 1 MiB request reads one piece with the record metadata (4 MiB + 8 KiB), not the whole 36 MiB; a read
// of the value in 36 requests is 9 backing reads of exactly the value's bytes; the pieces enter the LRU
// (it has room), so a second read costs no backing read. A request across a piece boundary reads
// just its blocks.
TEST_F(StoreTest, LargeValuesAreLoadedAndCachedInPieces) {
  OpenStore();
  constexpr size_t kLen = 37748736, kReq = 1u << 20, kPiece = 4u << 20;
  const std::string want = Pattern(kLen, 38);
  WriteFile(kRootIno, "big", want);
  ASSERT_TRUE(store_->Sync().ok());
  auto n = store_->Lookup(kRootIno, "big");
  ASSERT_TRUE(n.ok());
  const Location loc = n->location;
  const uint64_t meta_bytes = loc.value_offset - loc.record_offset;
  auto& c = Env::Posix()->counters();
  const StoreStats s0 = store_->GetStats();
  const uint64_t reads0 = c.read.load(), bytes0 = c.bytes_read.load();
  {
    PinnedBytes p;
    ASSERT_TRUE(store_->ReadPinned(loc, 0, kReq, &p).ok());
    ASSERT_EQ(p.len, kReq);
    ASSERT_TRUE(std::string_view(p.data, p.len) == std::string_view(want).substr(0, kReq));
    EXPECT_EQ(c.read.load() - reads0, 1u);
    EXPECT_EQ(c.bytes_read.load() - bytes0, kPiece + meta_bytes);
  }
  for (uint64_t off = kReq; off < kLen; off += kReq) {
    PinnedBytes p;
    ASSERT_TRUE(store_->ReadPinned(loc, off, kReq, &p).ok());
    ASSERT_EQ(p.len, kReq);
    ASSERT_TRUE(std::string_view(p.data, p.len) == std::string_view(want).substr(off, kReq)) << off;
  }
  EXPECT_EQ(c.read.load() - reads0, kLen / kPiece);
  EXPECT_EQ(c.bytes_read.load() - bytes0, kLen + meta_bytes);
  const StoreStats s1 = store_->GetStats();
  // One value read (from offset 0): one miss, whatever the number of pieces and requests.
  EXPECT_EQ(s1.cache_misses - s0.cache_misses, 1u);
  EXPECT_EQ(s1.cache_hits - s0.cache_hits, 0u);
  EXPECT_EQ(s1.read_loaded_bytes - s0.read_loaded_bytes, kLen);  // 9 pieces of 4 MiB
  EXPECT_GE(s1.cache_bytes, kLen);
  // Again, whole: every byte from the LRU.
  const uint64_t reads1 = c.read.load();
  std::string all(kLen, '\0');
  size_t got = 0;
  for (uint64_t off = 0; off < kLen; off += kReq) {
    ASSERT_TRUE(store_->Read(loc, off, kReq, all.data() + off, &got).ok());
    ASSERT_EQ(got, kReq);
  }
  EXPECT_TRUE(all == want);
  EXPECT_EQ(c.read.load() - reads1, 0u);
  EXPECT_EQ(store_->GetStats().cache_hits - s1.cache_hits, 1u);  // the second value read: a hit
  // Across a piece boundary: the covering blocks only (one read, the metadata is known).
  PinnedBytes x;
  ASSERT_TRUE(store_->ReadPinned(loc, 2 * kPiece - 100, 300, &x).ok());
  ASSERT_EQ(x.len, 300u);
  EXPECT_TRUE(std::string_view(x.data, x.len) == std::string_view(want).substr(2 * kPiece - 100, 300));
  EXPECT_EQ(c.read.load() - reads1, 1u);
  // The value's last byte (a request past the end is cut to it).
  PinnedBytes last;
  ASSERT_TRUE(store_->ReadPinned(loc, kLen - 1, 10, &last).ok());
  ASSERT_EQ(last.len, 1u);
  EXPECT_EQ(last.data[0], want[kLen - 1]);
}

TEST_F(StoreTest, NamespaceOperationsCostNoBackingMetadataOps) {
  OpenStore();
  ASSERT_TRUE(store_->Sync().ok());
  auto& c = Env::Posix()->counters();
  const uint64_t meta0 = c.MetadataOps(), syncs0 = c.sync.load();
  auto d = store_->Mkdir(kRootIno, "d", S_IFDIR | 0755, 0, 0);
  ASSERT_TRUE(d.ok());
  for (int i = 0; i < 250; ++i) {
    std::string name = "k" + std::to_string(i);
    EXPECT_TRUE(store_->Lookup(d->attr.ino, name).status().IsNotFound());
    auto f = store_->CreateFile(d->attr.ino, name + ".tmp", S_IFREG | 0644, 0, 0, true);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(store_->Rename(d->attr.ino, name + ".tmp", d->attr.ino, name, 0, nullptr).ok());
    uint64_t ino = 0;
    ASSERT_TRUE(store_->Unlink(d->attr.ino, name, &ino).ok());
    EXPECT_EQ(ino, f->attr.ino);
  }
  // 1,000 lookups/creates/renames/unlinks: no open, stat, mkdir, rename or unlink on the backing store.
  EXPECT_EQ(c.MetadataOps() - meta0, 0u);
  EXPECT_LE(c.sync.load() - syncs0, 10u);
}

TEST_F(StoreTest, RenameUnlinkAndDirectoriesSurviveRebuild) {
  OpenStore();
  auto d = store_->Mkdir(kRootIno, "dir", S_IFDIR | 0755, 1, 2);
  ASSERT_TRUE(d.ok());
  auto sub = store_->Mkdir(d->attr.ino, "sub", S_IFDIR | 0700, 1, 2);
  ASSERT_TRUE(sub.ok());
  WriteFile(d->attr.ino, "a.tmp", Pattern(147456, 1));
  ASSERT_TRUE(store_->Rename(d->attr.ino, "a.tmp", d->attr.ino, "a", 0, nullptr).ok());
  WriteFile(d->attr.ino, "b", Pattern(5000, 2));
  WriteFile(sub->attr.ino, "c", Pattern(70000, 3));
  WriteFile(kRootIno, "gone", Pattern(10, 4));
  ASSERT_TRUE(store_->Unlink(kRootIno, "gone", nullptr).ok());
  // Rename over an existing committed file replaces it.
  WriteFile(d->attr.ino, "b.new", Pattern(6000, 5));
  uint64_t replaced = 0;
  ASSERT_TRUE(store_->Rename(d->attr.ino, "b.new", d->attr.ino, "b", 0, &replaced).ok());
  EXPECT_NE(replaced, 0u);
  auto b = store_->Lookup(d->attr.ino, "b");
  ASSERT_TRUE(b.ok());
  Attr a;
  a.mode = 0600;
  a.uid = 7;
  ASSERT_TRUE(store_->SetAttr(b->attr.ino, a, kSetMode | kSetUid).ok());
  ASSERT_TRUE(store_->SetXattr(b->attr.ino, "user.k", "v1", 0).ok());
  auto l = store_->Symlink(kRootIno, "link", "dir/b", 0, 0);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  auto online = DumpIndex();

  fs::remove_all(index_);  // the index is a cache: rebuild it from the backing directory alone
  OpenStore();
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  auto rebuilt = DumpIndex();
  EXPECT_EQ(online.size(), rebuilt.size());
  EXPECT_TRUE(online == rebuilt);
  for (const auto& [path, e] : online) {
    auto it = rebuilt.find(path);
    ASSERT_NE(it, rebuilt.end()) << path;
    EXPECT_TRUE(it->second == e) << path;
  }
  EXPECT_EQ(online.count("/gone"), 0u);
  EXPECT_EQ(online.count("/dir/a.tmp"), 0u);
  ASSERT_EQ(online.count("/dir/b"), 1u);
  EXPECT_EQ(online["/dir/b"].size, 6000u);
  EXPECT_EQ(online["/dir/b"].mode & 07777, 0600u);
  EXPECT_EQ(online["/dir/b"].uid, 7u);
  EXPECT_EQ(online["/dir/b"].xattrs["user.k"], "v1");
  EXPECT_EQ(online["/link"].symlink, "dir/b");

  OpenStore();
  auto dir = store_->Lookup(kRootIno, "dir");
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(ReadAll(dir->attr.ino, "a") == Pattern(147456, 1));
  EXPECT_TRUE(ReadAll(dir->attr.ino, "b") == Pattern(6000, 5));
}

// breaker-1 item 1: a staged file renamed over a committed one journals nothing (its PUT replaces the
// destination for peers in one step); when it is unlinked or renamed away before that commit, the
// replaced file's removal must still be journaled, or a rebuilt index (and peers) resurrect it.
TEST_F(StoreTest, StagedReplacementDiscardedBeforeCommitJournalsTheRemoval) {
  OpenStore();
  WriteFile(kRootIno, "u", Pattern(100, 1));
  WriteFile(kRootIno, "m", Pattern(200, 2));
  WriteFile(kRootIno, "dst", Pattern(300, 3));
  auto staged = [&](const std::string& name) {
    auto n = store_->CreateFile(kRootIno, name, S_IFREG | 0644, 0, 0, false);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n->attr.ino;
  };
  // unlink variant
  staged("u.t");
  ASSERT_TRUE(store_->Rename(kRootIno, "u.t", kRootIno, "u", 0, nullptr).ok());
  ASSERT_TRUE(store_->Unlink(kRootIno, "u", nullptr).ok());
  // rename-away variant, then the moved file commits under its new name over another committed file
  uint64_t m = staged("m.t");
  ASSERT_TRUE(store_->Rename(kRootIno, "m.t", kRootIno, "m", 0, nullptr).ok());
  ASSERT_TRUE(store_->Rename(kRootIno, "m", kRootIno, "dst", 0, nullptr).ok());
  auto loc = store_->WriteRecord(m, {Pattern(400, 4)});
  ASSERT_TRUE(loc.ok());
  Attr a;
  a.mode = S_IFREG | 0644;
  a.size = 400;
  ASSERT_TRUE(store_->CommitFile(m, *loc, a).ok());
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  auto online = DumpIndex();
  fs::remove_all(index_);
  OpenStore();
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  auto rebuilt = DumpIndex();
  EXPECT_TRUE(online == rebuilt);
  EXPECT_EQ(rebuilt.count("/u"), 0u);
  EXPECT_EQ(rebuilt.count("/m"), 0u);
  ASSERT_EQ(rebuilt.count("/dst"), 1u);
  EXPECT_EQ(rebuilt["/dst"].size, 400u);
}

// breaker-1 item 4: xattrs set while a file is staged (open for writing, a temp before its rename) reach
// the journal with the file's PUT; a new version of a committed file keeps them in a rebuilt index too.
// link(2) (docs/semantics.md §2 "link"): a second committed file over the same record, from a staged
// version's record (the publish: temp unlinked before its commit) or from committed content; EEXIST on
// an existing name; the record is live while any name refers to it; both survive a rebuild.
TEST_F(StoreTest, LinkSharesTheRecordUntilTheLastNameGoes) {
  OpenStore();
  const std::string c1 = Pattern(70000, 1), c2 = Pattern(5000, 2);
  auto t = store_->CreateFile(kRootIno, "k.tmp", S_IFREG | 0644, 0, 0, true);
  ASSERT_TRUE(t.ok());
  auto l1 = store_->WriteRecord(t->attr.ino, {c1});
  ASSERT_TRUE(l1.ok());
  Attr a1 = t->attr;
  a1.size = c1.size();
  ASSERT_TRUE(store_->SetXattr(t->attr.ino, "user.k", "v", 0).ok());
  auto f = store_->Link(t->attr.ino, &*l1, &a1, kRootIno, "k");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->committed);
  EXPECT_NE(f->attr.ino, t->attr.ino);
  EXPECT_EQ(store_->Link(t->attr.ino, &*l1, &a1, kRootIno, "k").status().ToErrno(), EEXIST);
  ASSERT_TRUE(store_->Unlink(kRootIno, "k.tmp", nullptr).ok());  // staged: dropped, nothing journaled
  EXPECT_TRUE(ReadAll(kRootIno, "k") == c1);
  auto x = store_->GetXattr(f->attr.ino, "user.k");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(*x, "v");
  // from committed content
  const uint64_t a = WriteFile(kRootIno, "a", c2);
  EXPECT_EQ(store_->Link(a, nullptr, nullptr, kRootIno, "k").status().ToErrno(), EEXIST);
  ASSERT_TRUE(store_->Link(a, nullptr, nullptr, kRootIno, "b").ok());
  EXPECT_EQ(store_->GetStats().live_bytes, c1.size() + 2 * c2.size());  // once per name
  ASSERT_TRUE(store_->Unlink(kRootIno, "a", nullptr).ok());
  EXPECT_TRUE(ReadAll(kRootIno, "b") == c2);
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  auto online = DumpIndex();
  fs::remove_all(index_);
  OpenStore();
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  auto rebuilt = DumpIndex();
  EXPECT_TRUE(online == rebuilt);
  EXPECT_EQ(rebuilt.count("/k.tmp") + rebuilt.count("/a"), 0u);
  OpenStore();
  EXPECT_TRUE(ReadAll(kRootIno, "k") == c1);
  EXPECT_TRUE(ReadAll(kRootIno, "b") == c2);
  ASSERT_TRUE(store_->Unlink(kRootIno, "k", nullptr).ok());
  ASSERT_TRUE(store_->Unlink(kRootIno, "b", nullptr).ok());
  const StoreStats st = store_->GetStats();
  EXPECT_EQ(st.live_bytes, 0u);
  ASSERT_FALSE(st.nodes.empty());
  EXPECT_EQ(st.nodes.front().live_bytes, 0u);  // every segment's bytes are dead
}

TEST_F(StoreTest, XattrsOfStagedFilesAndNewVersionsSurviveRebuild) {
  OpenStore();
  auto stage = [&](const std::string& name, const std::string& content) {
    auto n = store_->CreateFile(kRootIno, name, S_IFREG | 0644, 0, 0, false);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    auto l = store_->WriteRecord(n->attr.ino, {content});
    EXPECT_TRUE(l.ok());
    return std::make_pair(n->attr.ino, *l);
  };
  auto [s, sloc] = stage("staged", Pattern(100, 1));
  ASSERT_TRUE(store_->SetXattr(s, "user.k", "v1", 0).ok());
  ASSERT_TRUE(store_->SetXattr(s, "user.gone", "x", 0).ok());
  ASSERT_TRUE(store_->RemoveXattr(s, "user.gone").ok());
  Attr a;
  a.mode = S_IFREG | 0644;
  a.size = 100;
  ASSERT_TRUE(store_->CommitFile(s, sloc, a).ok());
  auto [t, tloc] = stage("f.tmp", Pattern(200, 2));
  ASSERT_TRUE(store_->SetXattr(t, "user.t", "tv", 0).ok());
  ASSERT_TRUE(store_->Rename(kRootIno, "f.tmp", kRootIno, "f", 0, nullptr).ok());
  a.size = 200;
  ASSERT_TRUE(store_->CommitFile(t, tloc, a).ok());
  // a new version of f (what an O_TRUNC rewrite does): a fresh number that keeps the xattrs, a new PUT
  auto moved = store_->Renumber(t);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  auto l3 = store_->WriteRecord(moved->attr.ino, {Pattern(300, 3)});
  ASSERT_TRUE(l3.ok());
  a.size = 300;
  ASSERT_TRUE(store_->CommitFile(moved->attr.ino, *l3, a).ok());
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  auto online = DumpIndex();
  fs::remove_all(index_);
  OpenStore();
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  auto rebuilt = DumpIndex();
  EXPECT_TRUE(online == rebuilt);
  ASSERT_EQ(rebuilt.count("/staged"), 1u);
  EXPECT_EQ(rebuilt["/staged"].xattrs, (std::map<std::string, std::string>{{"user.k", "v1"}}));
  ASSERT_EQ(rebuilt.count("/f"), 1u);
  EXPECT_EQ(rebuilt["/f"].size, 300u);
  EXPECT_EQ(rebuilt["/f"].xattrs, (std::map<std::string, std::string>{{"user.t", "tv"}}));
}

// docs/design.md §3: before a new version of a committed file, the FUSE layer moves it to a fresh inode number.
TEST_F(StoreTest, RenumberMovesACommittedFileToAFreshInode) {
  OpenStore();
  auto d = store_->Mkdir(kRootIno, "dir", S_IFDIR | 0755, 0, 0);
  ASSERT_TRUE(d.ok());
  uint64_t old_ino = WriteFile(d->attr.ino, "f", Pattern(70000, 1));
  ASSERT_TRUE(store_->SetXattr(old_ino, "user.k", "v", 0).ok());
  std::vector<DirEntry> before;
  ASSERT_TRUE(store_->ReadDir(d->attr.ino, 0, [&](const DirEntry& e) { before.push_back(e); return true; }).ok());
  ASSERT_EQ(before.size(), 1u);
  ASSERT_TRUE(store_->Sync().ok());  // the group commit has journaled mkdir/put/setxattr: count from here
  StoreStats s0 = store_->GetStats();
  const uint64_t journal0 = s0.journal_entries;

  auto n = store_->Renumber(old_ino);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  const uint64_t new_ino = n->attr.ino;
  EXPECT_GT(new_ino, old_ino);
  EXPECT_TRUE(store_->GetInode(old_ino).status().IsNotFound());
  auto l = store_->Lookup(d->attr.ino, "f");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->attr.ino, new_ino);
  EXPECT_EQ(l->attr.size, 70000u);
  EXPECT_TRUE(l->committed);
  EXPECT_TRUE(l->location == n->location);
  EXPECT_EQ(ReadAll(d->attr.ino, "f"), Pattern(70000, 1));
  auto x = store_->GetXattr(new_ino, "user.k");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(*x, "v");
  EXPECT_TRUE(store_->GetXattr(old_ino, "user.k").status().IsNotFound());
  std::vector<DirEntry> after;
  ASSERT_TRUE(store_->ReadDir(d->attr.ino, 0, [&](const DirEntry& e) { after.push_back(e); return true; }).ok());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].ino, new_ino);
  EXPECT_EQ(after[0].cookie, before[0].cookie);  // a listing in progress neither skips nor repeats it
  StoreStats s1 = store_->GetStats();
  EXPECT_EQ(s1.files, s0.files);
  EXPECT_EQ(s1.live_bytes, s0.live_bytes);
  EXPECT_EQ(s1.journal_entries, journal0);  // content and path unchanged: nothing journaled
  // Errors: gone, a directory, a staged file.
  EXPECT_TRUE(store_->Renumber(old_ino).status().IsNotFound());
  EXPECT_EQ(store_->Renumber(d->attr.ino).status().ToErrno(), EINVAL);
  auto staged = store_->CreateFile(kRootIno, "staged", S_IFREG | 0644, 0, 0, false);
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(store_->Renumber(staged->attr.ino).status().ToErrno(), EINVAL);
  // Undo (to = the old number, now unused): the name, xattrs and content move back.
  EXPECT_EQ(store_->Renumber(new_ino, staged->attr.ino).status().ToErrno(), EINVAL);  // number in use
  auto back = store_->Renumber(new_ino, old_ino);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attr.ino, old_ino);
  EXPECT_TRUE(store_->GetInode(new_ino).status().IsNotFound());
  ASSERT_TRUE(store_->Lookup(d->attr.ino, "f").ok());
  EXPECT_EQ(store_->Lookup(d->attr.ino, "f")->attr.ino, old_ino);
  EXPECT_EQ(ReadAll(d->attr.ino, "f"), Pattern(70000, 1));
  ASSERT_TRUE(store_->GetXattr(old_ino, "user.k").ok());
  EXPECT_EQ(*store_->GetXattr(old_ino, "user.k"), "v");
  EXPECT_EQ(store_->GetStats().journal_entries, journal0);
  n = store_->Renumber(old_ino, new_ino);  // and forth again: the rest of the test uses new_ino
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->attr.ino, new_ino);
  // A new version committed under the new number; remount (index kept) and rebuild keep the content.
  Location loc = *store_->WriteRecord(new_ino, {Pattern(3000, 2)});
  Attr a = l->attr;
  a.size = 3000;
  ASSERT_TRUE(store_->CommitFile(new_ino, loc, a).ok());
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  OpenStore();
  auto dir = store_->Lookup(kRootIno, "dir");
  ASSERT_TRUE(dir.ok());
  auto r = store_->Lookup(dir->attr.ino, "f");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->attr.ino, new_ino);  // numbers are kept by the index across a clean remount
  EXPECT_EQ(ReadAll(dir->attr.ino, "f"), Pattern(3000, 2));
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  fs::remove_all(index_);  // rebuilt from the journals: same content, numbers assigned afresh
  OpenStore();
  dir = store_->Lookup(kRootIno, "dir");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(ReadAll(dir->attr.ino, "f"), Pattern(3000, 2));
}

TEST_F(StoreTest, UncleanShutdownRebuildsAndDropsStagedFiles) {
  OpenStore();
  WriteFile(kRootIno, "kept", Pattern(9000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  auto staged = store_->CreateFile(kRootIno, "staged.tmp", S_IFREG | 0644, 0, 0, false);
  ASSERT_TRUE(staged.ok());
  store_.reset();  // no Close: a crash of the mount
  OpenStore();
  EXPECT_TRUE(ReadAll(kRootIno, "kept") == Pattern(9000, 1));
  EXPECT_TRUE(store_->Lookup(kRootIno, "staged.tmp").status().IsNotFound());
}

// Power cut: every write that was not synced is dropped. Files whose Sync returned survive
// byte-identical; nothing in the recovered index points at record bytes that are missing.
TEST_F(StoreTest, PowerCutLosesOnlyUnacknowledgedFiles) {
  for (int round = 0; round < 5; ++round) {
    FaultInjectionEnv env(Env::Posix());
    OpenStore(&env);
    std::map<std::string, std::string> acked;
    std::mt19937 rng(round);
    const int n = 40;
    for (int i = 0; i < n; ++i) {
      std::string name = "r" + std::to_string(round) + "-" + std::to_string(i);
      std::string content = Pattern(4096 * (1 + rng() % 40) + rng() % 4096, round * 1000 + i);
      WriteFile(kRootIno, name, content);
      if (rng() % 4 == 0) {
        ASSERT_TRUE(store_->Sync().ok());
        acked[name] = content;
        // Everything written before this Sync is acknowledged too.
      }
    }
    // Crash: stop the store without Close, then drop every unsynced write.
    store_.reset();
    ASSERT_TRUE(env.DropUnsyncedData().ok());
    OpenStore(&env);
    for (const auto& [name, content] : acked) EXPECT_TRUE(ReadAll(kRootIno, name) == content) << name;
    // Whatever survived beyond the acknowledged files reads back whole and correct (never garbage).
    std::vector<std::string> names;
    ASSERT_TRUE(store_->ReadDir(kRootIno, 0, [&](const DirEntry& e) {
      names.push_back(e.name);
      return true;
    }).ok());
    for (const auto& name : names) {
      std::string got = ReadAll(kRootIno, name);
      EXPECT_NE(got.substr(0, 1), "<") << name << " " << got.substr(0, 200);
    }
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
  }
}

// docs/design.md §7 invariant 1: a file committed more than one group-commit interval before a power cut
// survives it even though nobody called Sync.
TEST_F(StoreTest, GroupCommitMakesFilesDurableWithoutSync) {
  FaultInjectionEnv env(Env::Posix());
  OpenStore(&env);
  WriteFile(kRootIno, "quiet", Pattern(20000, 9));
  const uint64_t syncs0 = env.counters().sync.load();
  // Wait for the group commit (interval 5 ms) to sync record and journal entry on its own.
  for (int i = 0; i < 200 && env.counters().sync.load() < syncs0 + 2; ++i) usleep(10000);
  usleep(50000);
  store_.reset();
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  OpenStore(&env);
  EXPECT_TRUE(ReadAll(kRootIno, "quiet") == Pattern(20000, 9));
  store_.reset();  // before env goes away
}

// A torn journal tail (a crash mid-append) is cut logically with one CUT entry, never truncated, and the
// cut is not repeated by later restarts.
TEST_F(StoreTest, TornJournalTailIsCutOnce) {
  OpenStore();
  WriteFile(kRootIno, "before", Pattern(5000, 1));
  ASSERT_TRUE(store_->Sync().ok());
  store_.reset();  // crash
  const std::string node_dir = backing_ + "/.kvfs/v1/nodes/node-a";
  std::vector<JournalFile> files;
  ASSERT_TRUE(ListJournalFiles(Env::Posix(), node_dir, &files).ok());
  ASSERT_FALSE(files.empty());
  const std::string torn = files.back().path;
  const auto size_before = fs::file_size(torn);
  {
    FILE* f = fopen(torn.c_str(), "a");
    fputs("\x01\x02partial-fragment", f);  // a torn fragment header + payload
    fclose(f);
  }
  for (int restart = 0; restart < 3; ++restart) {
    OpenStore();
    EXPECT_TRUE(ReadAll(kRootIno, "before") == Pattern(5000, 1));
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
    fs::remove_all(index_);  // force a rebuild each time
  }
  EXPECT_GT(fs::file_size(torn), size_before);  // nothing was truncated
  ASSERT_TRUE(ListJournalFiles(Env::Posix(), node_dir, &files).ok());
  int cuts = 0;
  for (const auto& f : files) {
    std::vector<std::pair<JournalEntry, JournalPosition>> entries;
    JournalReadReport rep;
    ASSERT_TRUE(ReadJournalFile(Env::Posix(), f.path, JournalReaderOptions{}, &entries, &rep).ok());
    for (const auto& [e, pos] : entries) {
      if (e.op == JournalOp::kCut) {
        ++cuts;
        EXPECT_EQ(e.cut_offset, size_before);
        EXPECT_NE(e.stamp, 0u);
      }
    }
  }
  EXPECT_EQ(cuts, 1);
}

// Two nodes over one backing directory (docs/design.md §5): what A commits, B reads after tailing A's journal;
// renames and unlinks travel both ways; B's listener hears which names changed.
TEST_F(StoreTest, PeersSeeEachOthersCommits) {
  StoreOptions oa = Options();
  oa.peer_poll_ms = 0;  // polls driven by the test
  auto a = Store::Open(oa);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  StoreOptions ob = oa;
  ob.node_id = "node-b";
  ob.index_dir = root_ + "/index-b";
  auto b = Store::Open(ob);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::vector<std::string> heard;
  (*b)->SetChangeListener([&](const PeerChanges& c) {
    for (const auto& n : c.names) heard.push_back(n.name);
  });

  store_ = std::move(*a);
  auto d = store_->Mkdir(kRootIno, "kv", S_IFDIR | 0755, 0, 0);
  ASSERT_TRUE(d.ok());
  auto f = store_->CreateFile(d->attr.ino, "c1.tmp", S_IFREG | 0644, 0, 0, true);
  ASSERT_TRUE(f.ok());
  auto loc = store_->WriteRecord(f->attr.ino, {Pattern(147456, 77)});
  ASSERT_TRUE(loc.ok());
  Attr attr = f->attr;
  attr.size = 147456;
  ASSERT_TRUE(store_->CommitFile(f->attr.ino, *loc, attr).ok());
  ASSERT_TRUE(store_->Rename(d->attr.ino, "c1.tmp", d->attr.ino, "c1", 0, nullptr).ok());
  ASSERT_TRUE(store_->Sync().ok());

  ASSERT_TRUE((*b)->RefreshPeers().ok());
  auto kv = (*b)->Lookup(kRootIno, "kv");
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  auto c1 = (*b)->Lookup(kv->attr.ino, "c1");
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  EXPECT_EQ(c1->attr.size, 147456u);
  EXPECT_TRUE((*b)->Lookup(kv->attr.ino, "c1.tmp").status().IsNotFound());
  std::string got(147456, '\0');
  size_t n = 0;
  ASSERT_TRUE((*b)->Read(c1->location, 0, got.size(), got.data(), &n).ok());
  EXPECT_EQ(n, got.size());
  EXPECT_TRUE(got == Pattern(147456, 77));
  EXPECT_NE(std::find(heard.begin(), heard.end(), "c1"), heard.end());

  // B renames, then unlinks; A sees both.
  ASSERT_TRUE((*b)->Rename(kv->attr.ino, "c1", kv->attr.ino, "c2", 0, nullptr).ok());
  ASSERT_TRUE((*b)->Sync().ok());
  ASSERT_TRUE(store_->RefreshPeers().ok());
  EXPECT_TRUE(store_->Lookup(d->attr.ino, "c1").status().IsNotFound());
  auto c2 = store_->Lookup(d->attr.ino, "c2");
  ASSERT_TRUE(c2.ok()) << c2.status().ToString();
  EXPECT_EQ(c2->location, *loc);
  ASSERT_TRUE((*b)->Unlink(kv->attr.ino, "c2", nullptr).ok());
  ASSERT_TRUE((*b)->Sync().ok());
  ASSERT_TRUE(store_->RefreshPeers().ok());
  EXPECT_TRUE(store_->Lookup(d->attr.ino, "c2").status().IsNotFound());
  // An older PUT cannot resurrect it on either side; polling again changes nothing.
  ASSERT_TRUE((*b)->RefreshPeers().ok());
  EXPECT_TRUE((*b)->Lookup(kv->attr.ino, "c2").status().IsNotFound());
  EXPECT_TRUE((*b)->Close().ok());
}

TEST_F(StoreTest, PeerThreadAppliesWithinAFewPollIntervals) {
  StoreOptions oa = Options();
  oa.peer_poll_ms = 20;
  auto a = Store::Open(oa);
  ASSERT_TRUE(a.ok());
  StoreOptions ob = oa;
  ob.node_id = "node-b";
  ob.index_dir = root_ + "/index-b";
  auto b = Store::Open(ob);
  ASSERT_TRUE(b.ok());
  store_ = std::move(*a);
  WriteFile(kRootIno, "shared", Pattern(4096, 3));
  ASSERT_TRUE(store_->Sync().ok());
  const auto t0 = std::chrono::steady_clock::now();
  Result<Node> seen = Status::NotFound("not yet");
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    seen = (*b)->Lookup(kRootIno, "shared");
    if (seen.ok()) break;
    usleep(5000);
  }
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->attr.size, 4096u);
  EXPECT_GE((*b)->GetStats().peer_entries_applied, 1u);
  EXPECT_TRUE((*b)->Close().ok());
}

TEST_F(StoreTest, BadBackingDirectoryIsAClearError) {
  StoreOptions o = Options();
  o.backing_dir = root_ + "/missing";
  auto s = Store::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("missing"), std::string::npos) << s.status().ToString();

  std::string file = root_ + "/file";
  close(open(file.c_str(), O_CREAT | O_WRONLY, 0644));
  o.backing_dir = file;
  s = Store::Open(o);
  ASSERT_FALSE(s.ok());

  fs::create_directories(backing_ + "/.kvfs/v1");
  {
    FILE* f = fopen((backing_ + "/.kvfs/v1/FORMAT").c_str(), "w");
    fputs("kvfs-format\nversion=99\nalignment=4096\n", f);
    fclose(f);
  }
  o = Options();
  s = Store::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("newer"), std::string::npos) << s.status().ToString();
}

TEST_F(StoreTest, SecondOpenOfALiveNodeIsBusy) {
  StoreOptions o = Options();
  o.force_takeover = false;
  auto a = Store::Open(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  StoreOptions o2 = o;
  o2.index_dir = root_ + "/index2";
  auto b = Store::Open(o2);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(b.status().IsBusy()) << b.status().ToString();
  ASSERT_TRUE((*a)->Close().ok());
}


// atime, relatime rules (docs/semantics.md §4 "Times"): a read of content whose atime is not after its
// mtime and ctime is noted, answered at once (PendingAtime), journaled as a SETATTR of atime alone and
// so kept by a clean reopen and by an index rebuilt from the journals; a read of content whose atime is
// already newer (and less than a day old) is not noted.
TEST_F(StoreTest, ReadsUpdateAtimeWithRelatimeRulesThroughTheJournal) {
  OpenStore();
  WriteFile(kRootIno, "a", Pattern(4096, 1));
  WriteFile(kRootIno, "b", Pattern(4096, 2));
  ASSERT_TRUE(store_->Sync().ok());
  auto a = store_->Lookup(kRootIno, "a");
  auto b = store_->Lookup(kRootIno, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  const Attr before = a->attr;
  EXPECT_EQ(store_->PendingAtime(before.ino), 0);
  const int64_t t0 = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_TRUE(store_->NoteRead(before.ino, before));
  const int64_t noted = store_->PendingAtime(before.ino);
  EXPECT_GE(noted, t0);
  EXPECT_FALSE(store_->NoteRead(before.ino, before));  // one note per file until it is journaled
  EXPECT_EQ(store_->PendingAtime(before.ino), noted);

  Attr recent = b->attr;  // read an hour ago, after its last change: relatime leaves it
  recent.mtime_ns = recent.ctime_ns = t0 - 2 * 3600ll * 1000000000;
  recent.atime_ns = t0 - 3600ll * 1000000000;
  EXPECT_FALSE(store_->NoteRead(recent.ino, recent));
  recent.atime_ns = t0 - 25 * 3600ll * 1000000000;  // a day old: updated again
  recent.mtime_ns = recent.ctime_ns = t0 - 26 * 3600ll * 1000000000;
  EXPECT_TRUE(store_->NoteRead(recent.ino, recent));
  const int64_t noted_b = store_->PendingAtime(recent.ino);

  CloseStore();  // journals the notes
  OpenStore();   // the index is reused
  a = store_->Lookup(kRootIno, "a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->attr.atime_ns, noted);
  EXPECT_EQ(a->attr.mtime_ns, before.mtime_ns);
  EXPECT_EQ(a->attr.ctime_ns, before.ctime_ns);  // an atime update is not a change
  EXPECT_EQ(store_->PendingAtime(a->attr.ino), 0);
  EXPECT_FALSE(store_->NoteRead(a->attr.ino, a->attr));  // atime is now after mtime and ctime
  EXPECT_EQ(store_->GetStats().atime_updates, 0u);       // counted per mount
  CloseStore();

  fs::remove_all(index_);  // rebuilt from the journals (and the snapshot): the SETATTRs are in them
  OpenStore();
  a = store_->Lookup(kRootIno, "a");
  b = store_->Lookup(kRootIno, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->attr.atime_ns, noted);
  EXPECT_EQ(b->attr.atime_ns, noted_b);
  EXPECT_EQ(ReadAll(kRootIno, "a"), Pattern(4096, 1));
}

// StoreOptions::atime off (-o noatime): nothing is noted.
TEST_F(StoreTest, NoatimeNotesNothing) {
  StoreOptions o = Options();
  o.atime = false;
  auto s = Store::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(*s);
  WriteFile(kRootIno, "a", Pattern(100, 1));
  auto a = store_->Lookup(kRootIno, "a");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(store_->NoteRead(a->attr.ino, a->attr));
  EXPECT_EQ(store_->PendingAtime(a->attr.ino), 0);
}

// An index is tied to the backing store it was built for (FORMAT's id): after the backing is wiped and
// formatted again, the old index is rebuilt, never served over the new segments (before: its names
// came back with the bytes of the new files at their Locations).
TEST_F(StoreTest, IndexOfAWipedBackingIsRebuilt) {
  OpenStore();
  WriteFile(kRootIno, "a", Pattern(147456, 1));
  WriteFile(kRootIno, "b", Pattern(147456, 2));
  CloseStore();
  fs::remove_all(backing_);
  fs::create_directories(backing_);
  OpenStore();  // the same index dir, a new FORMAT
  EXPECT_TRUE(store_->Lookup(kRootIno, "a").status().IsNotFound());
  WriteFile(kRootIno, "c", Pattern(147456, 3));
  WriteFile(kRootIno, "d", Pattern(147456, 4));
  CloseStore();
  OpenStore();
  EXPECT_TRUE(store_->Lookup(kRootIno, "a").status().IsNotFound());
  EXPECT_TRUE(store_->Lookup(kRootIno, "b").status().IsNotFound());
  EXPECT_EQ(ReadAll(kRootIno, "c"), Pattern(147456, 3));
  EXPECT_EQ(ReadAll(kRootIno, "d"), Pattern(147456, 4));
}

}  // namespace
}  // namespace kvfs
