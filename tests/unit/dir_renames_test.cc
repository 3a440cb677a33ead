#include "engine/dir_renames.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

ApplyOp Op(ApplyOp::Kind kind, std::string path, uint64_t stamp, std::string node = "b") {
  ApplyOp op;
  op.kind = kind;
  op.path = std::move(path);
  op.stamp = stamp;
  op.node = std::move(node);
  return op;
}

TEST(DirRenameLogTest, AnOlderEntryUnderTheOldPathFollowsTheRename) {
  DirRenameLog log;
  log.Note("/d", "/d2", 100, "a");
  ApplyOp put = Op(ApplyOp::Kind::kPut, "/d/y", 90);
  EXPECT_TRUE(log.Redirect(&put, "unused"));
  EXPECT_EQ(put.path, "/d2/y");
  ApplyOp dir = Op(ApplyOp::Kind::kSetattr, "/d", 90);  // the directory itself
  EXPECT_TRUE(log.Redirect(&dir, ""));
  EXPECT_EQ(dir.path, "/d2");
  ApplyOp deep = Op(ApplyOp::Kind::kXattr, "/d/e/f/g", 99);
  EXPECT_TRUE(log.Redirect(&deep, ""));
  EXPECT_EQ(deep.path, "/d2/e/f/g");
  EXPECT_EQ(log.redirected(), 3u);
}

TEST(DirRenameLogTest, NewerEntriesSiblingsAndSegmentOpsStay) {
  DirRenameLog log;
  log.Note("/d", "/d2", 100, "a");
  for (ApplyOp op : {Op(ApplyOp::Kind::kPut, "/d/y", 101),    // newer: the writer meant /d
                     Op(ApplyOp::Kind::kPut, "/dd/y", 50),    // a sibling sharing the prefix
                     Op(ApplyOp::Kind::kPut, "/d2/y", 50),    // already under the new path
                     Op(ApplyOp::Kind::kPut, "/x/d/y", 50)}) {  // a d elsewhere
    const std::string before = op.path;
    EXPECT_FALSE(log.Redirect(&op, "")) << before;
    EXPECT_EQ(op.path, before);
  }
  ApplyOp seal = Op(ApplyOp::Kind::kSeal, "/d", 1);
  EXPECT_FALSE(log.Redirect(&seal, ""));
  EXPECT_EQ(log.redirected(), 0u);
}

TEST(DirRenameLogTest, EqualStampsAreOrderedByNodeAndTheBatchNodeStandsIn) {
  DirRenameLog log;
  log.Note("/d", "/d2", 100, "b");
  ApplyOp from_a = Op(ApplyOp::Kind::kPut, "/d/y", 100, "a");  // (100, a) < (100, b): older
  EXPECT_TRUE(log.Redirect(&from_a, ""));
  EXPECT_EQ(from_a.path, "/d2/y");
  ApplyOp from_c = Op(ApplyOp::Kind::kPut, "/d/y", 100, "c");  // newer
  EXPECT_FALSE(log.Redirect(&from_c, ""));
  ApplyOp unnamed = Op(ApplyOp::Kind::kPut, "/d/y", 100, "");   // the batch's node decides
  EXPECT_FALSE(log.Redirect(&unnamed, "c"));
  EXPECT_TRUE(log.Redirect(&unnamed, "a"));
  EXPECT_EQ(unnamed.path, "/d2/y");
}

TEST(DirRenameLogTest, ChainsApplyOldestFirstAndRenamesMoveBothEnds) {
  DirRenameLog log;
  log.Note("/d2", "/d3", 200, "a");  // noted out of stamp order: kept in stamp order
  log.Note("/d", "/d2", 100, "a");
  ApplyOp early = Op(ApplyOp::Kind::kPut, "/d/y", 50);
  EXPECT_TRUE(log.Redirect(&early, ""));
  EXPECT_EQ(early.path, "/d3/y");
  ApplyOp between = Op(ApplyOp::Kind::kPut, "/d2/z", 150);
  EXPECT_TRUE(log.Redirect(&between, ""));
  EXPECT_EQ(between.path, "/d3/z");
  ApplyOp rename = Op(ApplyOp::Kind::kRename, "/d/a", 60);
  rename.to = "/d/b";
  EXPECT_TRUE(log.Redirect(&rename, ""));
  EXPECT_EQ(rename.path, "/d3/a");
  EXPECT_EQ(rename.to, "/d3/b");
  EXPECT_EQ(log.size(), 2u);
}

TEST(DirRenameLogTest, KeepsAtMostTheNewestRenames) {
  DirRenameLog log;
  for (uint64_t i = 0; i < DirRenameLog::kMaxRenames + 10; ++i) {
    log.Note("/r" + std::to_string(i), "/s" + std::to_string(i), 1000 + i, "a");
  }
  EXPECT_EQ(log.size(), DirRenameLog::kMaxRenames);
  ApplyOp first = Op(ApplyOp::Kind::kPut, "/r0/y", 1);  // its rename was dropped
  EXPECT_FALSE(log.Redirect(&first, ""));
  ApplyOp last = Op(ApplyOp::Kind::kPut, "/r" + std::to_string(DirRenameLog::kMaxRenames + 9) + "/y", 1);
  EXPECT_TRUE(log.Redirect(&last, ""));
  ApplyOp ignored = Op(ApplyOp::Kind::kPut, "/q/y", 1);
  log.Note("/q", "/q", 5000, "a");  // onto itself: nothing to note
  log.Note("/q", "/q2", 0, "a");    // no stamp: nothing to note
  EXPECT_FALSE(log.Redirect(&ignored, ""));
}

}  // namespace
}  // namespace kvfs
