// kvfs-fsck engine (index/fsck.h): each kind of damage is found, named, repaired, and a second run finds
// nothing repairable. Damage is made on a stopped Store's export with plain file I/O.
#include "index/fsck.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "blockstore/fault_env.h"
#include "blockstore/extent_map.h"
#include "blockstore/format.h"
#include "blockstore/node_dir.h"
#include "index/journal.h"
#include "index/index_db.h"
#include "store_harness.h"

namespace kvfs {
namespace {

using testing_harness::Content;
namespace fs = std::filesystem;

class FsckTest : public testing_harness::StoreHarness {
 protected:
  // The Store of a "crashed" test is this very process: tell the liveness check its pid is gone.
  FsckOptions Opts(bool repair = false, bool owner_dead = true) {
    FsckOptions o;
    o.backing_dir = backing_;
    o.repair = repair;
    if (owner_dead) o.process_alive = [](const HostIdentity&) { return false; };
    return o;
  }
  FsckReport Run(const FsckOptions& o) {
    auto r = RunFsck(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : FsckReport{};
  }
  static const FsckFinding* Find(const FsckReport& r, FsckKind k) {
    for (const auto& f : r.findings) {
      if (f.kind == k) return &f;
    }
    return nullptr;
  }
  static std::string Describe(const FsckReport& r) {
    std::string s;
    for (const auto& f : r.findings) {
      s += std::string(FsckKindName(f.kind)) + (f.severity == FsckSeverity::kProblem ? " P " : " i ") + f.detail + "\n";
    }
    return s;
  }
  // Files a..e of various sizes (0 bytes, < 1 block, several 64 KiB blocks).
  std::map<std::string, Location> WriteSet() {
    std::map<std::string, Location> locs;
    const std::vector<std::pair<std::string, size_t>> files = {
        {"a", 10000}, {"b", 150000}, {"c", 4096}, {"d", 0}, {"e", 70001}};
    for (const auto& [n, sz] : files) locs[n] = WriteFile(n, Content(n, sz, 1));
    return locs;
  }
  void ExpectReads(const std::vector<std::string>& names) {
    const std::map<std::string, size_t> sizes = {{"a", 10000}, {"b", 150000}, {"c", 4096}, {"d", 0}, {"e", 70001}};
    for (const auto& n : names) {
      Status st;
      std::string got = ReadAll(n, &st);
      EXPECT_TRUE(st.ok()) << n << ": " << st.ToString();
      EXPECT_TRUE(got == Content(n, sizes.at(n), 1)) << n;
    }
  }
};

TEST_F(FsckTest, CleanStoreHasNoFindings) {
  OpenStore();
  WriteSet();
  CloseStore();
  auto r = Run(Opts());
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  EXPECT_TRUE(r.findings.empty()) << Describe(r);
  ASSERT_EQ(r.nodes.size(), 1u);
  const auto& n = r.nodes[0];
  EXPECT_EQ(n.node, "node-a");
  EXPECT_FALSE(n.live);
  EXPECT_EQ(n.live_files, 4u);  // the 0-byte file has no record
  EXPECT_EQ(n.live_bytes, 10000u + 150000 + 4096 + 70001);
  EXPECT_EQ(n.records, 4u);
  EXPECT_EQ(n.dead_bytes, 0u);
  EXPECT_EQ(n.orphan_records, 0u);
  EXPECT_EQ(n.segments, n.sealed_segments);
  EXPECT_GE(n.journal_entries, 5u);
}

// Link claims (.kvfs/v1/links: directories, and files of earlier versions) belong to no node: counted;
// one at least kLinkClaimSweepAgeS old is an informational finding (no problem), removed by --repair; a
// younger one may decide a link(2) in progress and is never touched.
TEST_F(FsckTest, StaleLinkClaimsAreReportedAndRepairRemovesOnlyThose) {
  OpenStore();
  WriteSet();
  CloseStore();
  const std::string links = LinkClaimsDirPath(backing_);
  fs::create_directories(links);
  const int64_t now_ns = 2000000000000000000LL;  // a fixed clock for the ages
  auto make = [&](const std::string& name, bool dir, int64_t age_s) {
    const std::string p = links + "/" + name;
    if (dir) {
      fs::create_directory(p);
    } else {
      std::ofstream(p).close();
    }
    const int64_t t = now_ns - age_s * 1000000000LL;
    timespec ts[2] = {{t / 1000000000LL, t % 1000000000LL}, {t / 1000000000LL, t % 1000000000LL}};
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), ts, 0), 0) << p;
  };
  make("0a1b", true, 5);                   // a link in progress
  make("0a1c", true, kLinkClaimSweepAgeS + 1);
  make("0a1d.1", false, 3 * 3600);         // a file claim of an earlier version
  make("0a1e", true, kLinkClaimSweepAgeS - 1);
  FsckOptions o = Opts();
  o.now_ns = now_ns;
  auto r = Run(o);
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  EXPECT_EQ(r.link_claims, 4u);
  EXPECT_EQ(r.link_claims_stale, 2u);
  EXPECT_EQ(r.link_claims_removed, 0u);
  ASSERT_EQ(r.Count(FsckKind::kLinkClaim), 2u) << Describe(r);
  std::set<std::string> reported;
  for (const auto& f : r.findings) {
    if (f.kind != FsckKind::kLinkClaim) continue;
    EXPECT_EQ(f.severity, FsckSeverity::kInfo);
    EXPECT_FALSE(f.repaired);
    reported.insert(fs::path(f.file).filename().string());
  }
  EXPECT_EQ(reported, (std::set<std::string>{"0a1c", "0a1d.1"}));
  EXPECT_TRUE(fs::exists(links + "/0a1c"));

  o.repair = true;
  r = Run(o);
  EXPECT_EQ(r.link_claims_removed, 2u);
  EXPECT_FALSE(fs::exists(links + "/0a1c"));
  EXPECT_FALSE(fs::exists(links + "/0a1d.1"));
  EXPECT_TRUE(fs::exists(links + "/0a1b"));
  EXPECT_TRUE(fs::exists(links + "/0a1e"));
  o.repair = false;
  r = Run(o);
  EXPECT_EQ(r.link_claims, 2u);
  EXPECT_EQ(r.link_claims_stale, 0u);
  EXPECT_EQ(r.Count(FsckKind::kLinkClaim), 0u);
  OpenStore();
  ExpectReads({"a", "b", "c", "d", "e"});
  CloseStore();
}

TEST_F(FsckTest, CrashLeavesUnsealedSegmentAndRepairSealsItPhysically) {
  OpenStore();
  auto locs = WriteSet();
  ASSERT_TRUE(store_->Sync().ok());
  store_.reset();  // crash: the active segment stays unsealed
  auto r = Run(Opts());
  EXPECT_EQ(r.problems, 1u) << Describe(r);
  ASSERT_NE(Find(r, FsckKind::kUnsealedSegment), nullptr) << Describe(r);
  EXPECT_EQ(Find(r, FsckKind::kUnsealedSegment)->file, SegPath(locs["a"]));

  auto fixed = Run(Opts(/*repair=*/true));
  EXPECT_EQ(fixed.problems, 1u);
  EXPECT_EQ(fixed.repaired, 1u) << Describe(fixed);
  EXPECT_NE(Find(fixed, FsckKind::kUnsealedSegment)->repair.find("footer + trailer"), std::string::npos);
  EXPECT_EQ(fixed.nodes[0].repair_generation, 2u);

  auto again = Run(Opts(true));
  EXPECT_EQ(again.problems, 0u) << Describe(again);
  EXPECT_EQ(again.nodes[0].sealed_segments, again.nodes[0].segments);
  EXPECT_EQ(again.nodes[0].live_files, 4u);
  OpenStore();
  ExpectReads({"a", "b", "c", "d", "e"});
}

TEST_F(FsckTest, TornJournalTailIsCutNeverTruncated) {
  OpenStore();
  WriteSet();
  ASSERT_TRUE(store_->Sync().ok());
  store_.reset();
  const std::string j = JournalPaths().back();
  const uint64_t size0 = fs::file_size(j);
  AppendBytes(j, std::string("\x11\x22\x33\x44\x10\x00\x01partial-entry", 20));
  auto r = Run(Opts());
  const FsckFinding* t = Find(r, FsckKind::kJournalTornTail);
  ASSERT_NE(t, nullptr) << Describe(r);
  EXPECT_EQ(t->severity, FsckSeverity::kProblem);
  EXPECT_EQ(t->file, j);
  EXPECT_EQ(t->offset, size0);
  EXPECT_EQ(t->bytes, 20u);
  EXPECT_EQ(r.problems, 2u) << Describe(r);  // + the unsealed segment

  auto fixed = Run(Opts(true));
  EXPECT_EQ(fixed.repaired, 2u) << Describe(fixed);
  EXPECT_EQ(fs::file_size(j), size0 + 20);  // cut logically, not truncated
  auto again = Run(Opts(true));
  EXPECT_EQ(again.problems, 0u) << Describe(again);
  fs::remove_all(index_);  // rebuild from the export, honouring the CUT
  OpenStore();
  ExpectReads({"a", "b", "c", "d", "e"});
}

TEST_F(FsckTest, TornSegmentTailIsCutAndSealedLogically) {
  OpenStore();
  auto locs = WriteSet();
  ASSERT_TRUE(store_->Sync().ok());
  store_.reset();
  const std::string seg = SegPath(locs["b"]);
  const uint64_t size0 = fs::file_size(seg);
  // A torn record: the metadata block of record "b" (valid header + table) without its value.
  std::string block(4096, '\0');
  {
    int fd = open(seg.c_str(), O_RDONLY);
    ASSERT_EQ(pread(fd, block.data(), 4096, static_cast<off_t>(locs["b"].record_offset)), 4096);
    close(fd);
  }
  AppendBytes(seg, block);
  auto r = Run(Opts());
  const FsckFinding* t = Find(r, FsckKind::kSegmentTornTail);
  ASSERT_NE(t, nullptr) << Describe(r);
  EXPECT_EQ(t->offset, size0);
  EXPECT_EQ(t->bytes, 4096u);
  ASSERT_NE(Find(r, FsckKind::kUnsealedSegment), nullptr);
  EXPECT_EQ(r.problems, 2u) << Describe(r);
  EXPECT_EQ(Find(r, FsckKind::kDanglingEntry), nullptr);

  auto fixed = Run(Opts(true));
  EXPECT_EQ(fixed.repaired, 2u) << Describe(fixed);
  EXPECT_NE(Find(fixed, FsckKind::kUnsealedSegment)->repair.find("logical"), std::string::npos);
  EXPECT_EQ(fs::file_size(seg), size0 + 4096);  // nothing appended behind a torn tail, nothing truncated
  auto again = Run(Opts(true));
  EXPECT_EQ(again.problems, 0u) << Describe(again);
  OpenStore();
  ExpectReads({"a", "b", "c", "d", "e"});
}

// A crash right after a segment file was created (O_EXCL) and before its header was written leaves an
// empty file: a torn tail at offset 0, not a damaged header (found by the mount-level crash harness).
TEST_F(FsckTest, EmptySegmentFileIsATornTailAtZero) {
  OpenStore();
  auto locs = WriteSet();
  ASSERT_TRUE(store_->Sync().ok());
  store_.reset();
  const SegmentId next{node_, locs["a"].segment.generation, locs["a"].segment.seq + 1};
  const std::string empty = SegmentFilePath(backing_, next);
  { std::ofstream(empty).flush(); }
  auto r = Run(Opts());
  EXPECT_EQ(r.Count(FsckKind::kSegmentBadHeader), 0u) << Describe(r);
  const FsckFinding* t = nullptr;
  for (const auto& f : r.findings) {
    if (f.kind == FsckKind::kSegmentTornTail && f.file == empty) t = &f;
  }
  ASSERT_NE(t, nullptr) << Describe(r);
  EXPECT_EQ(t->offset, 0u);
  EXPECT_EQ(r.Count(FsckKind::kUnsealedSegment), 2u) << Describe(r);  // the empty one and the crashed one
  EXPECT_EQ(r.problems, 3u);
  auto fixed = Run(Opts(true));
  EXPECT_EQ(fixed.repaired, 3u) << Describe(fixed);
  auto again = Run(Opts());
  EXPECT_EQ(again.problems, 0u) << Describe(again);
  EXPECT_EQ(fs::file_size(empty), 0u);
}

TEST_F(FsckTest, DamagedRecordHeaderGivesDamagedRegionAndDanglingEntry) {
  OpenStore();
  auto locs = WriteSet();
  CloseStore();
  FlipByte(SegPath(locs["b"]), locs["b"].record_offset + 9);  // value length field of b's header
  auto r = Run(Opts());
  EXPECT_EQ(r.problems, 2u) << Describe(r);
  const FsckFinding* d = Find(r, FsckKind::kSegmentDamaged);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->offset, locs["b"].record_offset);
  EXPECT_EQ(d->bytes, locs["c"].record_offset - locs["b"].record_offset);
  const FsckFinding* g = Find(r, FsckKind::kDanglingEntry);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->path, "/b");
  EXPECT_FALSE(d->repairable);

  auto fixed = Run(Opts(true));
  EXPECT_EQ(fixed.repaired, 1u) << Describe(fixed);
  EXPECT_EQ(fixed.unrepaired, 1u);
  auto again = Run(Opts(true));
  EXPECT_EQ(again.problems, 1u) << Describe(again);  // the damage itself stays (unrepairable)
  EXPECT_EQ(again.Count(FsckKind::kDanglingEntry), 0u);
  EXPECT_EQ(again.repaired, 0u);
  OpenStore();  // over its clean local index: applies the repair's UNLINK (Store::Open catch-up)
  Status st;
  ReadAll("b", &st);
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();
  ExpectReads({"a", "c", "d", "e"});
  CloseStore();
  fs::remove_all(index_);  // and a rebuilt index agrees
  OpenStore();
  ReadAll("b", &st);
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();
  ExpectReads({"a", "c", "d", "e"});
}

// Breaker report: one flipped byte in a segment header made --repair UNLINK every file of the segment,
// although reads never use the header and every record verified. Now: segment-bad-header (unrepairable,
// nothing lost), no dangling entry, nothing unlinked; only a record that fails itself is dangling.
TEST_F(FsckTest, DamagedSegmentHeaderLosesOnlyRecordsThatFailThemselves) {
  OpenStore();
  auto locs = WriteSet();
  CloseStore();  // sealed
  const std::string seg = SegPath(locs["a"]);
  FlipByte(seg, 20, 0x55);  // the generation field of the header
  auto r = Run(Opts());
  const FsckFinding* h = Find(r, FsckKind::kSegmentBadHeader);
  ASSERT_NE(h, nullptr) << Describe(r);
  EXPECT_FALSE(h->repairable);
  EXPECT_EQ(r.Count(FsckKind::kDanglingEntry), 0u) << Describe(r);
  EXPECT_EQ(r.Count(FsckKind::kSegmentBadTrailer), 0u) << Describe(r);  // the footer matches the records
  EXPECT_EQ(r.problems, 1u) << Describe(r);
  ASSERT_EQ(r.nodes.size(), 1u);
  EXPECT_EQ(r.nodes[0].live_files, 4u);
  EXPECT_EQ(r.nodes[0].sealed_segments, r.nodes[0].segments);

  auto fixed = Run(Opts(true));
  EXPECT_EQ(fixed.repaired, 0u) << Describe(fixed);
  EXPECT_EQ(fixed.Count(FsckKind::kDanglingEntry), 0u);
  OpenStore();
  ExpectReads({"a", "b", "c", "d", "e"});
  CloseStore();
  fs::remove_all(index_);  // a rebuilt index (and the mount's recovery scan) agrees
  OpenStore();
  ExpectReads({"a", "b", "c", "d", "e"});
  CloseStore();

  // A record that is itself damaged in that segment is still found and its file unlinked.
  FlipByte(seg, locs["b"].record_offset + 9);
  r = Run(Opts());
  EXPECT_EQ(r.Count(FsckKind::kSegmentBadHeader), 1u) << Describe(r);
  EXPECT_EQ(r.Count(FsckKind::kSegmentDamaged), 1u) << Describe(r);
  ASSERT_EQ(r.Count(FsckKind::kDanglingEntry), 1u) << Describe(r);
  EXPECT_EQ(Find(r, FsckKind::kDanglingEntry)->path, "/b");
  // The footer still lists b, which the walk did not find: without the nonce it is not trusted.
  EXPECT_EQ(r.Count(FsckKind::kSegmentBadTrailer), 1u) << Describe(r);
  fixed = Run(Opts(true));
  EXPECT_EQ(fixed.Count(FsckKind::kDanglingEntry), 1u);
  OpenStore();
  Status st;
  ReadAll("b", &st);
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();
  ExpectReads({"a", "c", "d", "e"});
}

// The same for a crashed (unsealed) segment: sealed logically only, no file lost.
TEST_F(FsckTest, DamagedHeaderOfCrashedSegmentIsSealedLogically) {
  OpenStore();
  auto locs = WriteSet();
  ASSERT_TRUE(store_->Sync().ok());
  store_.reset();
  FlipByte(SegPath(locs["a"]), 20, 0x55);
  auto r = Run(Opts());
  EXPECT_EQ(r.Count(FsckKind::kSegmentBadHeader), 1u) << Describe(r);
  EXPECT_EQ(r.Count(FsckKind::kUnsealedSegment), 1u) << Describe(r);
  EXPECT_EQ(r.Count(FsckKind::kDanglingEntry), 0u) << Describe(r);
  auto fixed = Run(Opts(true));
  EXPECT_EQ(fixed.repaired, 1u) << Describe(fixed);
  EXPECT_NE(Find(fixed, FsckKind::kUnsealedSegment)->repair.find("logical"), std::string::npos);
  auto again = Run(Opts(true));
  EXPECT_EQ(again.problems, 1u) << Describe(again);  // the header itself (unrepairable)
  EXPECT_EQ(again.repaired, 0u);
  OpenStore();
  ExpectReads({"a", "b", "c", "d", "e"});
}

TEST_F(FsckTest, VerifyDataFindsDamagedValue) {
  OpenStore();
  auto locs = WriteSet();
  CloseStore();
  FlipByte(SegPath(locs["e"]), locs["e"].value_offset + 65536 + 7);  // 2nd block of e
  EXPECT_EQ(Run(Opts()).problems, 0u);  // metadata only: not seen
  auto o = Opts();
  o.verify_data = true;
  auto r = Run(o);
  EXPECT_EQ(r.problems, 1u) << Describe(r);
  const FsckFinding* g = Find(r, FsckKind::kDanglingEntry);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->path, "/e");
  EXPECT_NE(g->detail.find("checksum"), std::string::npos) << g->detail;
  EXPECT_EQ(r.nodes[0].verified_value_bytes, 10000u + 150000 + 4096 + 70001);
}

TEST_F(FsckTest, OrphanRecordIsInformational) {
  OpenStore();
  WriteSet();
  auto n = store_->CreateFile(kRootIno, "staged", S_IFREG | 0644, 0, 0, false);
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(store_->WriteRecord(n->attr.ino, {Content("staged", 5000, 2)}).ok());  // never committed
  CloseStore();
  auto r = Run(Opts());
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  ASSERT_EQ(r.Count(FsckKind::kOrphanRecord), 1u) << Describe(r);
  EXPECT_EQ(Find(r, FsckKind::kOrphanRecord)->path, "/staged");
  EXPECT_EQ(r.nodes[0].orphan_records, 1u);
  EXPECT_EQ(r.nodes[0].orphan_bytes, 5000u);
  EXPECT_EQ(r.nodes[0].dead_bytes, 5000u);
}

// An extent delta PUT (entry version 5) whose base binding the node's journals do not hold (here: a
// journal file appended after a clean close, naming a base stamp no entry has) applies as an UNLINK and
// is counted and reported as information, not as a problem.
TEST_F(FsckTest, UnresolvedExtentDeltaIsCountedAsInformation) {
  OpenStore();
  auto locs = WriteSet();
  CloseStore();
  const std::string dir = NodeDirPath(backing_, "node-a");
  std::vector<JournalFile> files;
  ASSERT_TRUE(ListJournalFiles(Env::Posix(), dir, &files).ok());
  ASSERT_FALSE(files.empty());
  JournalWriterOptions o;
  o.env = Env::Posix();
  o.dir = dir;
  o.node = "node-a";
  o.generation = files.back().generation;
  o.first_file_number = files.back().number + 1;
  {
    auto w = JournalWriter::Open(o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    const ExtentMap base = ExtentMap::FromLocation(locs["b"], 150000);
    ExtentMap next = base;
    ASSERT_TRUE(next.Overlay(0, 4096, locs["c"], 0).ok());
    EntryAttrs at;
    at.mode = 0100644;
    at.size = next.size();
    JournalEntry e = JournalEntry::Put("/never-bound", Location{}, at, uint64_t{1} << 62);
    e.xattrs.emplace();
    ExtentDelta d = DiffExtentMaps(base, next);
    d.base_stamp = 12345;  // no binding of /never-bound has this stamp
    d.map_checksum = ExtentMapChecksum(next);
    e.delta = d;
    (*w)->Append(e);
    ASSERT_TRUE((*w)->Sync().ok());
  }
  auto r = Run(Opts());
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  ASSERT_EQ(r.Count(FsckKind::kUnresolvedDelta), 1u) << Describe(r);
  EXPECT_EQ(Find(r, FsckKind::kUnresolvedDelta)->severity, FsckSeverity::kInfo);
  ASSERT_EQ(r.nodes.size(), 1u);
  EXPECT_EQ(r.nodes[0].unresolved_deltas, 1u);
  EXPECT_EQ(r.nodes[0].live_files, 4u);  // nothing bound under /never-bound
}

// A spill of staged bytes (Store::WriteProvisionalRecord) that is never committed is dead bytes, never a
// problem; one that a commit names is live like any record.
TEST_F(FsckTest, ProvisionalSpillsAreDeadBytesUntilCommitted) {
  OpenStore();
  WriteSet();
  auto a = store_->CreateFile(kRootIno, "spilled-unlinked", S_IFREG | 0644, 0, 0, false);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(store_->WriteProvisionalRecord(a->attr.ino, {Content("x", 70000, 3)}).ok());
  uint64_t gone = 0;
  ASSERT_TRUE(store_->Unlink(kRootIno, "spilled-unlinked", &gone).ok());  // discarded before its commit
  auto b = store_->CreateFile(kRootIno, "spilled-committed", S_IFREG | 0644, 0, 0, false);
  ASSERT_TRUE(b.ok());
  const std::string content = Content("y", 9000, 4);
  auto loc = store_->WriteProvisionalRecord(b->attr.ino, {content});
  ASSERT_TRUE(loc.ok());
  Attr at = b->attr;
  at.size = content.size();
  ASSERT_TRUE(store_->CommitFile(b->attr.ino, *loc, at).ok());
  CloseStore();
  auto o = Opts();
  o.verify_data = true;
  auto r = Run(o);
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  ASSERT_EQ(r.Count(FsckKind::kOrphanRecord), 1u) << Describe(r);
  EXPECT_NE(Find(r, FsckKind::kOrphanRecord)->detail.find("provisional"), std::string::npos);
  EXPECT_EQ(r.nodes[0].provisional_records, 2u);
  EXPECT_EQ(r.nodes[0].orphan_records, 1u);
  EXPECT_EQ(r.nodes[0].orphan_bytes, 70000u);
  EXPECT_EQ(r.nodes[0].dead_bytes, 70000u);
  // After a remount (recovery) the committed spill reads back, the orphan is nowhere.
  OpenStore();
  auto n = store_->Lookup(kRootIno, "spilled-committed");
  ASSERT_TRUE(n.ok());
  std::string out(content.size(), '\0');
  size_t got = 0;
  ASSERT_TRUE(store_->Read(n->location, 0, out.size(), out.data(), &got).ok());
  EXPECT_EQ(out, content);
  EXPECT_TRUE(store_->Lookup(kRootIno, "spilled-unlinked").status().IsNotFound());
  CloseStore();
}

TEST_F(FsckTest, StaleTempFileIsRemovedByRepair) {
  OpenStore();
  WriteSet();
  CloseStore();
  const std::string tmp = NodeDir() + "/peers.tmp";
  { std::ofstream(tmp) << "half-written"; }
  auto r = Run(Opts());
  EXPECT_EQ(r.problems, 1u) << Describe(r);
  ASSERT_NE(Find(r, FsckKind::kStaleTempFile), nullptr);
  EXPECT_EQ(Find(r, FsckKind::kStaleTempFile)->file, tmp);
  auto fixed = Run(Opts(true));
  EXPECT_EQ(fixed.repaired, 1u);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(Run(Opts()).problems, 0u);
}

TEST_F(FsckTest, RepairIsRefusedWhileALiveMountOwnsTheNode) {
  OpenStore();
  auto locs = WriteSet();
  CloseStore();
  FlipByte(SegPath(locs["b"]), locs["b"].record_offset + 9);  // b becomes a dangling entry
  OpenStore();     // generation 2, live (this process, fresh heartbeat)
  const auto journals = JournalPaths();
  auto r = Run(Opts(/*repair=*/true, /*owner_dead=*/false));
  EXPECT_TRUE(r.repair_refused);
  ASSERT_EQ(r.nodes.size(), 1u);
  EXPECT_TRUE(r.nodes[0].live);
  EXPECT_TRUE(r.nodes[0].repair_refused);
  EXPECT_NE(r.nodes[0].repair_refused_reason.find("alive"), std::string::npos) << r.nodes[0].repair_refused_reason;
  EXPECT_EQ(r.Count(FsckKind::kDanglingEntry, true), 1u) << Describe(r);
  EXPECT_EQ(r.Count(FsckKind::kUnsealedSegment, true), 0u) << Describe(r);  // not the live one's active one
  EXPECT_EQ(r.repaired, 0u);
  EXPECT_EQ(JournalPaths(), journals);  // nothing written
  CloseStore();
}

TEST_F(FsckTest, RebuiltIndexEqualsTheStoreIndex) {
  OpenStore();
  WriteSet();
  auto dir = store_->Mkdir(kRootIno, "dir", 0755, 0, 0);
  ASSERT_TRUE(dir.ok());
  uint64_t ino = 0, replaced = 0;
  ASSERT_TRUE(store_->Rename(kRootIno, "a", dir->attr.ino, "a2", 0, &replaced).ok());
  ASSERT_TRUE(store_->Unlink(kRootIno, "c", &ino).ok());
  CloseStore();
  auto o = Opts();
  o.rebuild_index_dir = root_ + "/rebuilt";
  auto r = Run(o);
  EXPECT_EQ(r.problems, 0u) << Describe(r);
  EXPECT_EQ(r.index_files, 4u);
  IndexDbOptions io;
  io.node_id = node_;
  io.dir = index_;
  auto mine = IndexDb::Open(io);
  ASSERT_TRUE(mine.ok());
  io.dir = root_ + "/rebuilt";
  auto rebuilt = IndexDb::Open(io);
  ASSERT_TRUE(rebuilt.ok());
  auto d1 = (*mine)->DumpByPath();
  auto d2 = (*rebuilt)->DumpByPath();
  ASSERT_TRUE(d1.ok() && d2.ok());
  EXPECT_EQ(d1->size(), 5u);  // dir, dir/a2, b, d, e
  EXPECT_TRUE(*d1 == *d2);
  EXPECT_TRUE((*rebuilt)->WasCleanlyClosed());
}

TEST_F(FsckTest, MissingSegmentMakesItsFilesDanglingAndRepairUnlinksThem) {
  segment_size_ = 1ull << 20;
  OpenStore();
  std::map<std::string, Location> locs;
  for (int i = 0; i < 8; ++i) {
    std::string n = "f" + std::to_string(i);
    locs[n] = WriteFile(n, Content(n, 300000, 3));
  }
  CloseStore();
  const SegmentId first = locs["f0"].segment;
  size_t in_first = 0;
  for (auto& [n, l] : locs) in_first += l.segment == first;
  ASSERT_GE(in_first, 2u);
  ASSERT_LT(in_first, 8u);
  fs::remove(SegmentFilePath(backing_, first));
  auto r = Run(Opts());
  EXPECT_EQ(r.Count(FsckKind::kDanglingEntry), in_first) << Describe(r);
  EXPECT_EQ(r.problems, in_first);
  EXPECT_NE(Find(r, FsckKind::kDanglingEntry)->detail.find("missing"), std::string::npos);
  auto fixed = Run(Opts(true));
  EXPECT_EQ(fixed.repaired, in_first);
  EXPECT_EQ(Run(Opts()).problems, 0u);
  OpenStore();  // over its clean local index: applies the repair's UNLINKs
  for (auto& [n, l] : locs) {
    Status st;
    std::string got = ReadAll(n, &st);
    if (l.segment == first) {
      EXPECT_TRUE(st.IsNotFound()) << n << " " << st.ToString();
    } else {
      EXPECT_TRUE(st.ok() && got == Content(n, 300000, 3)) << n << " " << st.ToString();
    }
  }
}

// A segment evicted by its live owner between fsck's listing and its open (seen on S3 and possible on
// NFS): the check goes on; files still located there are dangling entries, as for a missing segment.
TEST_F(FsckTest, SegmentRemovedDuringTheCheckIsNotFatal) {
  segment_size_ = 1ull << 20;
  OpenStore();
  std::map<std::string, Location> locs;
  for (int i = 0; i < 8; ++i) {
    std::string n = "f" + std::to_string(i);
    locs[n] = WriteFile(n, Content(n, 300000, 3));
  }
  CloseStore();
  const SegmentId first = locs["f0"].segment;
  size_t in_first = 0;
  for (auto& [n, l] : locs) in_first += l.segment == first;
  ASSERT_GE(in_first, 2u);
  FaultInjectionEnv env(Env::Posix());
  FaultRule gone;
  gone.ops = kFaultOpen;
  gone.path_substr = fs::path(SegmentFilePath(backing_, first)).filename().string();
  gone.err = ENOENT;
  int id = env.AddFault(gone);
  FsckOptions o = Opts();
  o.env = &env;
  auto r = Run(o);
  EXPECT_GE(env.FaultFired(id), 1u);
  EXPECT_EQ(r.Count(FsckKind::kDanglingEntry), in_first) << Describe(r);
  EXPECT_EQ(r.problems, in_first);
  ASSERT_EQ(r.nodes.size(), 1u);
  EXPECT_EQ(r.nodes[0].live_files, 8u - in_first);
}

TEST_F(FsckTest, BadInputIsInvalidArgument) {
  FsckOptions o;
  o.backing_dir = root_ + "/nope";
  EXPECT_TRUE(RunFsck(o).status().IsInvalidArgument());
  o.backing_dir = backing_;  // exists, but holds no kvfs data
  EXPECT_TRUE(RunFsck(o).status().IsInvalidArgument());
  OpenStore();
  CloseStore();
  o.node = "other";
  EXPECT_TRUE(RunFsck(o).status().IsInvalidArgument());
}

}  // namespace
}  // namespace kvfs
