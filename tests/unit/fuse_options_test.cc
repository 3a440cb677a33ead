// MountFuseOptions (tools/fuse_options.h): default_permissions stays on unless explicitly opted out.
#include "tools/fuse_options.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

using V = std::vector<std::string>;

TEST(MountFuseOptions, DefaultsWithoutDashO) {
  EXPECT_EQ(MountFuseOptions({}), (V{"allow_other", "default_permissions"}));
}

TEST(MountFuseOptions, AllowOtherAloneKeepsDefaultPermissions) {
  EXPECT_EQ(MountFuseOptions({"allow_other"}), (V{"allow_other", "default_permissions"}));
  EXPECT_EQ(MountFuseOptions({"ro"}), (V{"ro", "default_permissions"}));
  EXPECT_EQ(MountFuseOptions({"default_permissions", "allow_other"}), (V{"default_permissions", "allow_other"}));
  EXPECT_EQ(MountFuseOptions({"", "allow_other", ""}), (V{"allow_other", "default_permissions"}));
}

TEST(MountFuseOptions, OnlyAnExplicitOptOutDropsIt) {
  EXPECT_EQ(MountFuseOptions({"allow_other", "no_default_permissions"}), (V{"allow_other"}));
  EXPECT_EQ(MountFuseOptions({"no_default_permissions", "default_permissions"}), V{});
  EXPECT_EQ(MountFuseOptions({"no_default_permissions"}), V{});
}

}  // namespace
// atime flags libfuse does not know are dropped (kvfs keeps atime itself); alone they leave the defaults.
TEST(MountFuseOptions, AtimeFlagsLibfuseDoesNotKnowAreDropped) {
  EXPECT_EQ(MountFuseOptions({"relatime", "noexec", "nodiratime"}), (V{"noexec", "default_permissions"}));
  EXPECT_EQ(MountFuseOptions({"strictatime"}), (V{"allow_other", "default_permissions"}));
  EXPECT_EQ(MountFuseOptions({"noatime", "lazytime"}), (V{"noatime", "default_permissions"}));
}

}  // namespace kvfs
