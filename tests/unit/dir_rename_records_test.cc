// The records of directory renames (index_db.h DirRenameRecord; docs/design.md §3 "Rebuild order"): a
// node's snapshot carries the records of its directory renames (RENAME entries, snapshot version 4), and
// a rebuild redirects every entry older than a record that names its source (or a path under it) to
// where the rename moved it, as the live nodes did (engine/dir_renames.h). Before, the RENAME lay behind
// the renaming node's snapshot, which holds the renamed directory but not the rename: a peer's older
// entry (its journal tail, or its own snapshot) re-created the old path beside an empty new one.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <set>
#include <tuple>
#include <vector>

#include "blockstore/node_dir.h"
#include "engine/checkpoint.h"
#include "index/dir_redirect.h"
#include "index/index_db.h"
#include "index/inode.h"
#include "index/journal.h"
#include "index/replay.h"
#include "index/snapshot.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

class DirRenameRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/kvfs-dirrec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    backing_ = root_ + "/backing";
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes `entries` as journal-1-<number> of `node`.
  void WriteJournal(const std::string& node, uint64_t number, const std::vector<JournalEntry>& entries) {
    const std::string dir = NodeDirPath(backing_, node);
    fs::create_directories(dir);
    JournalWriterOptions o;
    o.env = Env::Posix();
    o.dir = dir;
    o.node = node;
    o.generation = 1;
    o.first_file_number = number;
    auto w = JournalWriter::Open(o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& e : entries) (*w)->Append(e);
    ASSERT_TRUE((*w)->Sync().ok());
  }

  std::unique_ptr<IndexDb> OpenIndex(const std::string& name, const std::string& node) {
    IndexDbOptions io;
    io.dir = root_ + "/" + name;
    io.node_id = node;
    auto idx = IndexDb::Open(io);
    EXPECT_TRUE(idx.ok()) << idx.status().ToString();
    return std::move(*idx);
  }

  // Applies journal entries of `node` to idx (as its tailer or its own journal would).
  static void Apply(IndexDb* idx, const std::vector<JournalEntry>& entries, const std::string& node) {
    std::vector<ApplyOp> ops;
    for (const auto& e : entries) {
      ApplyOp op;
      ASSERT_TRUE(JournalEntryToApplyOp(e, &op));
      ops.push_back(op);
    }
    ASSERT_TRUE(idx->ApplyBatch(ops, node).ok());
  }

  // snapshot-1-1 of `node` (covering its journal-1-0) from idx.
  void Snapshot(IndexDb* idx, const std::string& node) {
    auto view = idx->NewView();
    ASSERT_TRUE(WriteSnapshotFromIndex(Env::Posix(), idx, *view, NodeDirPath(backing_, node), node, 1, 1, nullptr).ok());
  }

  // A rebuild of the whole export (a node joining, or a killed node's replay) into a fresh index.
  std::map<std::string, DumpEntry> Rebuilt(const std::string& tag, std::map<std::string, ReplayNodeResult>* res = nullptr,
                                           std::vector<DirRenameRecord>* records = nullptr) {
    auto idx = OpenIndex("rebuilt-" + tag, "joiner");
    EXPECT_TRUE(ReplayAllNodes(Env::Posix(), backing_, idx.get(), res).ok());
    if (records) *records = *idx->ListDirRenames();
    auto d = idx->DumpByPath();
    EXPECT_TRUE(d.ok());
    return *d;
  }

  static std::vector<std::string> Paths(const std::map<std::string, DumpEntry>& dump) {
    std::vector<std::string> out;
    for (const auto& [p, e] : dump) out.push_back(p);
    return out;
  }

  static EntryAttrs FileAttrs(uint64_t size) {
    EntryAttrs a;
    a.mode = S_IFREG | 0644;
    a.size = size;
    a.mtime_ns = 1000;
    return a;
  }
  static EntryAttrs DirAttrs() {
    EntryAttrs a;
    a.mode = S_IFDIR | 0755;
    return a;
  }
  static Location Rec(const std::string& node, uint64_t seq, uint64_t length) {
    Location l;
    l.segment = SegmentId{node, 1, seq};
    l.value_offset = 4096;
    l.length = length;
    return l;
  }

  // A ("na") renames B's ("nb") directory /d to /d2 at stamp 20, after it applied B's /d and /d/y
  // (stamps 5, 10), then checkpoints: its snapshot holds /d2 and the record, its journal-1-0 (covered)
  // the RENAME.
  void RenameByA(const std::vector<JournalEntry>& b_entries) {
    auto a = OpenIndex("idx-a", "na");
    Apply(a.get(), b_entries, "nb");
    ASSERT_TRUE(a->ResolvePath("/d/y").ok());
    ASSERT_TRUE(a->Rename(kRootIno, "d", kRootIno, "d2", 0, 20).ok());
    WriteJournal("na", 0, {JournalEntry::Rename("/d", "/d2", Location{}, 20)});
    Snapshot(a.get(), "na");
  }

  std::string root_, backing_;
};

const std::vector<JournalEntry> kBEntries = {
    JournalEntry::Mkdir("/d", EntryAttrs{S_IFDIR | 0755}, 5),
    JournalEntry::Put("/d/y", Location{SegmentId{"nb", 1, 1}, 0, 4096, 300}, EntryAttrs{S_IFREG | 0644, 0, 0, 300}, 10)};

// The bug of docs/semantics.md (Known bugs, fixed): B binds d/y, A renames d to d2 and checkpoints, B
// is killed before it checkpoints: its journal tail binds d/y. A joining node (and B's replay: the same
// rebuild) must have d2/y and no d.
TEST_F(DirRenameRecordTest, APeersSnapshotRecordRedirectsAnOlderJournalEntry) {
  RenameByA(kBEntries);
  WriteJournal("nb", 0, kBEntries);
  // A's snapshot carries the record first, as a RENAME without a location, and is version 4.
  std::vector<JournalEntry> snap;
  SnapshotInfo info;
  const std::string path = NodeDirPath(backing_, "na") + "/" + SnapshotFileName(1, 1);
  ASSERT_TRUE(ReadSnapshot(Env::Posix(), path, "na", [&](const JournalEntry& e) {
    snap.push_back(e);
    return Status::OK();
  }, &info).ok());
  ASSERT_FALSE(snap.empty());
  EXPECT_EQ(snap[0].op, JournalOp::kRename);
  EXPECT_EQ(snap[0].path, "/d");
  EXPECT_EQ(snap[0].path2, "/d2");
  EXPECT_EQ(snap[0].stamp, 20u);
  EXPECT_TRUE(snap[0].location.empty());
  std::string head(12, '\0');
  {
    FILE* f = fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(fread(head.data(), 1, 12, f), 12u);
    fclose(f);
  }
  EXPECT_EQ(static_cast<uint8_t>(head[8]), 4u) << "a snapshot with a RENAME record is version 4";

  std::map<std::string, ReplayNodeResult> res;
  std::vector<DirRenameRecord> records;
  auto dump = Rebuilt("join", &res, &records);
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/d2", "/d2/y"}));
  ASSERT_TRUE(dump.count("/d2/y"));
  EXPECT_EQ(dump.at("/d2/y").location.segment, (SegmentId{"nb", 1, 1}));
  EXPECT_EQ(dump.at("/d2/y").size, 300u);
  EXPECT_EQ(res["na"].snapshot, path);
  EXPECT_EQ(res["nb"].redirected, 2u);  // MKDIR /d and PUT /d/y
  // The rebuilt index keeps the record (its own snapshots do not export it: not its rename).
  EXPECT_EQ(records, (std::vector<DirRenameRecord>{{"/d", "/d2", 20, "na"}}));
}

// The same when B checkpointed before it applied A's rename: B's snapshot binds d/y at its old stamp.
TEST_F(DirRenameRecordTest, APeersSnapshotRecordRedirectsAnOlderSnapshotEntry) {
  RenameByA(kBEntries);
  WriteJournal("nb", 0, kBEntries);
  auto b = OpenIndex("idx-b", "nb");
  Apply(b.get(), kBEntries, "nb");
  Snapshot(b.get(), "nb");
  std::map<std::string, ReplayNodeResult> res;
  auto dump = Rebuilt("join", &res);
  EXPECT_FALSE(res["nb"].snapshot.empty());
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/d2", "/d2/y"}));
  ASSERT_TRUE(dump.count("/d2/y"));
  EXPECT_EQ(dump.at("/d2/y").location.segment, (SegmentId{"nb", 1, 1}));
}

// A chain d -> d2 -> d3 by A: B's d/y (older than both) and d2/z (between them) end in d3; B's entries
// newer than the renames (d/new under a new d, d3/w) stay where they are. A's snapshot and B's journal.
TEST_F(DirRenameRecordTest, ChainsApplyOldestFirstAndNewerEntriesStay) {
  const auto put = [](const std::string& p, uint64_t seq, uint64_t stamp) {
    return JournalEntry::Put(p, Location{SegmentId{"nb", 1, seq}, 0, 4096, 100 + seq}, EntryAttrs{S_IFREG | 0644, 0, 0, 100 + seq},
                             stamp);
  };
  const std::vector<JournalEntry> b1 = {JournalEntry::Mkdir("/d", EntryAttrs{S_IFDIR | 0755}, 5), put("/d/y", 1, 10)};
  const std::vector<JournalEntry> b2 = {put("/d2/z", 2, 25)};
  const std::vector<JournalEntry> b3 = {put("/d/new", 3, 40), put("/d3/w", 4, 45)};
  {
    auto a = OpenIndex("idx-a", "na");
    Apply(a.get(), b1, "nb");
    ASSERT_TRUE(a->Rename(kRootIno, "d", kRootIno, "d2", 0, 20).ok());
    Apply(a.get(), b2, "nb");
    ASSERT_TRUE(a->Rename(kRootIno, "d2", kRootIno, "d3", 0, 30).ok());
    Apply(a.get(), b3, "nb");
    WriteJournal("na", 0, {JournalEntry::Rename("/d", "/d2", Location{}, 20), JournalEntry::Rename("/d2", "/d3", Location{}, 30)});
    Snapshot(a.get(), "na");
    EXPECT_EQ(*a->ListDirRenames("na"),
              (std::vector<DirRenameRecord>{{"/d", "/d2", 20, "na"}, {"/d2", "/d3", 30, "na"}}));
  }
  std::vector<JournalEntry> b = b1;
  b.insert(b.end(), b2.begin(), b2.end());
  b.insert(b.end(), b3.begin(), b3.end());
  WriteJournal("nb", 0, b);
  auto dump = Rebuilt("join");
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/d", "/d/new", "/d3", "/d3/w", "/d3/y", "/d3/z"}));
  ASSERT_TRUE(dump.count("/d3/y") && dump.count("/d3/z"));
  EXPECT_EQ(dump.at("/d3/y").location.segment.seq, 1u);
  EXPECT_EQ(dump.at("/d3/z").location.segment.seq, 2u);
}

// A damaged newest snapshot of A is not used (nor are its records: CollectSnapshotRecords makes the
// choice ApplyNewestSnapshot makes): the older one is, with its records.
TEST_F(DirRenameRecordTest, ADamagedNewestSnapshotFallsBackToAnOlderOneAndItsRecords) {
  RenameByA(kBEntries);
  WriteJournal("nb", 0, kBEntries);
  const std::string dir = NodeDirPath(backing_, "na");
  // A second snapshot (1-2) of A that is damaged; journal-1-1 of A is empty.
  WriteJournal("na", 1, {});
  {
    auto a = OpenIndex("idx-a", "na");
    auto view = a->NewView();
    ASSERT_TRUE(WriteSnapshotFromIndex(Env::Posix(), a.get(), *view, dir, "na", 1, 2, nullptr).ok());
  }
  {
    std::fstream f(dir + "/" + SnapshotFileName(1, 2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  std::map<std::string, ReplayNodeResult> res;
  auto dump = Rebuilt("join", &res);
  EXPECT_EQ(res["na"].snapshot, dir + "/" + SnapshotFileName(1, 1));
  EXPECT_EQ(res["na"].bad_snapshots.size(), 1u);
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/d2", "/d2/y"}));
}

// A node's own renames never move its own entries: A swaps its directories x and y through tmp; its
// snapshot binds y/f (the file A made in x before the swap, at its old stamp) and holds the three
// records. Redirected by stamp alone, y/f went back to x/f (y -> x is newer than it).
TEST_F(DirRenameRecordTest, ANodesOwnRecordsNeverMoveItsOwnEntries) {
  auto a = OpenIndex("idx-a", "na");
  const std::vector<JournalEntry> own = {
      JournalEntry::Mkdir("/x", EntryAttrs{S_IFDIR | 0755}, 1), JournalEntry::Mkdir("/y", EntryAttrs{S_IFDIR | 0755}, 2),
      JournalEntry::Put("/x/f", Location{SegmentId{"na", 1, 1}, 0, 4096, 11}, EntryAttrs{S_IFREG | 0644, 0, 0, 11}, 5),
      JournalEntry::Put("/y/g", Location{SegmentId{"na", 1, 2}, 0, 4096, 22}, EntryAttrs{S_IFREG | 0644, 0, 0, 22}, 6)};
  Apply(a.get(), own, "na");
  ASSERT_TRUE(a->Rename(kRootIno, "x", kRootIno, "tmp", 0, 10).ok());
  ASSERT_TRUE(a->Rename(kRootIno, "y", kRootIno, "x", 0, 11).ok());
  ASSERT_TRUE(a->Rename(kRootIno, "tmp", kRootIno, "y", 0, 12).ok());
  std::vector<JournalEntry> journal = own;
  journal.push_back(JournalEntry::Rename("/x", "/tmp", Location{}, 10));
  journal.push_back(JournalEntry::Rename("/y", "/x", Location{}, 11));
  journal.push_back(JournalEntry::Rename("/tmp", "/y", Location{}, 12));
  WriteJournal("na", 0, journal);
  Snapshot(a.get(), "na");
  std::map<std::string, ReplayNodeResult> res;
  auto dump = Rebuilt("join", &res);
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/x", "/x/g", "/y", "/y/f"}));
  ASSERT_TRUE(dump.count("/y/f"));
  EXPECT_EQ(dump.at("/y/f").size, 11u);
  EXPECT_EQ(res["na"].redirected, 0u);
}

// A peer's snapshot taken after it applied A's renames holds A's records too (with A's node in the
// RENAME's location), and its names already reflect them: A swaps x and y through tmp while x holds B's
// f; B applies the three renames and checkpoints (its snapshot binds y/f at f's old stamp). Redirected by
// A's records, y/f went back to x/f.
TEST_F(DirRenameRecordTest, APeersSnapshotIsNotRedirectedByTheRecordsItHolds) {
  const std::vector<JournalEntry> b_entries = {
      JournalEntry::Mkdir("/x", EntryAttrs{S_IFDIR | 0755}, 1), JournalEntry::Mkdir("/y", EntryAttrs{S_IFDIR | 0755}, 2),
      JournalEntry::Put("/x/f", Location{SegmentId{"nb", 1, 1}, 0, 4096, 11}, EntryAttrs{S_IFREG | 0644, 0, 0, 11}, 5)};
  const std::vector<JournalEntry> a_renames = {JournalEntry::Rename("/x", "/tmp", Location{}, 10),
                                               JournalEntry::Rename("/y", "/x", Location{}, 11),
                                               JournalEntry::Rename("/tmp", "/y", Location{}, 12)};
  {
    auto a = OpenIndex("idx-a", "na");
    Apply(a.get(), b_entries, "nb");
    Apply(a.get(), a_renames, "na");
    WriteJournal("na", 0, a_renames);
    Snapshot(a.get(), "na");
  }
  WriteJournal("nb", 0, b_entries);
  {
    auto b = OpenIndex("idx-b", "nb");
    Apply(b.get(), b_entries, "nb");
    Apply(b.get(), a_renames, "na");  // B's tailer applied A's renames: B holds their records
    EXPECT_EQ(b->ListDirRenames("na")->size(), 3u);
    Snapshot(b.get(), "nb");
  }
  std::vector<JournalEntry> snap;
  ASSERT_TRUE(ReadSnapshot(Env::Posix(), NodeDirPath(backing_, "nb") + "/" + SnapshotFileName(1, 1), "nb",
                           [&](const JournalEntry& e) {
                             snap.push_back(e);
                             return Status::OK();
                           }).ok());
  ASSERT_GE(snap.size(), 3u);
  EXPECT_EQ(snap[0].op, JournalOp::kRename);
  EXPECT_EQ(snap[0].location.segment.node, "na");  // a peer's record names its node
  std::map<std::string, ReplayNodeResult> res;
  std::vector<DirRenameRecord> records;
  auto dump = Rebuilt("join", &res, &records);
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/x", "/y", "/y/f"}));
  EXPECT_EQ(res["nb"].redirected, 0u);
  EXPECT_EQ(records.size(), 3u);
  for (const auto& r : records) EXPECT_EQ(r.node, "na");
}

// Directory RENAME_EXCHANGE (docs/semantics.md §2): A ("na") swaps its directories x and y while x holds
// B's ("nb") file bf and A's af. B applies the EXCHANGE and checkpoints: its snapshot binds y/bf and holds
// the exchange's record (a RENAME marked as an exchange, snapshot version 5). A is killed before it
// checkpoints: its journal tail still has the EXCHANGE. A joining node (and A's replay: the same rebuild)
// must have y/af and y/bf. Journaled as "swap these paths" (or as three RENAMEs through a temporary
// name) it applied the swap again on top of B's snapshot and ended with x/bf.
TEST_F(DirRenameRecordTest, ADirectoryExchangeInAJournalTailIsReflectedByAPeersSnapshotThatHoldsIt) {
  const std::vector<JournalEntry> a_before = {
      JournalEntry::Mkdir("/x", EntryAttrs{S_IFDIR | 0755}, 1), JournalEntry::Mkdir("/y", EntryAttrs{S_IFDIR | 0755}, 2),
      JournalEntry::Put("/x/af", Location{SegmentId{"na", 1, 1}, 0, 4096, 11}, EntryAttrs{S_IFREG | 0644, 0, 0, 11}, 3)};
  const std::vector<JournalEntry> b_entries = {
      JournalEntry::Put("/x/bf", Location{SegmentId{"nb", 1, 1}, 0, 4096, 22}, EntryAttrs{S_IFREG | 0644, 0, 0, 22}, 5)};
  {
    auto a = OpenIndex("idx-a", "na");
    Apply(a.get(), a_before, "na");
    Apply(a.get(), b_entries, "nb");
    // The local exchange keeps its record (both ways at once) and every name its binding.
    ASSERT_TRUE(a->Exchange(kRootIno, "x", kRootIno, "y", 20).ok());
    EXPECT_EQ(*a->ListDirRenames(), (std::vector<DirRenameRecord>{{"/x", "/y", 20, "na", true}}));
    EXPECT_EQ(Paths(*a->DumpByPath()), (std::vector<std::string>{"/x", "/y", "/y/af", "/y/bf"}));
  }
  std::vector<JournalEntry> a_journal = a_before;
  a_journal.push_back(JournalEntry::Exchange("/x", "/y", 20));
  WriteJournal("na", 0, a_journal);
  WriteJournal("nb", 0, b_entries);
  {
    auto b = OpenIndex("idx-b", "nb");
    Apply(b.get(), a_before, "na");
    Apply(b.get(), b_entries, "nb");
    Apply(b.get(), {JournalEntry::Exchange("/x", "/y", 20)}, "na");
    EXPECT_EQ(Paths(*b->DumpByPath()), (std::vector<std::string>{"/x", "/y", "/y/af", "/y/bf"}));
    EXPECT_EQ(*b->ListDirRenames(), (std::vector<DirRenameRecord>{{"/x", "/y", 20, "na", true}}));
    // Applied again (a tailer re-reading it, a replay): its record is there, nothing moves back.
    Apply(b.get(), {JournalEntry::Exchange("/x", "/y", 20)}, "na");
    EXPECT_EQ(Paths(*b->DumpByPath()), (std::vector<std::string>{"/x", "/y", "/y/af", "/y/bf"}));
    Snapshot(b.get(), "nb");
  }
  const std::string bsnap = NodeDirPath(backing_, "nb") + "/" + SnapshotFileName(1, 1);
  std::vector<JournalEntry> snap;
  ASSERT_TRUE(ReadSnapshot(Env::Posix(), bsnap, "nb", [&](const JournalEntry& e) {
    snap.push_back(e);
    return Status::OK();
  }).ok());
  ASSERT_FALSE(snap.empty());
  EXPECT_EQ(snap[0].op, JournalOp::kRename);
  EXPECT_TRUE(IsExchangeRecord(snap[0]));
  EXPECT_EQ(snap[0].location.segment.node, "na");
  EXPECT_EQ(snap[0].path, "/x");
  EXPECT_EQ(snap[0].path2, "/y");
  std::string head(12, '\0');
  {
    FILE* f = fopen(bsnap.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(fread(head.data(), 1, 12, f), 12u);
    fclose(f);
  }
  EXPECT_EQ(static_cast<uint8_t>(head[8]), 5u) << "a snapshot with an exchange record is version 5";
  std::map<std::string, ReplayNodeResult> res;
  std::vector<DirRenameRecord> records;
  auto dump = Rebuilt("join", &res, &records);
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/x", "/y", "/y/af", "/y/bf"}));
  ASSERT_TRUE(dump.count("/y/bf"));
  EXPECT_EQ(dump.at("/y/bf").location.segment, (SegmentId{"nb", 1, 1}));
  ASSERT_TRUE(dump.count("/y/af"));
  EXPECT_EQ(dump.at("/y/af").location.segment, (SegmentId{"na", 1, 1}));
  EXPECT_EQ(records, (std::vector<DirRenameRecord>{{"/x", "/y", 20, "na", true}}));
  EXPECT_EQ(res["nb"].redirected, 0u);  // B's snapshot already reflects the exchange
  // A's tail before its EXCHANGE (MKDIR x, MKDIR y, PUT x/af) follows the record; the EXCHANGE moves nothing.
  EXPECT_EQ(res["na"].redirected, 3u);
}

// The same exchange with no snapshot holding its record (both nodes killed before a checkpoint): the
// journal tails merged by stamp apply B's older x/bf first and the EXCHANGE then swaps it into y. And
// with A's snapshot holding the record (A checkpointed after the exchange) and B's journal tail binding
// x/bf (older than the exchange): B's entry follows the record to y/bf.
// A plain directory rename in the renaming node's journal tail, whose result a peer's snapshot holds: A
// (never checkpointed) bound /d/af and renamed /d to /d2; B applied both, bound /d2/bf after the rename
// and checkpointed (its snapshot holds /d2/bf and A's record); A is killed. A joining node applies B's
// snapshot (so /d2 exists) and A's journal: A's /d/af is A's own entry, older than A's own record (own
// records never move own entries), and the tail's RENAME then finds /d2 taken and stays put: /d/af was
// left under the old name beside /d2. The record pending for A's tail moves A's older entries instead.
TEST_F(DirRenameRecordTest, ADirectoryRenameInAJournalTailWhoseResultAPeersSnapshotHoldsMovesItsNodesEntries) {
  const std::vector<JournalEntry> a_before = {
      JournalEntry::Mkdir("/d", EntryAttrs{S_IFDIR | 0755}, 1),
      JournalEntry::Put("/d/af", Location{SegmentId{"na", 1, 1}, 0, 4096, 11}, EntryAttrs{S_IFREG | 0644, 0, 0, 11}, 3)};
  const std::vector<JournalEntry> b_entries = {
      JournalEntry::Put("/d2/bf", Location{SegmentId{"nb", 1, 1}, 0, 4096, 22}, EntryAttrs{S_IFREG | 0644, 0, 0, 22}, 25)};
  std::vector<JournalEntry> a_journal = a_before;
  a_journal.push_back(JournalEntry::Rename("/d", "/d2", Location{}, 20));
  WriteJournal("na", 0, a_journal);
  WriteJournal("nb", 0, b_entries);
  {
    auto b = OpenIndex("idx-b", "nb");
    Apply(b.get(), a_journal, "na");
    Apply(b.get(), b_entries, "nb");
    EXPECT_EQ(Paths(*b->DumpByPath()), (std::vector<std::string>{"/d2", "/d2/af", "/d2/bf"}));
    Snapshot(b.get(), "nb");
  }
  std::map<std::string, ReplayNodeResult> res;
  std::vector<DirRenameRecord> records;
  auto dump = Rebuilt("join", &res, &records);
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/d2", "/d2/af", "/d2/bf"}));
  ASSERT_TRUE(dump.count("/d2/af"));
  EXPECT_EQ(dump.at("/d2/af").location.segment, (SegmentId{"na", 1, 1}));
  EXPECT_EQ(records, (std::vector<DirRenameRecord>{{"/d", "/d2", 20, "na"}}));
}

TEST_F(DirRenameRecordTest, ADirectoryExchangeSurvivesJournalsOnlyAndTheExchangersCheckpoint) {
  const std::vector<JournalEntry> a_before = {
      JournalEntry::Mkdir("/x", EntryAttrs{S_IFDIR | 0755}, 1), JournalEntry::Mkdir("/y", EntryAttrs{S_IFDIR | 0755}, 2),
      JournalEntry::Put("/y/ag", Location{SegmentId{"na", 1, 2}, 0, 4096, 33}, EntryAttrs{S_IFREG | 0644, 0, 0, 33}, 3)};
  const std::vector<JournalEntry> b_entries = {
      JournalEntry::Put("/x/bf", Location{SegmentId{"nb", 1, 1}, 0, 4096, 22}, EntryAttrs{S_IFREG | 0644, 0, 0, 22}, 5)};
  std::vector<JournalEntry> a_journal = a_before;
  a_journal.push_back(JournalEntry::Exchange("/x", "/y", 20));
  WriteJournal("na", 0, a_journal);
  WriteJournal("nb", 0, b_entries);
  const std::vector<std::string> want{"/x", "/x/ag", "/y", "/y/bf"};
  EXPECT_EQ(Paths(Rebuilt("journals")), want);
  {
    auto a = OpenIndex("idx-a", "na");
    Apply(a.get(), a_before, "na");
    ASSERT_TRUE(a->Exchange(kRootIno, "x", kRootIno, "y", 20).ok());
    Snapshot(a.get(), "na");
  }
  std::map<std::string, ReplayNodeResult> res;
  auto dump = Rebuilt("a-checkpointed", &res);
  EXPECT_EQ(Paths(dump), want);
  EXPECT_EQ(res["nb"].redirected, 1u);
  ASSERT_TRUE(dump.count("/x/ag"));
  EXPECT_EQ(dump.at("/x/ag").size, 33u);
}

// An exchange of a directory with a file (a mixed exchange): one record too; B's older binding of the
// file's old name, in B's snapshot taken before it applied the exchange, follows the file to the
// directory's old name, and the directory's files go the other way.
TEST_F(DirRenameRecordTest, AnExchangeOfADirectoryWithAFileMovesBothWays) {
  const std::vector<JournalEntry> b_entries = {
      JournalEntry::Mkdir("/x", EntryAttrs{S_IFDIR | 0755}, 1),
      JournalEntry::Put("/x/bf", Location{SegmentId{"nb", 1, 1}, 0, 4096, 22}, EntryAttrs{S_IFREG | 0644, 0, 0, 22}, 5),
      JournalEntry::Put("/f", Location{SegmentId{"nb", 1, 2}, 0, 4096, 44}, EntryAttrs{S_IFREG | 0644, 0, 0, 44}, 6)};
  WriteJournal("nb", 0, b_entries);
  {
    auto b = OpenIndex("idx-b", "nb");
    Apply(b.get(), b_entries, "nb");
    Snapshot(b.get(), "nb");  // before the exchange
  }
  {
    auto a = OpenIndex("idx-a", "na");
    Apply(a.get(), b_entries, "nb");
    ASSERT_TRUE(a->Exchange(kRootIno, "x", kRootIno, "f", 20).ok());
    auto f = a->ResolvePath("/x");
    ASSERT_TRUE(f.ok());
    EXPECT_TRUE(S_ISREG(a->GetInode(*f)->attr.mode));
    WriteJournal("na", 0, {JournalEntry::Exchange("/x", "/f", 20)});
    Snapshot(a.get(), "na");
  }
  std::map<std::string, ReplayNodeResult> res;
  auto dump = Rebuilt("join", &res);
  EXPECT_EQ(Paths(dump), (std::vector<std::string>{"/f", "/f/bf", "/x"}));
  EXPECT_EQ(res["nb"].redirected, 3u);  // MKDIR /x, PUT /x/bf, PUT /f
  ASSERT_TRUE(dump.count("/x"));
  EXPECT_TRUE(S_ISREG(dump.at("/x").mode));
  EXPECT_EQ(dump.at("/x").size, 44u);
  EXPECT_TRUE(S_ISDIR(dump.at("/f").mode));
}

// A directory exchanged with a *staged* file (closed, its commit deferred to the next group commit: no
// PUT in the journal yet) is journaled as the directory's RENAME to the file's name, and the file's PUT
// under the directory's old name follows at its commit (store_namespace.cc ExchangeDirLocked). The case
// a breaker session found (2026-12-07, 12 of 12): A makes /d, /d/e and /d/f1, writes /f and exchanges
// /d and /f at once, and is killed before it checkpoints; C joins (it rebuilds from A's journal), changes
// A's file /f/f1 (a chmod: something to checkpoint) and checkpoints (its snapshot holds /f, /f/e and
// A's rename record); A's replay (and every node joining later) must have the file at /d. Before
// f3ab728 A's own entries before its RENAME (MKDIR /d, MKDIR /d/e) were not moved by A's own record,
// the RENAME then found /f taken (C's snapshot made it) and stayed put, and the file's PUT lost to the
// directory left at /d: the rebuild had /d and /d/e where the file was (the same bug as a plain
// directory rename: ADirectoryRenameInAJournalTailWhoseResultAPeersSnapshotHoldsMovesItsNodesEntries).
TEST_F(DirRenameRecordTest, ADirectoryExchangedWithAStagedFileSurvivesAPeersCheckpointAndTheExchangersReplay) {
  const std::vector<JournalEntry> a_journal = {
      JournalEntry::Mkdir("/d", DirAttrs(), 1), JournalEntry::Mkdir("/d/e", DirAttrs(), 2),
      JournalEntry::Rename("/d", "/f", Location{}, 3),
      JournalEntry::Put("/f/f1", Rec("na", 1, 11), FileAttrs(11), 4),
      JournalEntry::Put("/d", Rec("na", 2, 22), FileAttrs(22), 5)};
  WriteJournal("na", 0, a_journal);
  const std::vector<std::string> want{"/d", "/f", "/f/e", "/f/f1"};
  EXPECT_EQ(Paths(Rebuilt("journal-only")), want);
  {
    auto c = OpenIndex("idx-c", "nc");
    Apply(c.get(), a_journal, "na");
    EXPECT_EQ(Paths(*c->DumpByPath()), want);
    auto f1 = c->ResolvePath("/f/f1");
    ASSERT_TRUE(f1.ok());
    Attr attr;
    attr.mode = 0600;
    ASSERT_TRUE(c->SetAttr(*f1, attr, kSetMode, 30).ok());
    WriteJournal("nc", 0, {JournalEntry::Setattr("/f/f1", EntryAttrs{S_IFREG | 0600, 0, 0, 11}, kSetMode, 30)});
    Snapshot(c.get(), "nc");
  }
  std::map<std::string, ReplayNodeResult> res;
  auto dump = Rebuilt("after-c", &res);
  EXPECT_EQ(Paths(dump), want);
  ASSERT_TRUE(dump.count("/d"));
  EXPECT_TRUE(S_ISREG(dump.at("/d").mode));
  EXPECT_EQ(dump.at("/d").size, 22u);
  ASSERT_TRUE(dump.count("/f/f1"));
  EXPECT_EQ(dump.at("/f/f1").mode & 07777, 0600u);
  EXPECT_EQ(res["na"].redirected, 2u);  // MKDIR /d, MKDIR /d/e: moved by A's record that C's snapshot holds
}

// The redirect rule itself (shared by DirRenameLog and the rebuild).
TEST(DirRenameRedirectTest, OlderEntriesUnderTheSourceMoveNewerOnesAndSegmentOpsStay) {
  const DirRenameSet r({{"/d2", "/d3", 30, "a"}, {"/d", "/d2", 20, "a"}, {"/", "/x", 50, "a"}, {"/q", "/r", 0, "a"}});
  EXPECT_EQ(r.size(), 2u);  // the root's and stamp 0's are ignored
  std::string p = "/d/y";
  EXPECT_TRUE(r.RedirectPath(&p, 10, "b"));
  EXPECT_EQ(p, "/d3/y");
  p = "/d2/z";
  EXPECT_TRUE(r.RedirectPath(&p, 25, "b"));
  EXPECT_EQ(p, "/d3/z");
  p = "/d/new";
  EXPECT_FALSE(r.RedirectPath(&p, 40, "b"));
  p = "/dd/y";  // a sibling with the same prefix
  EXPECT_FALSE(r.RedirectPath(&p, 10, "b"));
  p = "/d";
  EXPECT_TRUE(r.RedirectPath(&p, 0, "b"));  // a snapshot's MKDIR (stamp 0)
  EXPECT_EQ(p, "/d3");
  p = "/d/y";
  EXPECT_TRUE(r.RedirectPath(&p, 20, "0"));  // equal stamps: by node ("0" < "a")
  EXPECT_EQ(p, "/d3/y");
  p = "/d/y";
  EXPECT_FALSE(r.RedirectPath(&p, 20, "b"));  // (20, "b") is not older than d -> d2 (20, "a")
  EXPECT_EQ(p, "/d/y");
  ApplyOp op;
  op.kind = ApplyOp::Kind::kRename;
  op.path = "/d/a";
  op.to = "/d/b";
  op.stamp = 10;
  EXPECT_TRUE(r.Redirect(&op, "b"));
  EXPECT_EQ(op.path, "/d3/a");
  EXPECT_EQ(op.to, "/d3/b");
  ApplyOp own = op;  // the renaming node's own entry
  own.path = "/d/a";
  own.node = "a";
  EXPECT_FALSE(r.Redirect(&own, "b"));
  op.kind = ApplyOp::Kind::kDirRenameRecord;
  op.path = "/d/x";
  EXPECT_FALSE(r.Redirect(&op, "b"));
  op.kind = ApplyOp::Kind::kSeal;
  EXPECT_FALSE(r.Redirect(&op, "b"));
}

// The indexed lookup (by each ancestor of a path) gives what the rule says record by record, oldest
// first, on random chains of renames over a small tree of names (renames back and forth, nested ones).
TEST(DirRenameRedirectTest, IndexedLookupEqualsTheRuleAppliedRecordByRecord) {
  const std::vector<std::string> dirs = {"/a", "/b", "/a/c", "/b/c", "/a/c/e", "/e", "/a/b", "/c"};
  uint64_t seed = 12345;
  auto next = [&]() {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return seed >> 33;
  };
  for (int round = 0; round < 200; round++) {
    std::vector<DirRenameRecord> recs;
    std::set<std::pair<uint64_t, std::string>> ids;  // one rename per (stamp, node)
    const int n = 1 + next() % 12;
    for (int i = 0; i < n; i++) {
      DirRenameRecord r{dirs[next() % dirs.size()], dirs[next() % dirs.size()], 1 + next() % 40,
                        std::string(1, char('a' + next() % 3))};
      if (r.from != r.to && ids.emplace(r.stamp, r.node).second) recs.push_back(r);
    }
    if (!recs.empty()) recs.push_back(recs.front());  // the same record from a second snapshot
    const DirRenameSet set(recs);
    EXPECT_EQ(set.size(), ids.size());  // the duplicate counts once
    std::vector<DirRenameRecord> sorted = set.records();
    for (int q = 0; q < 50; q++) {
      std::string path = dirs[next() % dirs.size()] + (next() % 2 ? "/f" : "");
      const uint64_t stamp = next() % 42;
      const std::string node(1, char('a' + next() % 3));
      std::string want = path;
      bool want_changed = false;
      for (const auto& r : sorted) {  // the rule, record by record
        if (!(std::tie(stamp, node) < std::tie(r.stamp, r.node)) || r.node == node) continue;
        const bool under = want.size() > r.from.size() && want.compare(0, r.from.size(), r.from) == 0 &&
                           want[r.from.size()] == '/';
        if (want == r.from || under) {
          want = r.to + want.substr(r.from.size());
          want_changed = true;
        }
      }
      std::string got = path;
      EXPECT_EQ(set.RedirectPath(&got, stamp, node), want_changed);
      EXPECT_EQ(got, want) << "round " << round << " path " << path << " stamp " << stamp << " node " << node;
    }
  }
}

// An exchange record maps both of its paths in one step (never x -> y -> x), and the records after it
// apply to where it sent a path; a node's own record applies to its own entries only when pending.
TEST(DirRenameRedirectTest, AnExchangeRedirectsBothWaysInOneStep) {
  const DirRenameSet r({{"/x", "/y", 20, "a", true}, {"/y", "/z", 30, "a", false}, {"/p", "/p/q", 40, "a", true}});
  EXPECT_EQ(r.size(), 2u);  // an exchange of a directory with its own descendant is ignored
  std::string p = "/x/f";
  EXPECT_TRUE(r.RedirectPath(&p, 10, "b"));
  EXPECT_EQ(p, "/z/f");  // x -> y by the exchange, then y -> z by the later rename
  p = "/y/g";
  EXPECT_TRUE(r.RedirectPath(&p, 10, "b"));
  EXPECT_EQ(p, "/x/g");  // y -> x, and not back
  p = "/y";
  EXPECT_TRUE(r.RedirectPath(&p, 10, "b"));
  EXPECT_EQ(p, "/x");
  p = "/y/g";
  EXPECT_TRUE(r.RedirectPath(&p, 25, "b"));  // newer than the exchange, older than the rename
  EXPECT_EQ(p, "/z/g");
  p = "/yy/g";
  EXPECT_FALSE(r.RedirectPath(&p, 10, "b"));
  p = "/x/f";
  EXPECT_FALSE(r.RedirectPath(&p, 10, "a"));  // the exchanging node's own entry
  const DirRenameKeys pending{{20, "a"}};
  EXPECT_TRUE(r.RedirectPath(&p, 10, "a", nullptr, &pending));
  EXPECT_EQ(p, "/y/f");  // only the pending exchange, not the rename
  const DirRenameKeys reflected{{20, "a"}};
  p = "/x/f";
  EXPECT_FALSE(r.RedirectPath(&p, 10, "b", &reflected));
  // As an op: an EXCHANGE entry's two paths, each by itself.
  ApplyOp op;
  op.kind = ApplyOp::Kind::kExchange;
  op.path = "/x/a";
  op.to = "/y/b";
  op.stamp = 10;
  EXPECT_TRUE(r.Redirect(&op, "b"));
  EXPECT_EQ(op.path, "/z/a");
  EXPECT_EQ(op.to, "/x/b");
}

}  // namespace
}  // namespace kvfs
