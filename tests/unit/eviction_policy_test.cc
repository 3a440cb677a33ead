// Eviction policy (engine/eviction_policy.h): limits from the options, targets over the capacity and
// the global watermarks, the full-backing emergency target, peer estimates, reinsertion choice. Pure
// arithmetic: the mechanism (evictor, drops) is covered by capacity_test.cc.
#include "engine/eviction_policy.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(EvictionPolicyTest, LimitsFromACapacity) {
  auto l = EvictionLimits::Make(1024 * kMiB, 64 * kMiB, 0, 0);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->bounded());
  EXPECT_EQ(l->node_high, 960 * kMiB);            // capacity - one segment
  EXPECT_EQ(l->node_low, 960 * kMiB - 128 * kMiB);  // high - max(segment, capacity / 8)
  EXPECT_EQ(l->hard_limit, 1088 * kMiB);          // capacity + one segment
  EXPECT_EQ(l->global_high, 0u);
}

TEST(EvictionPolicyTest, SmallCapacityKeepsItsHighWatermark) {
  auto l = EvictionLimits::Make(128 * kMiB, 64 * kMiB, 0, 0);  // under three segments
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->node_high, 128 * kMiB);
  EXPECT_EQ(l->node_low, 64 * kMiB);
  auto tiny = EvictionLimits::Make(32 * kMiB, 64 * kMiB, 0, 0);  // under one step: low is 0
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->node_low, 0u);
}

TEST(EvictionPolicyTest, UnboundedAndGlobalLimits) {
  auto none = EvictionLimits::Make(0, 64 * kMiB, 0, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->bounded());
  EXPECT_EQ(none->hard_limit, 0u);
  EXPECT_EQ(EvictionTarget(*none, 100 * kMiB * 1024, 0), kNoEvictionTarget);

  auto g = EvictionLimits::Make(0, 64 * kMiB, 800 * kMiB, 0);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->bounded());
  EXPECT_EQ(g->global_low, 700 * kMiB);  // 7/8 of high
  EXPECT_TRUE(EvictionLimits::Make(0, 64 * kMiB, 800 * kMiB, 800 * kMiB).status().IsInvalidArgument());
  EXPECT_TRUE(EvictionLimits::Make(0, 64 * kMiB, 800 * kMiB, 900 * kMiB).status().IsInvalidArgument());
}

TEST(EvictionPolicyTest, CapacityTargetIsTheLowWatermarkOnlyAboveTheHighOne) {
  auto l = *EvictionLimits::Make(1024 * kMiB, 64 * kMiB, 0, 0);
  EXPECT_EQ(EvictionTarget(l, 960 * kMiB, 0), kNoEvictionTarget);  // at high: nothing
  EXPECT_EQ(EvictionTarget(l, 961 * kMiB, 0), l.node_low);
  EXPECT_EQ(EvictionTarget(l, 961 * kMiB, 1ull << 40), l.node_low);  // peers count only globally
}

TEST(EvictionPolicyTest, GlobalTargetIsThisNodesProportionalShare) {
  auto l = *EvictionLimits::Make(0, 64 * kMiB, 1000 * kMiB, 800 * kMiB);
  EXPECT_EQ(EvictionTarget(l, 500 * kMiB, 500 * kMiB), kNoEvictionTarget);  // at the watermark
  // 1200 over a low of 800: 400 to go, half of it this node's (it holds half the bytes).
  EXPECT_EQ(EvictionTarget(l, 600 * kMiB, 600 * kMiB), 400 * kMiB);
  // A node with a quarter of the bytes drops a quarter of the excess.
  EXPECT_EQ(EvictionTarget(l, 300 * kMiB, 900 * kMiB), 200 * kMiB);
  // A node with nothing has nothing to drop.
  EXPECT_EQ(EvictionTarget(l, 0, 2000 * kMiB), 0u);
}

TEST(EvictionPolicyTest, TheSmallerOfCapacityAndGlobalTargetsWins) {
  auto l = *EvictionLimits::Make(1024 * kMiB, 64 * kMiB, 1000 * kMiB, 800 * kMiB);
  EXPECT_EQ(EvictionTarget(l, 1000 * kMiB, 0), l.node_low);              // capacity: 832
  EXPECT_EQ(EvictionTarget(l, 1000 * kMiB, 1000 * kMiB), 400 * kMiB);  // global: 1000 - (2000 - 800) / 2
}

TEST(EvictionPolicyTest, EmergencyDropsAtLeastOneSegmentAndMakesRoomForTwo) {
  auto l = *EvictionLimits::Make(1024 * kMiB, 64 * kMiB, 0, 0);
  // Unknown free space: just below the current bytes (the oldest segment).
  EXPECT_EQ(EmergencyTarget(l, kNoEvictionTarget, 500 * kMiB, nullptr, 0), 500 * kMiB - 1);
  EXPECT_EQ(EmergencyTarget(l, 100 * kMiB, 500 * kMiB, nullptr, 0), 100 * kMiB);  // a lower target stays
  EXPECT_EQ(EmergencyTarget(l, kNoEvictionTarget, 0, nullptr, 0), 0u);
  // 28 MiB free: 100 MiB more wanted for two segments' room.
  const uint64_t avail = 28 * kMiB;
  EXPECT_EQ(EmergencyTarget(l, kNoEvictionTarget, 500 * kMiB, &avail, 0), 400 * kMiB);
  // Bytes already awaiting unlink count toward it.
  EXPECT_EQ(EmergencyTarget(l, kNoEvictionTarget, 500 * kMiB, &avail, 60 * kMiB), 460 * kMiB);
  EXPECT_EQ(EmergencyTarget(l, kNoEvictionTarget, 500 * kMiB, &avail, 200 * kMiB), 500 * kMiB - 1);
  // Enough free already: only the oldest segment.
  const uint64_t plenty = 1024 * kMiB;
  EXPECT_EQ(EmergencyTarget(l, kNoEvictionTarget, 500 * kMiB, &plenty, 0), 500 * kMiB - 1);
  // Wanting more than the node has: everything.
  EXPECT_EQ(EmergencyTarget(l, kNoEvictionTarget, 50 * kMiB, &avail, 0), 0u);
}

TEST(EvictionPolicyTest, ReinsertionTakesHotRecordsMostHitsFirstWithinTheBudget) {
  std::unordered_map<uint64_t, uint32_t> hits{{0, 1}, {4096, 5}, {8192, 0}, {12288, 5}, {16384, 2}};
  auto plan = ChooseReinsertions(hits, 2, 0.5, 64 * kMiB);
  EXPECT_EQ(plan.budget, 32 * kMiB);
  std::vector<std::pair<uint32_t, uint64_t>> want{{5, 4096}, {5, 12288}, {2, 16384}};
  EXPECT_EQ(plan.records, want);
  EXPECT_TRUE(ChooseReinsertions({}, 1, 0.5, 64 * kMiB).records.empty());
  EXPECT_EQ(ChooseReinsertions(hits, 1, 0, 64 * kMiB).budget, 0u);
}

// Issue #16 part 2: 1/8 of the usable space, rounded down to a power of two, within [4 MiB, 256 MiB].
TEST(EvictionPolicyTest, AutoSegmentSizeIsAnEighthOfTheExportAsAPowerOfTwo) {
  EXPECT_EQ(AutoSegmentSize(32 * kMiB), 4 * kMiB);
  EXPECT_EQ(AutoSegmentSize(64 * kMiB), 8 * kMiB);
  EXPECT_EQ(AutoSegmentSize(100 * kMiB), 8 * kMiB);  // 12.5 MiB -> 8 MiB: never over an eighth
  EXPECT_EQ(AutoSegmentSize(512 * kMiB), 64 * kMiB);
  EXPECT_EQ(AutoSegmentSize(1024 * kMiB - 4096), 64 * kMiB);
  EXPECT_EQ(AutoSegmentSize(1024 * kMiB), 128 * kMiB);
  EXPECT_EQ(AutoSegmentSize(2048 * kMiB), 256 * kMiB);
  EXPECT_EQ(AutoSegmentSize(100ull << 40), 256 * kMiB);  // the default is the ceiling
  EXPECT_EQ(AutoSegmentSize(8 * kMiB), 4 * kMiB);      // the floor, even over an eighth
  EXPECT_EQ(AutoSegmentSize(1), 4 * kMiB);
  EXPECT_EQ(AutoSegmentSize(0), kDefaultSegmentSize);  // unknown size
  for (uint64_t e = 1 * kMiB; e < (64ull << 30); e = e * 3 / 2 + 4096) {
    const uint64_t s = AutoSegmentSize(e);
    EXPECT_EQ(s & (s - 1), 0u) << e;  // a power of two, so a multiple of 4 KiB
    EXPECT_GE(s, kMinAutoSegmentSize);
    EXPECT_LE(s, kDefaultSegmentSize);
    if (s > kMinAutoSegmentSize) {
      EXPECT_LE(s, e / 8) << e;
    }
    if (s < kDefaultSegmentSize) {
      EXPECT_GT(2 * s, e / 8) << e;  // the largest such power of two
    }
  }
}

TEST(EvictionPolicyTest, AFullExportSealsTheActiveSegmentEarlyWhenMostOfItIsDead) {
  EXPECT_TRUE(ShouldSealActiveEarly(64 * kMiB, 0));
  EXPECT_TRUE(ShouldSealActiveEarly(64 * kMiB, 32 * kMiB));   // half dead
  EXPECT_FALSE(ShouldSealActiveEarly(64 * kMiB, 33 * kMiB));  // mostly live: sealing frees nothing soon
  EXPECT_FALSE(ShouldSealActiveEarly(64 * kMiB, 64 * kMiB));
  EXPECT_FALSE(ShouldSealActiveEarly(100 * 1024, 0));         // too little to be worth a segment
  EXPECT_TRUE(ShouldSealActiveEarly(kSealEarlyMinDeadBytes, 0));
  EXPECT_FALSE(ShouldSealActiveEarly(0, 0));
  EXPECT_FALSE(ShouldSealActiveEarly(kMiB, 2 * kMiB));        // live counted past the end: not dead
}

}  // namespace
}  // namespace kvfs
