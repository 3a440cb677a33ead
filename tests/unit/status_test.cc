#include "blockstore/status.h"

#include <gtest/gtest.h>

namespace kvfs {
namespace {

TEST(StatusTest, MapsToErrno) {
  EXPECT_EQ(Status::OK().ToErrno(), 0);
  EXPECT_EQ(Status::NotFound("x").ToErrno(), ENOENT);
  EXPECT_EQ(Status::Corruption("x").ToErrno(), EIO);
  EXPECT_EQ(Status::IOError("x", ENOSPC).ToErrno(), ENOSPC);
  EXPECT_TRUE(Status::IOError("x", ENOSPC).IsNoSpace());
  EXPECT_EQ(Status::FromErrno(ENOTEMPTY, "d").ToErrno(), ENOTEMPTY);
  EXPECT_EQ(Status::IOError("disk", 0).ToErrno(), EIO);
  EXPECT_EQ(Status::Corruption("bad block").ToString(), "Corruption: bad block");
}

TEST(ResultTest, CarriesValueOrStatus) {
  Result<int> a(7);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 7);
  Result<int> b(Status::NoSpace("full"));
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(b.status().ToErrno(), ENOSPC);
}

}  // namespace
}  // namespace kvfs
