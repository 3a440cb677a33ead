// Regression corpus of the fuzz targets (tests/fuzz/fuzz_targets.h): every file under
// tests/data/fuzz/<target>/ (seeds, and inputs that once crashed) must run through the target without a
// crash or a broken invariant (the targets abort()).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/fuzz/fuzz_targets.h"

namespace kvfs {
namespace {

size_t RunCorpus(const std::string& target, int (*fn)(const uint8_t*, size_t)) {
  const std::filesystem::path dir = std::filesystem::path(KVFS_SOURCE_DIR) / "tests/data/fuzz" / target;
  size_t n = 0;
  for (const auto& ent : std::filesystem::directory_iterator(dir)) {
    if (!ent.is_regular_file()) continue;
    std::ifstream f(ent.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(ent.path().string());
    EXPECT_EQ(fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
    n++;
  }
  return n;
}

TEST(FuzzCorpus, JournalEntry) { EXPECT_GE(RunCorpus("journal_entry", fuzz::FuzzJournalEntry), 10u); }
TEST(FuzzCorpus, Segment) { EXPECT_GE(RunCorpus("segment", fuzz::FuzzSegment), 4u); }

}  // namespace
}  // namespace kvfs
