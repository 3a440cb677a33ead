// Journal checkpoints: snapshot format (index/snapshot.h), replay from snapshots (index/replay.h),
// retirement (engine/checkpoint.h) and the Store's use of them (peers re-reading snapshots, purged nodes).
#include <sys/sysmacros.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>
#include <chrono>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "blockstore/node_dir.h"
#include "engine/checkpoint.h"
#include "index/fsck.h"
#include "index/index_db.h"
#include "index/replay.h"
#include "index/snapshot.h"
#include "engine/store.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/kvfs-snapshot-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    backing_ = root_ + "/backing";
    fs::create_directories(backing_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Dir() {
    fs::create_directories(root_ + "/snap");
    return root_ + "/snap";
  }

  static std::vector<JournalEntry> SampleEntries(size_t n) {
    std::vector<JournalEntry> v;
    EntryAttrs dir{S_IFDIR | 0750, 1, 2, 0, 1, 2, 3};
    v.push_back(JournalEntry::Mkdir("/kv", dir, 0));
    for (size_t i = 0; i < n; i++) {
      const std::string p = "/kv/" + std::string(80, 'a' + i % 26) + "-" + std::to_string(i);
      EntryAttrs a{S_IFREG | 0644, 1000, 1000, 147456 + i, 10, 20, 30};
      Location loc;
      loc.segment = SegmentId{"node-a", 3, i / 100};
      loc.record_offset = 4096 * (i % 100);
      loc.value_offset = loc.record_offset + 4096;
      loc.length = a.size;
      v.push_back(JournalEntry::Put(p, loc, a, 1000000 + i));
      if (i % 7 == 0) v.push_back(JournalEntry::Xattr(p, "user.k", "v" + std::to_string(i), false, 1000000 + i));
      if (i % 5 == 0) v.push_back(JournalEntry::Unlink(p + ".gone", 900000 + i));
    }
    v.push_back(JournalEntry::Symlink("/kv/link", "target", EntryAttrs{S_IFLNK | 0777, 0, 0, 6, 0, 0, 0}, 5));
    v.push_back(JournalEntry::Seal(SegmentId{"node-a", 3, 0}, 0));
    v.push_back(JournalEntry::Drop(SegmentId{"node-a", 2, 9}, 0));
    v.push_back(JournalEntry::Cut(FileRef{FileRef::Kind::kSegment, "node-a", 2, 4}, 90112, 0));  // version 2
    return v;
  }

  std::string WriteSample(const std::vector<JournalEntry>& entries, uint64_t gen = 3, uint64_t num = 7) {
    auto w = SnapshotWriter::Create(Env::Posix(), Dir(), "node-a", gen, num);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& e : entries) EXPECT_TRUE((*w)->Add(e).ok());
    EXPECT_TRUE((*w)->Finish().ok());
    return (*w)->final_path();
  }

  static std::string ReadAll(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static void WriteAll(const std::string& p, const std::string& d) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << d;
  }

  std::string root_, backing_;
};

TEST_F(SnapshotTest, RoundTrip) {
  auto entries = SampleEntries(5000);  // > 256 KiB: several chunks
  const std::string path = WriteSample(entries);
  EXPECT_EQ(fs::path(path).filename().string(), SnapshotFileName(3, 7));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::vector<JournalEntry> got;
  SnapshotInfo info;
  Status s = ReadSnapshot(Env::Posix(), path, "node-a",
                          [&](const JournalEntry& e) {
                            got.push_back(e);
                            return Status::OK();
                          },
                          &info);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(got.size(), entries.size());
  for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], entries[i]) << "entry " << i;
  EXPECT_EQ(info.node, "node-a");
  EXPECT_EQ(info.generation, 3u);
  EXPECT_EQ(info.number, 7u);
  EXPECT_EQ(info.entries, entries.size());
  EXPECT_GT(info.chunks, 1u);
  EXPECT_EQ(info.max_stamp, 1000000u + 4999);
  EXPECT_EQ(info.file_size, fs::file_size(path));
  SnapshotInfo vinfo;
  EXPECT_TRUE(VerifySnapshot(Env::Posix(), path, "", &vinfo).ok());
  EXPECT_EQ(vinfo.entries, entries.size());

  // An empty snapshot is valid too.
  const std::string empty = WriteSample({}, 3, 8);
  uint64_t calls = 0;
  EXPECT_TRUE(ReadSnapshot(Env::Posix(), empty, "node-a", [&](const JournalEntry&) {
                calls++;
                return Status::OK();
              }).ok());
  EXPECT_EQ(calls, 0u);
}

TEST_F(SnapshotTest, AnyDamageIsCorruptionAndDeliversNoEntry) {
  const std::string path = WriteSample(SampleEntries(3000));
  const std::string good = ReadAll(path);
  auto expect_refused = [&](const std::string& what) {
    uint64_t calls = 0;
    Status s = ReadSnapshot(Env::Posix(), path, "node-a", [&](const JournalEntry&) {
      calls++;
      return Status::OK();
    });
    EXPECT_TRUE(s.IsCorruption()) << what << ": " << s.ToString();
    EXPECT_EQ(calls, 0u) << what << ": entries were delivered from a damaged snapshot";
  };
  // One flipped byte anywhere (header, chunk headers, payloads, trailer).
  for (size_t off = 0; off < good.size(); off += good.size() / 97 + 1) {
    std::string bad = good;
    bad[off] ^= 0x20;
    WriteAll(path, bad);
    expect_refused("flip at " + std::to_string(off));
  }
  std::string bad = good;
  bad[good.size() - 1] ^= 1;
  WriteAll(path, bad);
  expect_refused("flip in the trailer checksum");
  WriteAll(path, good.substr(0, good.size() - 1));
  expect_refused("truncated by one byte");
  WriteAll(path, good.substr(0, good.size() / 2));
  expect_refused("truncated to half");
  WriteAll(path, good + std::string(4096, '\0'));
  expect_refused("zeros appended");
  WriteAll(path, "");
  expect_refused("empty file");
  // Intact again: reads; another node's name is refused.
  WriteAll(path, good);
  EXPECT_TRUE(ReadSnapshot(Env::Posix(), path, "node-a", [](const JournalEntry&) { return Status::OK(); }).ok());
  EXPECT_TRUE(ReadSnapshot(Env::Posix(), path, "node-b", [](const JournalEntry&) { return Status::OK(); })
                  .IsCorruption());
  // A valid snapshot under another file name (misplaced) is refused.
  const std::string moved = Dir() + "/" + SnapshotFileName(3, 9);
  fs::copy_file(path, moved);
  EXPECT_TRUE(VerifySnapshot(Env::Posix(), moved, "", nullptr).IsCorruption());
}

// Version 1 (before segment CUTs, issue #6) is still read; a CUT inside a version-1 file is damage.
TEST_F(SnapshotTest, Version1IsReadWithoutCuts) {
  auto as_v1 = [&](const std::string& path) {
    std::string d = ReadAll(path);
    d[8] = 1;  // version field, little-endian u32
    const size_t node_len = static_cast<uint8_t>(d[48]) | (static_cast<uint8_t>(d[49]) << 8);
    const std::string covered = d.substr(0, 56) + d.substr(64, node_len);
    const uint64_t sum = XXH3_64bits(covered.data(), covered.size());
    for (int i = 0; i < 8; i++) d[56 + i] = static_cast<char>(sum >> (8 * i));
    WriteAll(path, d);
  };
  auto entries = SampleEntries(50);
  entries.pop_back();  // the CUT
  const std::string v1 = WriteSample(entries, 3, 7);
  as_v1(v1);
  uint64_t n = 0;
  Status s = ReadSnapshot(Env::Posix(), v1, "node-a", [&](const JournalEntry&) {
    n++;
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(n, entries.size());
  const std::string v1cut = WriteSample(SampleEntries(50), 3, 8);
  as_v1(v1cut);
  s = ReadSnapshot(Env::Posix(), v1cut, "node-a", [](const JournalEntry&) { return Status::OK(); });
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

TEST_F(SnapshotTest, WriterRefusesHistoryOpsAndAbandonLeavesNothing) {
  {
    auto w = SnapshotWriter::Create(Env::Posix(), Dir(), "node-a", 1, 1);
    ASSERT_TRUE(w.ok());
    // A RENAME is only ever the record of a directory rename (version 4): without a location.
    Location loc;
    loc.segment = SegmentId{"node-a", 1, 1};
    loc.length = 5;
    EXPECT_TRUE((*w)->Add(JournalEntry::Rename("/a", "/b", loc, 5)).IsInvalidArgument());
    EXPECT_TRUE((*w)->Add(JournalEntry::Rmdir("/a", 5)).IsInvalidArgument());
    EXPECT_TRUE((*w)->Add(JournalEntry::Cut(FileRef{FileRef::Kind::kJournal, "node-a", 1, 0}, 8, 5)).IsInvalidArgument());
    ASSERT_TRUE((*w)->Add(JournalEntry::Unlink("/a", 5)).ok());
    EXPECT_TRUE(fs::exists(Dir() + "/" + SnapshotFileName(1, 1) + ".tmp"));
  }  // destroyed without Finish
  EXPECT_FALSE(fs::exists(Dir() + "/" + SnapshotFileName(1, 1) + ".tmp"));
  EXPECT_FALSE(fs::exists(Dir() + "/" + SnapshotFileName(1, 1)));
  NodeFiles nf;
  ASSERT_TRUE(ListNodeFiles(Env::Posix(), Dir(), &nf).ok());
  EXPECT_TRUE(nf.snapshots.empty());
}

TEST_F(SnapshotTest, PeersFileRoundTripAndPlanRetirement) {
  PeersRecord r;
  r.node = "node-b";
  r.generation = 4;
  r.time_ns = 123;
  r.read["node-a"] = JournalPosition{3, 2, 4096};
  r.read["node-c"] = JournalPosition{1, 0, 77};
  auto p = PeersRecord::Parse(r.Serialize());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->node, "node-b");
  EXPECT_EQ(p->generation, 4u);
  EXPECT_EQ(p->read, r.read);
  EXPECT_TRUE(PeersRecord::Parse("kvfs-peers 1\nnode=x\nread a 1-2\n").status().IsCorruption());
  EXPECT_TRUE(PeersRecord::Parse("garbage").status().IsCorruption());

  NodeFiles own;
  for (uint64_t n = 0; n < 6; n++) own.journals.push_back(JournalFile{3, n, "j" + std::to_string(n)});
  own.snapshots = {SnapshotFile{3, 1, "s1"}, SnapshotFile{3, 3, "s3"}, SnapshotFile{3, 5, "s5"}};
  // No live peer: everything the older kept snapshot (s3) covers goes, and the oldest snapshot.
  auto plan = PlanRetirement(own, {}, {3, 5});
  ASSERT_EQ(plan.journals.size(), 3u);
  EXPECT_EQ(plan.journals.back().number, 2u);
  ASSERT_EQ(plan.snapshots.size(), 1u);
  EXPECT_EQ(plan.snapshots[0].path, "s1");
  // A live peer that has read into file 1 only: file 0 goes, 1 and 2 wait for it.
  plan = PlanRetirement(own, {{"node-b", JournalPosition{3, 1, 9999}}}, {3, 5});
  ASSERT_EQ(plan.journals.size(), 1u);
  EXPECT_EQ(plan.journals[0].number, 0u);
  EXPECT_EQ(plan.blocked.size(), 2u);
  EXPECT_EQ(plan.blocked_by, "node-b");
  // A live peer without a published position blocks everything.
  plan = PlanRetirement(own, {{"node-b", JournalPosition{3, 9, 0}}, {"node-c", std::nullopt}}, {3, 5});
  EXPECT_TRUE(plan.journals.empty());
  EXPECT_EQ(plan.blocked.size(), 3u);
  // One snapshot only: nothing is retired (the fallback needs two).
  own.snapshots = {SnapshotFile{3, 5, "s5"}};
  plan = PlanRetirement(own, {}, {3, 5});
  EXPECT_TRUE(plan.journals.empty());
}

// ---- Store level ----

class CheckpointStoreTest : public SnapshotTest {
 protected:
  StoreOptions Opts(const std::string& node) {
    StoreOptions o;
    o.backing_dir = backing_;
    o.index_dir = root_ + "/index-" + node;
    o.node_id = node;
    o.segment_size = 4ull << 20;
    o.cache_size = 16ull << 20;
    o.group_commit_interval_ms = 5;
    o.force_takeover = true;
    o.peer_poll_ms = 0;
    o.heartbeat_interval_ms = 3600 * 1000;
    o.checkpoint_entries = 0;
    o.checkpoint_interval_ms = 0;
    o.peers_publish_ms = 3600 * 1000;
    o.retire_check_ms = 3600 * 1000;
    return o;
  }
  std::unique_ptr<Store> Open(const StoreOptions& o) {
    auto s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static void Write(Store* s, uint64_t parent, const std::string& name, const std::string& content) {
    auto n = s->CreateFile(parent, name, S_IFREG | 0644, 0, 0, false);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    Location loc;
    if (!content.empty()) {
      auto l = s->WriteRecord(n->attr.ino, {content});
      ASSERT_TRUE(l.ok());
      loc = *l;
    }
    Attr a = n->attr;
    a.size = content.size();
    ASSERT_TRUE(s->CommitFile(n->attr.ino, loc, a).ok());
  }
  // Replays the whole export into a fresh index and dumps it.
  std::map<std::string, DumpEntry> Rebuilt(const std::string& tag, std::map<std::string, ReplayNodeResult>* res = nullptr) {
    IndexDbOptions io;
    io.dir = root_ + "/rebuilt-" + tag;
    io.node_id = "observer";
    auto idx = IndexDb::Open(io);
    EXPECT_TRUE(idx.ok());
    EXPECT_TRUE(ReplayAllNodes(Env::Posix(), backing_, idx->get(), res).ok());
    auto d = (*idx)->DumpByPath();
    EXPECT_TRUE(d.ok());
    return *d;
  }
  std::string NodeDir(const std::string& node) { return NodeDirPath(backing_, node); }
  NodeFiles Files(const std::string& node) {
    NodeFiles nf;
    EXPECT_TRUE(ListNodeFiles(Env::Posix(), NodeDir(node), &nf).ok());
    return nf;
  }
};

TEST_F(CheckpointStoreTest, JoinFromSnapshotEqualsFullReplayAndKeepsTombstones) {
  auto a = Open(Opts("node-a"));
  auto b = Open(Opts("node-b"));  // a live peer that never publishes: A retires nothing here
  ASSERT_TRUE(a && b);
  auto d = a->Mkdir(kRootIno, "kv", S_IFDIR | 0700, 0, 0);
  ASSERT_TRUE(d.ok());
  for (int i = 0; i < 50; i++) Write(a.get(), d->attr.ino, "c" + std::to_string(i), std::string(5000 + i, 'x'));
  Write(a.get(), d->attr.ino, "empty", "");
  ASSERT_TRUE(a->Unlink(d->attr.ino, "c3", nullptr).ok());
  ASSERT_TRUE(a->Rename(d->attr.ino, "c4", d->attr.ino, "c4-renamed", 0, nullptr).ok());
  auto c5 = a->Lookup(d->attr.ino, "c5");
  ASSERT_TRUE(c5.ok());
  ASSERT_TRUE(a->SetXattr(c5->attr.ino, "user.model", "llama", 0).ok());
  ASSERT_TRUE(a->Symlink(d->attr.ino, "latest", "c6", 0, 0).ok());
  // Index-only special files (SYMLINK entries of version 4) travel in journals and snapshots alike.
  ASSERT_TRUE(a->Mknod(d->attr.ino, "fifo", S_IFIFO | 0640, 0, 7, 8).ok());
  ASSERT_TRUE(a->Mknod(d->attr.ino, "tty", S_IFCHR | 0600, makedev(4, 64), 0, 0).ok());
  ASSERT_TRUE(a->Sync().ok());
  const auto before = Rebuilt("journals-only");
  EXPECT_EQ(before.at("/kv/fifo").mode, static_cast<uint32_t>(S_IFIFO | 0640));
  EXPECT_EQ(before.at("/kv/tty").rdev, makedev(4, 64));

  ASSERT_TRUE(a->Checkpoint().ok());
  NodeFiles nf = Files("node-a");
  ASSERT_EQ(nf.snapshots.size(), 1u);
  // More history after the checkpoint: the tail is read from the journal.
  ASSERT_TRUE(a->Unlink(d->attr.ino, "c7", nullptr).ok());
  Write(a.get(), d->attr.ino, "after", "tail");
  ASSERT_TRUE(a->Close().ok());  // checkpoint at unmount
  nf = Files("node-a");
  ASSERT_EQ(nf.snapshots.size(), 2u);

  std::map<std::string, ReplayNodeResult> res;
  auto joined = Rebuilt("snap", &res);
  EXPECT_EQ(res["node-a"].snapshot, nf.snapshots.back().path);
  EXPECT_FALSE(res["node-a"].journal_gap);
  EXPECT_GT(res["node-a"].snapshot_entries, 50u);
  // Same as a replay of every journal (snapshots moved away).
  for (const auto& s : nf.snapshots) fs::rename(s.path, s.path + ".away");
  auto full = Rebuilt("full");
  for (const auto& s : nf.snapshots) fs::rename(s.path + ".away", s.path);
  EXPECT_EQ(joined, full);
  EXPECT_EQ(joined.count("/kv/c3"), 0u);
  EXPECT_EQ(joined.count("/kv/c4"), 0u);
  EXPECT_EQ(joined.count("/kv/c7"), 0u);
  ASSERT_EQ(joined.count("/kv/c4-renamed"), 1u);
  EXPECT_EQ(joined["/kv/c5"].xattrs.at("user.model"), "llama");
  EXPECT_EQ(joined["/kv/latest"].symlink, "c6");
  EXPECT_EQ(joined["/kv/fifo"].mode, static_cast<uint32_t>(S_IFIFO | 0640));
  EXPECT_EQ(joined["/kv/fifo"].uid, 7u);
  EXPECT_EQ(joined["/kv/tty"].mode, static_cast<uint32_t>(S_IFCHR | 0600));
  EXPECT_EQ(joined["/kv/tty"].rdev, makedev(4, 64));
  EXPECT_EQ(joined["/kv/after"].size, 4u);
  EXPECT_EQ(joined["/kv"].mode, static_cast<uint32_t>(S_IFDIR));
  EXPECT_EQ(before.count("/kv/c7"), 1u);

  // Tombstones travel in the snapshot: with only the snapshots (journals gone), a late PUT of a deleted
  // name with an older stamp from another node does not bring it back.
  for (const auto& j : nf.journals) fs::rename(j.path, j.path + ".away");
  IndexDbOptions io;
  io.dir = root_ + "/rebuilt-tomb";
  io.node_id = "observer";
  auto idx = IndexDb::Open(io);
  ASSERT_TRUE(idx.ok());
  ReplayNodeResult r;
  ASSERT_TRUE(ReplayNode(Env::Posix(), backing_, "node-a", idx->get(), &r).ok());
  auto tb = (*idx)->GetTombstone("/kv/c3");
  ASSERT_TRUE(tb.ok()) << tb.status().ToString();
  EXPECT_EQ(tb->node, "node-a");
  Attr attr;
  attr.mode = S_IFREG | 0644;
  ASSERT_TRUE((*idx)->ApplyPut("/kv/c3", Location{}, attr, tb->stamp - 1, "node-z").ok());
  auto dump = (*idx)->DumpByPath();
  ASSERT_TRUE(dump.ok());
  EXPECT_EQ(dump->count("/kv/c3"), 0u) << "a deleted name was resurrected by an older PUT";
  EXPECT_EQ(dump->count("/kv/c4"), 0u);
  EXPECT_EQ(dump->count("/kv/c5"), 1u);
  for (const auto& j : nf.journals) fs::rename(j.path + ".away", j.path);
  EXPECT_TRUE(b->Close().ok());
}

// Node A changes a file node B bound (chmod, an xattr set and a remove), then checkpoints and closes;
// B never checkpoints after applying them (killed). A's snapshot carries those changes (SETATTR and
// XATTR entries at their own stamps, snapshot version 3) and a rebuild applies them after B's PUT: a
// joining node has A's mode and xattrs. Before, A's snapshot held only what A bound, so they were lost.
TEST_F(CheckpointStoreTest, ChangesToAPeersFileSurviveTheCheckpoint) {
  auto a = Open(Opts("node-a"));
  auto b = Open(Opts("node-b"));
  ASSERT_TRUE(a && b);
  Write(b.get(), kRootIno, "y", "peer-bound");
  ASSERT_TRUE(b->SetXattr(b->Lookup(kRootIno, "y")->attr.ino, "user.old", "1", 0).ok());
  Write(b.get(), kRootIno, "untouched", "u");
  ASSERT_TRUE(b->Sync().ok());
  ASSERT_TRUE(a->RefreshPeers().ok());
  auto y = a->Lookup(kRootIno, "y");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  Attr attr = y->attr;
  attr.mode = S_IFREG | 0600;
  ASSERT_TRUE(a->SetAttr(y->attr.ino, attr, kSetMode).ok());
  ASSERT_TRUE(a->SetXattr(y->attr.ino, "user.vllm_kv_crc32", "0badf00d", 0).ok());
  ASSERT_TRUE(a->RemoveXattr(y->attr.ino, "user.old").ok());
  ASSERT_TRUE(a->Close().ok());  // checkpoint at unmount: A's journal tail after it is empty
  NodeFiles nf = Files("node-a");
  ASSERT_FALSE(nf.snapshots.empty());
  std::string head;
  {
    std::ifstream in(nf.snapshots.back().path, std::ios::binary);
    head.resize(12);
    in.read(head.data(), 12);
  }
  EXPECT_EQ(static_cast<uint8_t>(head[8]), 3u) << "a snapshot with a SETATTR is version 3";
  // Only the snapshot and the journal after it: the journals it covers are moved away (as if retired).
  for (const auto& j : nf.journals) {
    if (std::make_pair(j.generation, j.number) < std::make_pair(nf.snapshots.back().generation, nf.snapshots.back().number)) {
      fs::rename(j.path, j.path + ".away");
    }
  }
  std::map<std::string, ReplayNodeResult> res;
  auto joined = Rebuilt("joined", &res);
  EXPECT_EQ(res["node-a"].snapshot, nf.snapshots.back().path);
  ASSERT_TRUE(joined.count("/y"));
  EXPECT_EQ(joined["/y"].mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(joined["/y"].size, 10u);
  EXPECT_EQ(joined["/y"].xattrs, (std::map<std::string, std::string>{{"user.vllm_kv_crc32", "0badf00d"}}));
  EXPECT_EQ(joined["/untouched"].mode, static_cast<uint32_t>(S_IFREG | 0644));
  // B's own snapshot, taken before it applied A's changes, changes nothing of that.
  ASSERT_TRUE(b->Checkpoint().ok());
  auto again = Rebuilt("again");
  EXPECT_EQ(again["/y"].mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(again["/y"].xattrs, joined["/y"].xattrs);
  // A snapshot without a change to a peer's file stays version 2 (older readers use it).
  auto c = Open(Opts("node-c"));
  ASSERT_TRUE(c);
  Write(c.get(), kRootIno, "own", "c");
  ASSERT_TRUE(c->Close().ok());
  NodeFiles cf = Files("node-c");
  ASSERT_FALSE(cf.snapshots.empty());
  {
    std::ifstream in(cf.snapshots.back().path, std::ios::binary);
    in.read(head.data(), 12);
  }
  EXPECT_EQ(static_cast<uint8_t>(head[8]), 2u);
  EXPECT_TRUE(b->Close().ok());
}

TEST_F(CheckpointStoreTest, DamagedSnapshotFallsBackAndNeverYieldsWrongEntries) {
  StoreOptions oa = Opts("node-a");
  oa.checkpoint_on_close = false;  // "h" stays in the journal tail after the newest snapshot
  auto a = Open(oa);
  ASSERT_TRUE(a);
  for (int i = 0; i < 20; i++) Write(a.get(), kRootIno, "f" + std::to_string(i), std::string(100, 'a' + i));
  ASSERT_TRUE(a->Checkpoint().ok());
  for (int i = 0; i < 5; i++) ASSERT_TRUE(a->Unlink(kRootIno, "f" + std::to_string(i), nullptr).ok());
  Write(a.get(), kRootIno, "g", "g");
  ASSERT_TRUE(a->Checkpoint().ok());
  Write(a.get(), kRootIno, "h", "h");
  ASSERT_TRUE(a->Close().ok());
  const auto expected = Rebuilt("expected");
  NodeFiles nf = Files("node-a");
  ASSERT_EQ(nf.snapshots.size(), 2u);

  // Newest damaged: the older one + the journals after it give the same namespace.
  const std::string newest = nf.snapshots.back().path;
  std::string data = ReadAll(newest);
  data[data.size() / 2] ^= 0x01;
  WriteAll(newest, data);
  std::map<std::string, ReplayNodeResult> res;
  EXPECT_EQ(Rebuilt("fallback", &res), expected);
  EXPECT_EQ(res["node-a"].snapshot, nf.snapshots.front().path);
  ASSERT_EQ(res["node-a"].bad_snapshots.size(), 1u);
  EXPECT_TRUE(res["node-a"].bad_snapshots[0].second.IsCorruption());
  EXPECT_FALSE(res["node-a"].journal_gap);

  // Both damaged and the journals before the newest cover gone: a reported gap, and whatever is
  // rebuilt is a subset of the truth (never a wrong entry, never a deleted name).
  data = ReadAll(nf.snapshots.front().path);
  data[100] ^= 0x01;
  WriteAll(nf.snapshots.front().path, data);
  for (const auto& j : nf.journals) {
    if (std::make_pair(j.generation, j.number) < std::make_pair(nf.snapshots.back().generation, nf.snapshots.back().number))
      fs::remove(j.path);
  }
  res.clear();
  auto partial = Rebuilt("gap", &res);
  EXPECT_TRUE(res["node-a"].journal_gap);
  EXPECT_EQ(res["node-a"].snapshot, "");
  for (const auto& [path, e] : partial) {
    auto it = expected.find(path);
    ASSERT_NE(it, expected.end()) << path << " is not in the true namespace";
    EXPECT_EQ(e, it->second) << path;
  }
  EXPECT_EQ(partial.count("/h"), 1u);
}

// A node that has read no peer writes no peers file (to a peer, no file and a file without its name
// both mean "keep your journals": PlanRetirement), which saved ~8 backing metadata operations a second
// after every mount of a lone node; once it has read a peer, its next publish names that peer.
TEST_F(CheckpointStoreTest, NoPeersFileUntilAPeerIsRead) {
  StoreOptions oa = Opts("node-a");
  oa.peers_publish_ms = 100;  // the checkpointer ticks every 100 ms
  auto a = Open(oa);
  ASSERT_TRUE(a);
  Write(a.get(), kRootIno, "a0", "v");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_FALSE(fs::exists(PeersFilePath(backing_, "node-a"))) << "a lone node wrote a peers file";
  auto b = Open(Opts("node-b"));
  ASSERT_TRUE(b);
  Write(b.get(), kRootIno, "b0", "x");
  ASSERT_TRUE(a->RefreshPeers().ok());
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(PeersFilePath(backing_, "node-a")) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto rec = ReadPeersFile(Env::Posix(), backing_, "node-a");
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->read.count("node-b"), 1u);
}

TEST_F(CheckpointStoreTest, JournalsAreRetiredOnlyAfterLivePeersReadThem) {
  auto a = Open(Opts("node-a"));
  auto b = Open(Opts("node-b"));
  ASSERT_TRUE(a && b);
  for (int i = 0; i < 10; i++) Write(a.get(), kRootIno, "a" + std::to_string(i), "v" + std::to_string(i));
  ASSERT_TRUE(a->Checkpoint().ok());  // snapshot (g, 1); journal file 0 is covered
  Write(a.get(), kRootIno, "b0", "x");
  ASSERT_TRUE(a->Checkpoint().ok());  // snapshot (g, 2); now file 0 is below the older kept snapshot
  NodeFiles nf = Files("node-a");
  ASSERT_EQ(nf.snapshots.size(), 2u);
  const std::string j0 = nf.journals.front().path;
  // B is live and has published nothing about A: nothing of A is retired.
  EXPECT_TRUE(fs::exists(j0)) << "retired a journal file a live peer has not read";
  ASSERT_TRUE(b->PublishPeerProgress().ok());  // B has read nothing of A yet
  ASSERT_TRUE(a->Checkpoint().ok());
  EXPECT_TRUE(fs::exists(j0)) << "retired a journal file a live peer has not read";
  // B reads A up to A's newest file and says so: A retires what both the older snapshot and B passed.
  ASSERT_TRUE(b->RefreshPeers().ok());
  ASSERT_TRUE(b->PublishPeerProgress().ok());
  auto peers = ReadPeersFile(Env::Posix(), backing_, "node-b");
  ASSERT_TRUE(peers.ok()) << peers.status().ToString();
  ASSERT_EQ(peers->read.count("node-a"), 1u);
  Write(a.get(), kRootIno, "c0", "y");
  ASSERT_TRUE(a->Checkpoint().ok());
  EXPECT_FALSE(fs::exists(j0)) << "journal file 0 should be retired once B has read past it";
  nf = Files("node-a");
  EXPECT_EQ(nf.snapshots.size(), 2u);
  EXPECT_TRUE(b->Lookup(kRootIno, "a3").ok());

  // A node joining now reads snapshots + tails and sees exactly A's live set.
  auto c = Open(Opts("node-c"));
  ASSERT_TRUE(c);
  for (int i = 0; i < 10; i++) EXPECT_TRUE(c->Lookup(kRootIno, "a" + std::to_string(i)).ok()) << i;
  EXPECT_TRUE(c->Lookup(kRootIno, "c0").ok());

  // B goes away (clean unmount = not live) while A deletes and retires: B's reused index re-reads A's
  // newest snapshot when it finds its position's file gone, so the deletions reach it.
  ASSERT_TRUE(b->Close().ok());
  b.reset();
  ASSERT_TRUE(a->Unlink(kRootIno, "a1", nullptr).ok());
  for (int k = 0; k < 3; k++) {
    Write(a.get(), kRootIno, "d" + std::to_string(k), "z");
    ASSERT_TRUE(a->Sync().ok());
    ASSERT_TRUE(c->RefreshPeers().ok());  // C is live: it keeps up and says so
    ASSERT_TRUE(c->PublishPeerProgress().ok());
    ASSERT_TRUE(a->Checkpoint().ok());
  }
  ASSERT_TRUE(a->Sync().ok());
  nf = Files("node-a");
  ASSERT_FALSE(nf.journals.empty());
  const auto bpos = peers->read.at("node-a");
  bool still_there = false;
  for (const auto& j : nf.journals) still_there |= (j.generation == bpos.generation && j.number == bpos.file_number);
  EXPECT_FALSE(still_there) << "A should have retired the file B stopped in (B is not live)";
  auto b2 = Open(Opts("node-b"));
  ASSERT_TRUE(b2);
  ASSERT_TRUE(b2->RefreshPeers().ok());
  EXPECT_TRUE(b2->Lookup(kRootIno, "a1").status().IsNotFound()) << "a deletion hidden by retirement came back";
  EXPECT_TRUE(b2->Lookup(kRootIno, "a2").ok());
  EXPECT_TRUE(b2->Lookup(kRootIno, "d2").ok());
  EXPECT_TRUE(a->Close().ok());
  EXPECT_TRUE(b2->Close().ok());
  EXPECT_TRUE(c->Close().ok());
}

TEST_F(CheckpointStoreTest, FsckUnderstandsSnapshotsAndRetiredJournals) {
  StoreOptions oa = Opts("node-a");
  oa.segment_size = 1ull << 20;  // several segments, some sealed before the journals holding SEAL retire
  auto a = Open(oa);
  ASSERT_TRUE(a);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 40; i++) {
      Write(a.get(), kRootIno, "r" + std::to_string(round) + "-" + std::to_string(i), std::string(50000, 'a' + i % 26));
    }
    ASSERT_TRUE(a->Unlink(kRootIno, "r" + std::to_string(round) + "-0", nullptr).ok());
    ASSERT_TRUE(a->Checkpoint().ok());
  }
  // One more file, journaled after the third snapshot, so that Close writes a fourth and the two kept ones
  // come after round 2's journal file. Close checkpoints only when something was journaled since the last
  // snapshot (a Checkpoint() with nothing new rewrites the same one), and whether the SEAL of a segment
  // filled near the end of round 2 is journaled before or after the third checkpoint is timing (the
  // writer's leader seals, the next commit round journals it): a clean-clone CI once kept round 2's
  // journal file (2 orphans where 3 are asserted).
  Write(a.get(), kRootIno, "tail", "after the last round\n");
  ASSERT_TRUE(a->Close().ok());
  NodeFiles nf = Files("node-a");
  ASSERT_EQ(nf.snapshots.size(), 2u);
  ASSERT_FALSE(nf.journals.empty());
  EXPECT_GT(nf.journals.front().number, 0u) << "expected retired journal files (no live peer)";
  FsckOptions fo;
  fo.backing_dir = backing_;
  auto rep = RunFsck(fo);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  // Only the records of the three deleted files, whose PUTs were retired, are dead bytes (informational).
  for (const auto& f : rep->findings) {
    if (f.kind != FsckKind::kOrphanRecord) ADD_FAILURE() << FsckKindName(f.kind) << " " << f.file << ": " << f.detail;
  }
  EXPECT_EQ(rep->Count(FsckKind::kOrphanRecord), 3u);
  EXPECT_EQ(rep->problems, 0u);
  ASSERT_EQ(rep->nodes.size(), 1u);
  EXPECT_EQ(rep->nodes[0].snapshot, nf.snapshots.back().path);
  EXPECT_EQ(rep->nodes[0].snapshots, 2u);
  EXPECT_EQ(rep->nodes[0].live_files, 118u);

  // A damaged newest snapshot is a problem (the older one is used: no gap); both damaged = a gap.
  std::string data = ReadAll(nf.snapshots.back().path);
  data[data.size() / 3] ^= 0x40;
  WriteAll(nf.snapshots.back().path, data);
  rep = RunFsck(fo);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->Count(FsckKind::kSnapshotDamaged), 1u);
  EXPECT_EQ(rep->Count(FsckKind::kJournalGap), 0u);
  EXPECT_EQ(rep->nodes[0].snapshot, nf.snapshots.front().path);
  EXPECT_EQ(rep->nodes[0].live_files, 118u);
  data = ReadAll(nf.snapshots.front().path);
  data[data.size() / 3] ^= 0x40;
  WriteAll(nf.snapshots.front().path, data);
  rep = RunFsck(fo);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->Count(FsckKind::kSnapshotDamaged), 2u);
  EXPECT_EQ(rep->Count(FsckKind::kJournalGap), 1u);
}

// Breaker report: the only snapshot damaged, no journal file ever retired (journal-1-0 is there): a
// snapshot-damaged problem, but no journal-gap in fsck nor in the rebuild, and the namespace is whole.
TEST_F(CheckpointStoreTest, DamagedOnlySnapshotWithAllJournalsIsNoGap) {
  auto a = Open(Opts("node-a"));
  ASSERT_TRUE(a);
  for (int i = 1; i <= 20; i++) Write(a.get(), kRootIno, "f" + std::to_string(i), std::to_string(i) + "\n");
  ASSERT_TRUE(a->Close().ok());
  const auto expected = Rebuilt("expected");
  ASSERT_EQ(expected.size(), 20u);
  NodeFiles nf = Files("node-a");
  ASSERT_EQ(nf.snapshots.size(), 1u);
  ASSERT_FALSE(nf.journals.empty());
  ASSERT_EQ(nf.journals.front().number, 0u);
  std::string data = ReadAll(nf.snapshots.front().path);
  data[100] ^= 0x55;
  WriteAll(nf.snapshots.front().path, data);
  std::map<std::string, ReplayNodeResult> res;
  EXPECT_EQ(Rebuilt("journals", &res), expected);
  EXPECT_EQ(res["node-a"].snapshot, "");
  EXPECT_EQ(res["node-a"].bad_snapshots.size(), 1u);
  EXPECT_FALSE(res["node-a"].journal_gap);
  FsckOptions fo;
  fo.backing_dir = backing_;
  auto rep = RunFsck(fo);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->Count(FsckKind::kSnapshotDamaged), 1u);
  EXPECT_EQ(rep->Count(FsckKind::kJournalGap), 0u);
  ASSERT_EQ(rep->nodes.size(), 1u);
  EXPECT_EQ(rep->nodes[0].live_files, 20u);
}

TEST(JournalsRetiredTest, ReadOffTheFilesThatExist) {
  auto j = [](uint64_t g, uint64_t n) { JournalFile f; f.generation = g; f.number = n; return f; };
  auto s = [](uint64_t g, uint64_t n) { SnapshotFile f; f.generation = g; f.number = n; return f; };
  EXPECT_FALSE(JournalsRetired({}, {}));
  EXPECT_TRUE(JournalsRetired({}, {s(1, 1)}));
  EXPECT_FALSE(JournalsRetired({j(1, 0)}, {}));
  EXPECT_FALSE(JournalsRetired({j(1, 0)}, {s(1, 1)}));           // the breaker's case
  EXPECT_FALSE(JournalsRetired({j(1, 0), j(1, 1), j(2, 0)}, {s(1, 1), s(2, 1)}));
  EXPECT_TRUE(JournalsRetired({j(1, 3), j(1, 4)}, {s(1, 3), s(1, 4)}));  // a generation's first files gone
  EXPECT_TRUE(JournalsRetired({j(2, 0), j(2, 1)}, {s(2, 0), s(2, 1)}));  // all of generation 1 gone
  EXPECT_TRUE(JournalsRetired({j(3, 0)}, {s(2, 5)}));
}

// Issue 7 bug: a purged node was still listed by a node (itself or a peer) reusing its old index.
TEST_F(CheckpointStoreTest, PurgedNodeVanishesFromReusedIndexes) {
  auto a = Open(Opts("node-a"));
  auto b = Open(Opts("node-b"));
  ASSERT_TRUE(a && b);
  Write(a.get(), kRootIno, "from-a", std::string(8192, 'a'));
  Write(b.get(), kRootIno, "from-b", std::string(100, 'b'));
  ASSERT_TRUE(a->Sync().ok());
  ASSERT_TRUE(b->Sync().ok());
  ASSERT_TRUE(b->RefreshPeers().ok());
  ASSERT_TRUE(a->RefreshPeers().ok());
  ASSERT_TRUE(b->Lookup(kRootIno, "from-a").ok());
  ASSERT_TRUE(a->Close().ok());
  ASSERT_TRUE(b->Close().ok());
  a.reset();
  b.reset();
  // What `kvfs node purge` leaves (tools/node_cmd.cc): OWNER (released, the purge's generation) and
  // PURGED; every journal, snapshot and segment gone.
  std::string text;
  ASSERT_TRUE(Env::Posix()->ReadFileToString(OwnerFilePath(backing_, "node-a"), &text).ok());
  auto owner = OwnerRecord::Parse(text);
  ASSERT_TRUE(owner.ok());
  const uint64_t purge_gen = owner->generation + 1;
  owner->generation = purge_gen;
  ASSERT_TRUE(Env::Posix()->WriteFileAtomic(OwnerFilePath(backing_, "node-a"), owner->Serialize()).ok());
  for (const auto& e : fs::directory_iterator(NodeDir("node-a"))) {
    const std::string n = e.path().filename().string();
    if (n == "OWNER") continue;
    fs::remove_all(e.path());
  }
  fs::create_directories(NodeDir("node-a") + "/seg");
  ASSERT_TRUE(Env::Posix()->WriteFileAtomic(NodeDir("node-a") + "/PURGED",
                                            "time_ns=1\nhost=h\ngeneration=" + std::to_string(purge_gen) + "\n")
                  .ok());
  // B reuses its (cleanly closed) index: A's names go at its first poll.
  b = Open(Opts("node-b"));
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->Lookup(kRootIno, "from-a").ok());  // not polled yet (peer_poll_ms = 0)
  ASSERT_TRUE(b->RefreshPeers().ok());
  EXPECT_TRUE(b->Lookup(kRootIno, "from-a").status().IsNotFound()) << "peer B still lists purged A's file";
  EXPECT_TRUE(b->Lookup(kRootIno, "from-b").ok());
  // A itself mounts again with its old index: rebuilt, so it lists neither its purged file nor
  // anything else stale; B's file is there.
  a = Open(Opts("node-a"));
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->Lookup(kRootIno, "from-a").status().IsNotFound()) << "purged A still lists its own file";
  EXPECT_TRUE(a->Lookup(kRootIno, "from-b").ok());
  Write(a.get(), kRootIno, "again", "new");
  ASSERT_TRUE(a->Close().ok());
  a.reset();
  // ... and the next mount of A does not rebuild again (its index is newer than the purge): still fine.
  a = Open(Opts("node-a"));
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->Lookup(kRootIno, "again").ok());
  EXPECT_TRUE(a->Lookup(kRootIno, "from-a").status().IsNotFound());
  ASSERT_TRUE(b->RefreshPeers().ok());
  EXPECT_TRUE(b->Lookup(kRootIno, "again").ok()) << "B did not follow A's post-purge generation";
  EXPECT_TRUE(a->Close().ok());
  EXPECT_TRUE(b->Close().ok());
}

}  // namespace
}  // namespace kvfs
