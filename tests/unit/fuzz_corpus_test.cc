// Regression corpus of the fuzz targets (tests/fuzz/fuzz_targets.h): every file under
// tests/data/fuzz/<target>/ (seeds, and inputs that once crashed) must run through the target without a
// crash or a broken invariant (the targets abort()).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "index/journal_format.h"
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
// The seeds (tests/fuzz/make_seeds.cc) are well formed and cover every entry version a writer emits,
// so the fuzzer starts from each encoding: a new entry version without a seed fails here.
TEST(FuzzCorpus, JournalSeedsDecodeAndCoverEveryEntryVersion) {
  const std::filesystem::path dir = std::filesystem::path(KVFS_SOURCE_DIR) / "tests/data/fuzz/journal_entry";
  std::set<int> versions;
  for (const auto& ent : std::filesystem::directory_iterator(dir)) {
    const std::string name = ent.path().filename().string();
    if (name.rfind("seed-", 0) != 0 || name == "seed-file-header") continue;
    std::ifstream f(ent.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    JournalEntry e;
    const Status s = DecodeJournalEntry(bytes, &e);
    EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
    if (!s.ok()) continue;
    EXPECT_EQ(JournalEntryVersion(e), static_cast<uint8_t>(bytes[0])) << name;
    versions.insert(JournalEntryVersion(e));
  }
  for (int v = 1; v <= kJournalEntryVersion; ++v) {
    EXPECT_TRUE(versions.count(v)) << "no seed of entry version " << v;
  }
}
TEST(FuzzCorpus, Segment) { EXPECT_GE(RunCorpus("segment", fuzz::FuzzSegment), 4u); }

}  // namespace
}  // namespace kvfs
