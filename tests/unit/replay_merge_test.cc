// ReplayNodes / ReplayAllNodes (index/replay.h): a rebuild applies the nodes' journal tails as one
// history merged by stamp, so an entry that one node wrote about a name another node bound (a SETATTR,
// an XATTR, the RENAME of the directory holding it) lands on that name, as it did on the live nodes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "blockstore/node_dir.h"
#include "index/index_db.h"
#include "index/inode.h"
#include "index/journal.h"
#include "index/replay.h"

namespace kvfs {
namespace {

namespace fs = std::filesystem;

class ReplayMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/kvfs-replay-merge-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    backing_ = root_ + "/backing";
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes `entries` as journal-1-0 of `node`.
  void WriteJournal(const std::string& node, const std::vector<JournalEntry>& entries) {
    const std::string dir = NodeDirPath(backing_, node);
    fs::create_directories(dir);
    JournalWriterOptions o;
    o.env = Env::Posix();
    o.dir = dir;
    o.node = node;
    o.generation = 1;
    auto w = JournalWriter::Open(o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& e : entries) (*w)->Append(e);
    ASSERT_TRUE((*w)->Sync().ok());
  }

  std::unique_ptr<IndexDb> OpenIndex(const std::string& name) {
    IndexDbOptions io;
    io.dir = root_ + "/" + name;
    io.node_id = "joiner";
    auto idx = IndexDb::Open(io);
    EXPECT_TRUE(idx.ok()) << idx.status().ToString();
    return std::move(*idx);
  }

  static EntryAttrs FileAttrs(uint32_t mode, uint64_t size) {
    EntryAttrs a;
    a.mode = S_IFREG | mode;
    a.size = size;
    a.mtime_ns = 1000;
    return a;
  }
  static Location Rec(const std::string& node, uint64_t seq, uint64_t length) {
    Location l;
    l.segment = SegmentId{node, 1, seq};
    l.record_offset = 0;
    l.value_offset = 4096;
    l.length = length;
    return l;
  }

  std::string root_, backing_;
};

// nb binds /y and /d/z; na (having applied them, so with higher stamps) chmods /y, sets and removes
// xattrs of it and renames /d to /d2; nb then binds /d2/w. "na" sorts first, so a node-by-node replay
// met na's entries before the names they change existed and dropped them.
TEST_F(ReplayMergeTest, PeerChangesToANameApplyAfterItsBinding) {
  WriteJournal("nb", {JournalEntry::Put("/y", Rec("nb", 1, 100), FileAttrs(0644, 100), 10),
                      JournalEntry::Put("/d/z", Rec("nb", 1, 7), FileAttrs(0644, 7), 12),
                      JournalEntry::Xattr("/y", "user.gone", "x", false, 13),
                      JournalEntry::Put("/d2/w", Rec("nb", 2, 9), FileAttrs(0640, 9), 30)});
  WriteJournal("na", {JournalEntry::Setattr("/y", FileAttrs(0600, 100), kSetMode, 20),
                      JournalEntry::Xattr("/y", "user.crc", "abc", false, 21),
                      JournalEntry::Xattr("/y", "user.gone", "", true, 22),
                      JournalEntry::Rename("/d", "/d2", Location{}, 23)});
  auto idx = OpenIndex("idx");
  std::map<std::string, ReplayNodeResult> res;
  ASSERT_TRUE(ReplayAllNodes(Env::Posix(), backing_, idx.get(), &res).ok());
  EXPECT_EQ(res["na"].entries, 4u);
  EXPECT_EQ(res["nb"].entries, 4u);
  auto dump = idx->DumpByPath();
  ASSERT_TRUE(dump.ok());
  ASSERT_TRUE(dump->count("/y"));
  EXPECT_EQ(dump->at("/y").mode, S_IFREG | 0600u);
  EXPECT_EQ(dump->at("/y").size, 100u);
  EXPECT_EQ(dump->at("/y").xattrs, (std::map<std::string, std::string>{{"user.crc", "abc"}}));
  EXPECT_EQ(dump->count("/d"), 0u);
  EXPECT_EQ(dump->count("/d/z"), 0u);
  ASSERT_TRUE(dump->count("/d2/z"));
  EXPECT_EQ(dump->at("/d2/z").size, 7u);
  ASSERT_TRUE(dump->count("/d2/w"));
  EXPECT_EQ(dump->at("/d2/w").mode, S_IFREG | 0640u);
  // Both nodes' positions are recorded (a tailer resumes each where the replay stopped).
  auto pa = idx->GetAppliedPosition("na"), pb = idx->GetAppliedPosition("nb");
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(*pa, "1-0@" + std::to_string(fs::file_size(NodeDirPath(backing_, "na") + "/" + JournalFileName(1, 0))));
  EXPECT_EQ(*pb, "1-0@" + std::to_string(fs::file_size(NodeDirPath(backing_, "nb") + "/" + JournalFileName(1, 0))));
}

// Each journal keeps its own order even where its stamps go back (a MOVE carries its PUT's old stamp):
// nb's second PUT of /f (stamp 40) follows its MOVE (stamp 10) and na's PUT (stamp 25) comes between
// nb's first PUT and that second one, so nb's content at stamp 40 wins; and equal stamps of two nodes
// resolve by node id, as last-writer-wins does.
TEST_F(ReplayMergeTest, EachJournalKeepsItsOrderAndLastWriterWins) {
  WriteJournal("nb", {JournalEntry::Put("/f", Rec("nb", 1, 10), FileAttrs(0644, 10), 10),
                      JournalEntry::Move("/f", Rec("nb", 1, 10), Rec("nb", 3, 10), 10),
                      JournalEntry::Put("/f", Rec("nb", 4, 11), FileAttrs(0644, 11), 40),
                      JournalEntry::Put("/g", Rec("nb", 4, 5), FileAttrs(0644, 5), 50)});
  WriteJournal("na", {JournalEntry::Put("/f", Rec("na", 1, 20), FileAttrs(0644, 20), 25),
                      JournalEntry::Put("/g", Rec("na", 1, 6), FileAttrs(0644, 6), 50)});
  auto idx = OpenIndex("idx");
  ASSERT_TRUE(ReplayAllNodes(Env::Posix(), backing_, idx.get()).ok());
  auto dump = idx->DumpByPath();
  ASSERT_TRUE(dump.ok());
  ASSERT_TRUE(dump->count("/f") && dump->count("/g"));
  EXPECT_EQ(dump->at("/f").location.segment, (SegmentId{"nb", 1, 4}));
  EXPECT_EQ(dump->at("/f").size, 11u);
  EXPECT_EQ(dump->at("/g").location.segment, (SegmentId{"nb", 1, 4}));  // (50, "nb") > (50, "na")
  // ReplayNode (one source) replays that node alone.
  ReplayNodeResult one;
  auto idx2 = OpenIndex("idx2");
  ASSERT_TRUE(ReplayNode(Env::Posix(), backing_, "na", idx2.get(), &one).ok());
  auto d2 = idx2->DumpByPath();
  ASSERT_TRUE(d2.ok());
  ASSERT_TRUE(d2->count("/f"));
  EXPECT_EQ(d2->at("/f").location.segment, (SegmentId{"na", 1, 1}));
  EXPECT_EQ(one.entries, 2u);
}

// A MOVE names its file's path when it is written but carries the file's PUT stamp. nb bound /d/bf
// (stamp 5); na renamed /d to /d2 (stamp 20); nb, having applied the rename, re-appended bf's record
// (MOVE /d2/bf, stamp 5) and dropped the old segment (stamp 21). The merge applies the MOVE at its
// stamp, before the RENAME: it finds bf by its old location. Before, it found no /d2/bf, changed
// nothing, and the DROP removed the file: the rebuilt /d2 was empty.
TEST_F(ReplayMergeTest, AMoveWrittenAfterAPeersDirectoryRenameFollowsItsRecord) {
  EntryAttrs da;
  da.mode = S_IFDIR | 0755;
  const Location old_rec = Rec("nb", 1, 10), new_rec = Rec("nb", 2, 10);
  WriteJournal("na", {JournalEntry::Mkdir("/d", da, 1), JournalEntry::Rename("/d", "/d2", Location{}, 20)});
  WriteJournal("nb", {JournalEntry::Put("/d/bf", old_rec, FileAttrs(0644, 10), 5),
                      JournalEntry::Move("/d2/bf", old_rec, new_rec, 5),
                      JournalEntry::Drop(old_rec.segment, 21)});
  auto idx = OpenIndex("idx");
  ASSERT_TRUE(ReplayAllNodes(Env::Posix(), backing_, idx.get()).ok());
  auto dump = idx->DumpByPath();
  ASSERT_TRUE(dump.ok());
  EXPECT_EQ(dump->count("/d"), 0u);
  EXPECT_EQ(dump->count("/d/bf"), 0u);
  ASSERT_TRUE(dump->count("/d2/bf"));
  EXPECT_EQ(dump->at("/d2/bf").location, new_rec);
  EXPECT_EQ(dump->at("/d2/bf").size, 10u);
  auto dropped = idx->GetSegment(old_rec.segment);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(dropped->state, SegmentState::kDropped);
  auto kept = idx->GetSegment(new_rec.segment);
  EXPECT_TRUE(!kept.ok() || kept->state != SegmentState::kDropped);
}

// The same through a directory exchange (na swaps /x and /y at stamp 20 after nb bound /x/bf; nb
// journals MOVE /y/bf), and a MOVE found by its record never brings back a file unlinked later (na
// unlinks /y/bh at 30) nor overrides a newer PUT (na rewrites /y/g at 31).
TEST_F(ReplayMergeTest, AMoveAfterAPeersExchangeFollowsItsRecordAndNeverUndoesLaterChanges) {
  EntryAttrs da;
  da.mode = S_IFDIR | 0755;
  const Location f_old = Rec("nb", 1, 10), f_new = Rec("nb", 2, 10);
  auto at = [](Location l, uint64_t off) {
    l.record_offset = off;
    l.value_offset = off + 4096;
    return l;
  };
  const Location g_old = at(Rec("nb", 1, 20), 8192), g_new = at(Rec("nb", 2, 20), 8192), g_na = Rec("na", 1, 30);
  const Location h_old = at(Rec("nb", 1, 40), 16384), h_new = at(Rec("nb", 2, 40), 16384);
  WriteJournal("na", {JournalEntry::Mkdir("/x", da, 1), JournalEntry::Mkdir("/y", da, 2),
                      JournalEntry::Exchange("/x", "/y", 20),
                      JournalEntry::Unlink("/y/bh", 30),
                      JournalEntry::Put("/y/g", g_na, FileAttrs(0600, 30), 31)});
  WriteJournal("nb", {JournalEntry::Put("/x/bf", f_old, FileAttrs(0644, 10), 5),
                      JournalEntry::Put("/x/g", g_old, FileAttrs(0644, 20), 6),
                      JournalEntry::Put("/x/bh", h_old, FileAttrs(0644, 40), 7),
                      JournalEntry::Move("/y/bf", f_old, f_new, 5),
                      JournalEntry::Move("/y/g", g_old, g_new, 6),
                      JournalEntry::Move("/y/bh", h_old, h_new, 7),
                      JournalEntry::Drop(f_old.segment, 21)});
  auto idx = OpenIndex("idx");
  ASSERT_TRUE(ReplayAllNodes(Env::Posix(), backing_, idx.get()).ok());
  auto dump = idx->DumpByPath();
  ASSERT_TRUE(dump.ok());
  EXPECT_EQ(dump->count("/x/bf"), 0u);
  ASSERT_TRUE(dump->count("/y/bf"));
  EXPECT_EQ(dump->at("/y/bf").location, f_new);
  ASSERT_TRUE(dump->count("/y/g"));
  EXPECT_EQ(dump->at("/y/g").location, g_na);
  EXPECT_EQ(dump->at("/y/g").size, 30u);
  EXPECT_EQ(dump->count("/y/bh"), 0u);
  EXPECT_EQ(dump->count("/x/bh"), 0u);
}

// Two files sharing one record (a link(2) copy of an extent file: one MOVE per file, each naming its
// own path): MOVEs found by their record go each to the file of their leaf name, as on the writer.
TEST_F(ReplayMergeTest, MovesOfASharedRecordFoundByTheRecordKeepTheirOwnFiles) {
  EntryAttrs da;
  da.mode = S_IFDIR | 0755;
  const Location r = Rec("nb", 1, 10), r2 = Rec("nb", 2, 10), r3 = Rec("nb", 3, 10);
  WriteJournal("na", {JournalEntry::Mkdir("/d", da, 1), JournalEntry::Rename("/d", "/e", Location{}, 20)});
  WriteJournal("nb", {JournalEntry::Put("/d/f1", r, FileAttrs(0644, 10), 5),
                      JournalEntry::Put("/d/f2", r, FileAttrs(0644, 10), 6),
                      JournalEntry::Move("/e/f2", r, r2, 6),
                      JournalEntry::Move("/e/f1", r, r3, 5),
                      JournalEntry::Drop(r.segment, 21)});
  auto idx = OpenIndex("idx");
  ASSERT_TRUE(ReplayAllNodes(Env::Posix(), backing_, idx.get()).ok());
  auto dump = idx->DumpByPath();
  ASSERT_TRUE(dump.ok());
  ASSERT_TRUE(dump->count("/e/f1") && dump->count("/e/f2"));
  EXPECT_EQ(dump->at("/e/f1").location, r3);
  EXPECT_EQ(dump->at("/e/f2").location, r2);
}

// A peer's rename of the file itself is journaled as UNLINK and a PUT of the new name bound to the same
// record (na: /f -> /g at stamp 20, after nb bound /f at 5); nb, having applied it, re-appends the
// record (MOVE /g, stamp 5) and drops the old segment. The MOVE is applied where nb wrote it, after the
// entries nb had applied (before its next entry of a later stamp, the DROP): /g follows it to the new
// record. Before, the MOVE came first (moving /f), na's PUT bound /g to the old record again, and the
// DROP removed /g.
TEST_F(ReplayMergeTest, AMoveWrittenAfterAPeersFileRenameFollowsTheRenamedFile) {
  const Location old_rec = Rec("nb", 1, 10), new_rec = Rec("nb", 2, 10);
  WriteJournal("na", {JournalEntry::Unlink("/f", 20), JournalEntry::Put("/g", old_rec, FileAttrs(0644, 10), 20)});
  WriteJournal("nb", {JournalEntry::Put("/f", old_rec, FileAttrs(0644, 10), 5),
                      JournalEntry::Move("/g", old_rec, new_rec, 5),
                      JournalEntry::Drop(old_rec.segment, 21)});
  auto idx = OpenIndex("idx");
  ASSERT_TRUE(ReplayAllNodes(Env::Posix(), backing_, idx.get()).ok());
  auto dump = idx->DumpByPath();
  ASSERT_TRUE(dump.ok());
  EXPECT_EQ(dump->count("/f"), 0u);
  ASSERT_TRUE(dump->count("/g"));
  EXPECT_EQ(dump->at("/g").location, new_rec);
}

}  // namespace
}  // namespace kvfs
