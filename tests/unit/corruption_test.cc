// docs/design.md §7 invariant 2/3 at the Store level: bytes of a STOPPED store's export are flipped (values, record
// headers, record metadata, segment header, footer, trailer, journal blocks), the store is reopened — with
// its local index kept, and with it deleted so it is rebuilt from the damaged export — and the result of
// each kind of damage is asserted: a damaged value or record makes exactly that file EIO (Corruption),
// a damaged journal block loses exactly the entries with a fragment in it, everything else reads back
// byte-identical, and no read ever returns bytes that were not written to that path.
#include <gtest/gtest.h>

#include "blockstore/format.h"
#include "index/fsck.h"
#include "store_harness.h"

namespace kvfs {
namespace {

using testing_harness::Content;
namespace fs = std::filesystem;

class CorruptionTest : public testing_harness::StoreHarness, public ::testing::WithParamInterface<bool> {
 protected:
  bool rebuild() const { return GetParam(); }
  void WriteSet() {
    OpenStore();
    for (int i = 0; i < 10; ++i) {
      std::string n = "f" + std::to_string(i);
      sizes_[n] = 1000 + static_cast<size_t>(i) * 23000;  // 1 KB .. 208 KB (up to 4 value blocks)
      locs_[n] = WriteFile(n, Content(n, sizes_[n], 7));
    }
    CloseStore();
  }
  void Reopen() {
    if (rebuild()) fs::remove_all(index_);
    OpenStore();
  }
  // Every file except `bad` reads back exactly; `bad` fails with Corruption (EIO).
  void ExpectOnlyBad(const std::set<std::string>& bad) {
    for (const auto& [n, sz] : sizes_) {
      Status st;
      std::string got = ReadAll(n, &st);
      if (bad.count(n)) {
        EXPECT_TRUE(st.IsCorruption()) << n << ": " << st.ToString();
        EXPECT_EQ(st.ToErrno(), EIO);
      } else {
        EXPECT_TRUE(st.ok()) << n << ": " << st.ToString();
        EXPECT_TRUE(got == Content(n, sz, 7)) << n;
      }
    }
  }
  std::map<std::string, size_t> sizes_;
  std::map<std::string, Location> locs_;
};

TEST_P(CorruptionTest, DamagedValueMakesExactlyThatFileEio) {
  WriteSet();
  FlipByte(SegPath(locs_["f4"]), locs_["f4"].value_offset + 70000);  // 2nd block of f4 (93 KB)
  Reopen();
  ExpectOnlyBad({"f4"});
  ExpectOnlyBad({"f4"});  // again (a failed load is not cached; retried, still EIO)
  EXPECT_GE(store_->GetStats().checksum_failures, 1u);
}

TEST_P(CorruptionTest, DamagedRecordHeaderMakesExactlyThatFileEio) {
  WriteSet();
  FlipByte(SegPath(locs_["f2"]), locs_["f2"].record_offset + 17);  // stamp byte: header checksum fails
  Reopen();
  ExpectOnlyBad({"f2"});
}

TEST_P(CorruptionTest, DamagedRecordPathOrTableMakesExactlyThatFileEio) {
  WriteSet();
  FlipByte(SegPath(locs_["f7"]), locs_["f7"].record_offset + format::kRecordHeaderSize + 1);  // path byte
  FlipByte(SegPath(locs_["f9"]), locs_["f9"].record_offset + format::kRecordHeaderSize + 3 + 8);  // table
  Reopen();
  ExpectOnlyBad({"f7", "f9"});
}

TEST_P(CorruptionTest, DamagedFooterOrTrailerLosesNothing) {
  WriteSet();
  const std::string seg = SegPath(locs_["f0"]);
  const uint64_t size = fs::file_size(seg);
  FlipByte(seg, size - format::kTrailerBlockSize - 4096 + 5);  // footer entry 0
  FlipByte(seg, size - 20);                                    // trailer
  Reopen();
  ExpectOnlyBad({});
  store_->Close();
  store_.reset();
  FsckOptions o;
  o.backing_dir = backing_;
  auto r = RunFsck(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Count(FsckKind::kSegmentBadTrailer), 1u);
  EXPECT_EQ(r->Count(FsckKind::kDanglingEntry), 0u);
}

TEST_P(CorruptionTest, DamagedSegmentHeaderNeverYieldsWrongBytes) {
  WriteSet();
  FlipByte(SegPath(locs_["f0"]), 60);  // node id bytes of the segment header
  Reopen();
  // Reads go by location and verify every record's own checksums: the bytes are either exact or EIO.
  for (const auto& [n, sz] : sizes_) {
    Status st;
    std::string got = ReadAll(n, &st);
    EXPECT_TRUE((st.ok() && got == Content(n, sz, 7)) || st.IsCorruption()) << n << " " << st.ToString();
  }
}

TEST_P(CorruptionTest, DamagedJournalBlockLosesOnlyItsEntries) {
  // Enough PUT entries (long names, mostly 0-byte files) for the journal to span several 32 KiB blocks.
  // No snapshot at close: the rebuild must read the damaged journal.
  checkpoint_on_close_ = false;
  OpenStore();
  std::vector<std::string> names;
  for (int i = 0; i < 700; ++i) {
    std::string n = "file-" + std::to_string(i) + "-" + std::string(120, 'x');
    names.push_back(n);
    sizes_[n] = i % 50 == 0 ? 5000 : 0;
    WriteFile(n, Content(n, sizes_[n], 7));
  }
  CloseStore();
  const std::string j = JournalPaths().front();
  std::vector<std::pair<JournalEntry, JournalPosition>> entries;
  JournalReadReport rep;
  ASSERT_TRUE(ReadJournalFile(Env::Posix(), j, JournalReaderOptions{}, &entries, &rep).ok());
  ASSERT_GT(rep.file_size, 3 * kJournalBlockSize);
  // Entries with a byte in block 1: [start, end) intersects [32768, 65536); start = previous end.
  std::set<std::string> lost;
  uint64_t start = 0;
  for (const auto& [e, pos] : entries) {
    uint64_t s = start;
    if (kJournalBlockSize - s % kJournalBlockSize < kJournalFragmentHeaderSize) s = AlignUp(s, kJournalBlockSize);
    if (e.op == JournalOp::kPut && s < 2 * kJournalBlockSize && pos.offset > kJournalBlockSize) {
      lost.insert(e.path.substr(1));
    }
    start = pos.offset;
  }
  ASSERT_GT(lost.size(), 100u);
  ASSERT_LT(lost.size(), 300u);
  FlipByte(j, kJournalBlockSize + 9);  // payload of the first fragment of block 1
  Reopen();
  auto listed = List();
  std::set<std::string> present(listed.begin(), listed.end());
  for (const auto& n : names) {
    Status st;
    std::string got = ReadAll(n, &st);
    if (rebuild() && lost.count(n)) {
      EXPECT_FALSE(present.count(n)) << n;
      EXPECT_TRUE(st.IsNotFound()) << n;
    } else {
      // A clean local index is a cache of the journal: it does not even notice the damage.
      EXPECT_TRUE(present.count(n)) << n;
      EXPECT_TRUE(st.ok() && got == Content(n, sizes_[n], 7)) << n << " " << st.ToString();
    }
  }
  if (rebuild()) {
    EXPECT_EQ(present.size(), names.size() - lost.size());
  }
}

INSTANTIATE_TEST_SUITE_P(IndexKeptOrRebuilt, CorruptionTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Rebuilt" : "Kept"; });

}  // namespace
}  // namespace kvfs
