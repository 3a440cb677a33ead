// ObjectStore's POSIX implementation (blockstore/object_store.h): the shared contract
// (tests/s3/object_store_contract.h; the S3 implementation runs it against Ceph RGW in tests/s3/).
#include "blockstore/object_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "tests/s3/object_store_contract.h"

namespace kvfs {
namespace {

TEST(PosixObjectStoreTest, Contract) {
  char dir[] = "/tmp/kvfs-objstore-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string root = std::string(dir) + "/root";
  auto store = NewPosixObjectStore(Env::Posix(), root);
  EXPECT_EQ(store->Describe(), "posix:" + root);
  RunObjectStoreContract(store.get(), dir);
  // Objects are plain files under the root; no temporary file is left behind.
  EXPECT_TRUE(std::filesystem::is_regular_file(root + "/nodes/a/HEARTBEAT"));
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    EXPECT_EQ(e.path().string().find(".objtmp-"), std::string::npos) << e.path();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvfs
