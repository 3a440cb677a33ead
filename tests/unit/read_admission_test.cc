#include "engine/read_admission.h"

#include <gtest/gtest.h>

#include <string>

#include "blockstore/value_buffer.h"

namespace kvfs {
namespace {

LruCache::Value AdmissionVal(size_t n, char c) { return ValueBuffer::Copy(std::string(n, c)); }

TEST(ReadAdmissionTest, OneReadStaysOnProbationASecondFromTheStartPromotes) {
  ReadAdmission a(10 << 20, 100);
  EXPECT_FALSE(a.OnLoaded("k", AdmissionVal(1 << 20, 'a'), /*from_start=*/true));
  bool promote = true;
  // The rest of the same read: served, not promoted.
  auto v = a.Find("k", /*from_start=*/false, &promote);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->data()[5], 'a');
  EXPECT_FALSE(promote);
  EXPECT_FALSE(a.Find("k", false, &promote) == nullptr);
  EXPECT_FALSE(promote);
  // A second read from the start: promoted, and gone from probation.
  v = a.Find("k", true, &promote);
  ASSERT_TRUE(v);
  EXPECT_TRUE(promote);
  EXPECT_EQ(a.probation_entries(), 0u);
  EXPECT_EQ(a.probation_bytes(), 0u);
  EXPECT_EQ(a.Find("k", true, &promote), nullptr);
}

TEST(ReadAdmissionTest, ALoadThatStartedMidValueNeedsTwoStartsToo) {
  ReadAdmission a(10 << 20, 100);
  EXPECT_FALSE(a.OnLoaded("k", AdmissionVal(4096, 'b'), /*from_start=*/false));  // a parallel request won the load
  bool promote = true;
  EXPECT_TRUE(a.Find("k", true, &promote));  // the same read's first request: one start
  EXPECT_FALSE(promote);
  EXPECT_TRUE(a.Find("k", true, &promote));  // a second read
  EXPECT_TRUE(promote);
}

TEST(ReadAdmissionTest, ProbationIsBoundedByBytesAndEvictedKeysBecomeGhosts) {
  ReadAdmission a(3 << 20, 100);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(a.OnLoaded("k" + std::to_string(i), AdmissionVal(1 << 20, 'x'), true));
  EXPECT_EQ(a.probation_entries(), 3u);
  EXPECT_EQ(a.probation_bytes(), 3u << 20);
  EXPECT_EQ(a.ghosts(), 2u);
  bool promote = false;
  EXPECT_EQ(a.Find("k0", true, &promote), nullptr);
  EXPECT_TRUE(a.Find("k4", false, &promote));
  // Loaded again after it left probation: straight into the LRU, and no longer a ghost.
  EXPECT_TRUE(a.OnLoaded("k0", AdmissionVal(1 << 20, 'y'), true));
  EXPECT_EQ(a.ghosts(), 1u);
  EXPECT_FALSE(a.OnLoaded("k9", AdmissionVal(1 << 20, 'y'), true));
}

TEST(ReadAdmissionTest, TheNewestEntryStaysEvenWhenItAloneIsOverBudget) {
  ReadAdmission a(1 << 20, 100);
  EXPECT_FALSE(a.OnLoaded("big", AdmissionVal(3 << 20, 'z'), true));
  bool promote = false;
  EXPECT_TRUE(a.Find("big", false, &promote));
  EXPECT_FALSE(a.OnLoaded("big2", AdmissionVal(3 << 20, 'z'), true));
  EXPECT_EQ(a.probation_entries(), 1u);
  EXPECT_EQ(a.Find("big", false, &promote), nullptr);
}

TEST(ReadAdmissionTest, GhostListIsBounded) {
  ReadAdmission a(4096, 3);
  for (int i = 0; i < 10; ++i) a.OnLoaded("k" + std::to_string(i), AdmissionVal(4096, 'q'), true);
  EXPECT_EQ(a.ghosts(), 3u);
  EXPECT_FALSE(a.OnLoaded("k0", AdmissionVal(4096, 'q'), true));  // forgotten long ago
  EXPECT_TRUE(a.OnLoaded("k8", AdmissionVal(4096, 'q'), true));   // still a ghost
}

}  // namespace
}  // namespace kvfs
