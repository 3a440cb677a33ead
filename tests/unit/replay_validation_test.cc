// JournalEntryToApplyOp (index/replay.h): entries from a peer's journal whose segment ids name an invalid
// node id (a path outside <backing>/.kvfs/v1/nodes/) are skipped, never applied.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "index/replay.h"

namespace kvfs {
namespace {

Location Loc(const std::string& node) {
  Location l;
  l.segment = SegmentId{node, 1, 2};
  l.record_offset = 4096;
  l.value_offset = 8192;
  l.length = 10;
  return l;
}

TEST(ReplayValidation, SegmentNodeIdsMustBeValid) {
  EntryAttrs a;
  a.mode = 0100644;
  a.size = 10;
  ApplyOp op;
  EXPECT_TRUE(JournalEntryToApplyOp(JournalEntry::Put("/f", Loc("gpu-7.a_b"), a, 5), &op));
  EXPECT_EQ(op.kind, ApplyOp::Kind::kPut);
  EXPECT_EQ(op.location.segment.node, "gpu-7.a_b");
  EXPECT_TRUE(JournalEntryToApplyOp(JournalEntry::Put("/small", Location{}, a, 5, "inline"), &op));
  for (const std::string& bad : std::vector<std::string>{"../../../../etc", "..", "a/b", "x y", std::string(129, 'n')}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(JournalEntryToApplyOp(JournalEntry::Put("/f", Loc(bad), a, 5), &op));
    EXPECT_FALSE(JournalEntryToApplyOp(JournalEntry::Rename("/f", "/g", Loc(bad), 5), &op));
    EXPECT_FALSE(JournalEntryToApplyOp(JournalEntry::Move("/f", Loc(bad), Loc("ok"), 5), &op));
    EXPECT_FALSE(JournalEntryToApplyOp(JournalEntry::Move("/f", Loc("ok"), Loc(bad), 5), &op));
    EXPECT_FALSE(JournalEntryToApplyOp(JournalEntry::Seal(SegmentId{bad, 1, 2}, 5), &op));
    EXPECT_FALSE(JournalEntryToApplyOp(JournalEntry::Drop(SegmentId{bad, 1, 2}, 5), &op));
  }
  EXPECT_TRUE(JournalEntryToApplyOp(JournalEntry::Drop(SegmentId{"ok", 1, 2}, 5), &op));
  EXPECT_EQ(op.kind, ApplyOp::Kind::kDrop);
}

// A CUT of a segment file becomes an index op (SegmentInfo::cut, carried by snapshots); a CUT of a journal
// file only limits the reading of that file and applies nothing.
TEST(ReplayValidation, SegmentCutsApplyJournalCutsDoNot) {
  ApplyOp op;
  EXPECT_TRUE(JournalEntryToApplyOp(JournalEntry::Cut(FileRef{FileRef::Kind::kSegment, "ok", 3, 4}, 8192, 5), &op));
  EXPECT_EQ(op.kind, ApplyOp::Kind::kCut);
  EXPECT_TRUE(op.segment == (SegmentId{"ok", 3, 4}));
  EXPECT_EQ(op.cut_offset, 8192u);
  EXPECT_FALSE(JournalEntryToApplyOp(JournalEntry::Cut(FileRef{FileRef::Kind::kJournal, "ok", 3, 0}, 100, 5), &op));
  EXPECT_FALSE(JournalEntryToApplyOp(JournalEntry::Cut(FileRef{FileRef::Kind::kSegment, "../x", 3, 4}, 8192, 5), &op));
}

}  // namespace
}  // namespace kvfs
