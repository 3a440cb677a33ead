// Journal codec, writer, reader (torn tails, damaged blocks, tailing, rotation, faults) and the HLC.
#include "index/journal.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "blockstore/fault_env.h"
#include "index/hlc.h"
#include "index/journal_format.h"

namespace kvfs {
namespace {

constexpr uint64_t B = kJournalBlockSize;
constexpr uint64_t H = kJournalFragmentHeaderSize;

Location Loc(const std::string& node, uint64_t gen, uint64_t seq, uint64_t rec, uint64_t len) {
  Location l;
  l.segment = SegmentId{node, gen, seq};
  l.record_offset = rec;
  l.value_offset = rec + 4096;
  l.length = len;
  return l;
}

EntryAttrs Attrs(uint32_t mode, uint64_t size) {
  EntryAttrs a;
  a.mode = mode;
  a.uid = 1000;
  a.gid = 4294967295u;
  a.size = size;
  a.atime_ns = -5;  // before the epoch: exercises zigzag
  a.mtime_ns = 1'700'000'000'123'456'789;
  a.ctime_ns = INT64_MIN;
  return a;
}

std::vector<JournalEntry> OneOfEach() {
  const uint64_t s = HybridClock::Make(1'700'000'000'000, 7);
  // Entry version 2: a PUT with the file's xattr set (an empty set is not the same as none recorded).
  JournalEntry with_xattrs = JournalEntry::Put("/a/xa", Loc("node-a", 3, 9, 0, 7), Attrs(0100644, 7), s + 13);
  with_xattrs.xattrs.emplace();
  with_xattrs.xattrs->emplace_back("user.a", std::string("v\0\xff", 3));
  with_xattrs.xattrs->emplace_back("user.empty", "");
  JournalEntry empty_set = JournalEntry::Put("/a/xb", Location{}, Attrs(0100644, 0), s + 14);
  empty_set.xattrs.emplace();
  return {
      with_xattrs,
      empty_set,
      JournalEntry::Put("/a/b/chunk-0001", Loc("node-a", 3, 9, 8192, 123456), Attrs(0100644, 123456), s),
      JournalEntry::Put("/empty", Location{}, Attrs(0100600, 0), s + 1),
      JournalEntry::Put("/inline", Location{}, Attrs(0100600, 5), s + 2, std::string("he\0lo", 5)),
      JournalEntry::Rename("/a/x.tmp", "/a/x", Loc("node-a", 3, 9, 0, 1), UINT64_MAX),
      JournalEntry::Unlink("/a/x", s + 3),
      JournalEntry::Mkdir("/a/b/c", Attrs(040755, 0), s + 4),
      JournalEntry::Rmdir("/a/b/c", s + 5),
      JournalEntry::Setattr("/a/x", Attrs(0100400, 77), 0x7f, s + 6),
      JournalEntry::Xattr("/a/x", "user.k", std::string(300, 'v'), false, s + 7),
      JournalEntry::Xattr("/a/x", "user.k", "", true, s + 8),
      JournalEntry::Seal(SegmentId{"node-a", 3, 9}, s + 9),
      JournalEntry::Drop(SegmentId{"node-b", UINT64_MAX, 0}, s + 10),
      JournalEntry::Move("/a/y", Loc("node-a", 3, 1, 4096, 10), Loc("node-a", 3, 12, 0, 10), s - 100),
      JournalEntry::Cut(FileRef{FileRef::Kind::kJournal, "node-a", 2, 5}, 123457, s + 11),
      JournalEntry::Cut(FileRef{FileRef::Kind::kSegment, "node-a", 2, 6}, 0, s + 12),
      JournalEntry::Symlink("/l", "../target/with/a/long/path", Attrs(0120777, 26), 0),
      // Entry version 4: index-only special files and EXCHANGE.
      JournalEntry::Special("/fifo", Attrs(S_IFIFO | 0644, 0), 0, s + 15),
      JournalEntry::Special("/dev/sda", Attrs(S_IFBLK | 0660, 0), (8u << 8) | 1, s + 16),
      JournalEntry::Exchange("/a/x", "/b/dir", s + 17),
  };
}

TEST(JournalCodecTest, RoundTripEveryType) {
  std::set<JournalOp> ops;
  for (const auto& e : OneOfEach()) {
    std::string buf;
    EncodeJournalEntry(e, &buf);
    JournalEntry d;
    ASSERT_TRUE(DecodeJournalEntry(buf, &d).ok()) << JournalOpName(e.op);
    EXPECT_EQ(d, e) << JournalOpName(e.op);
    ops.insert(e.op);
  }
  EXPECT_EQ(ops.size(), kMaxJournalOp);  // every op covered
}

TEST(JournalCodecTest, RejectsGarbage) {
  for (const auto& e : OneOfEach()) {
    std::string buf;
    EncodeJournalEntry(e, &buf);
    JournalEntry d;
    // Every proper prefix is truncated.
    for (size_t n = 0; n < buf.size(); n++) {
      Status s = DecodeJournalEntry(std::string_view(buf.data(), n), &d);
      EXPECT_TRUE(s.IsCorruption()) << JournalOpName(e.op) << " prefix " << n << ": " << s.ToString();
    }
    EXPECT_TRUE(DecodeJournalEntry(buf + "x", &d).IsCorruption()) << "trailing byte";
    std::string newer = buf;
    newer[0] = static_cast<char>(kJournalEntryVersion + 1);
    EXPECT_EQ(DecodeJournalEntry(newer, &d).code(), Status::Code::kNotSupported);
  }
  JournalEntry d;
  EXPECT_TRUE(DecodeJournalEntry(std::string("\x01\x00\x05", 3), &d).IsCorruption());  // op 0
  EXPECT_TRUE(DecodeJournalEntry(std::string("\x03\x0e\x05", 3), &d).IsCorruption());  // op 14
  // EXCHANGE (op 13) exists only from entry version 4.
  EXPECT_TRUE(DecodeJournalEntry(std::string("\x01\x0d\x05\x01" "a" "\x01" "b", 7), &d).IsCorruption());
  EXPECT_TRUE(DecodeJournalEntry(std::string("\x03\x0d\x05\x01" "a" "\x01" "b", 7), &d).IsCorruption());
  EXPECT_TRUE(DecodeJournalEntry(std::string("\x04\x0d\x05\x01" "a" "\x01" "b", 7), &d).ok());
  EXPECT_TRUE(DecodeJournalEntry(std::string("\x00\x01\x05", 3), &d).IsCorruption());  // version 0
  // An 11-byte varint stamp.
  EXPECT_TRUE(DecodeJournalEntry(std::string("\x01\x03") + std::string(10, '\xff') + "\x01" + "\x00", &d)
                  .IsCorruption());
  // A bool of 2 (XATTR remove flag).
  std::string x;
  EncodeJournalEntry(JournalEntry::Xattr("/p", "n", "", true, 1), &x);
  x.back() = 2;
  EXPECT_TRUE(DecodeJournalEntry(x, &d).IsCorruption());
  // Random bytes never crash and never decode into something that re-encodes differently.
  std::mt19937_64 rng(42);
  for (int i = 0; i < 20000; i++) {
    std::string g(rng() % 64, '\0');
    for (auto& c : g) c = static_cast<char>(rng());
    if (!g.empty()) g[0] = 1;
    if (DecodeJournalEntry(g, &d).ok()) {
      std::string re;
      EncodeJournalEntry(d, &re);
      EXPECT_EQ(re, g);
    }
  }
}

// A SYMLINK entry of a special file is version 4 (the lowest that carries rdev); symlinks keep version
// 1, so an older reader keeps reading them and stops (NotSupported) only at a special file. A version
// and type that do not match are Corruption, never a special file bound as a symlink or vice versa.
TEST(JournalCodecTest, SpecialFileEntryVersion) {
  const JournalEntry fifo = JournalEntry::Special("/p", Attrs(S_IFIFO | 0600, 0), 0, 9);
  const JournalEntry chr = JournalEntry::Special("/c", Attrs(S_IFCHR | 0600, 0), 0x12345678, 9);
  const JournalEntry sock = JournalEntry::Special("/s", Attrs(S_IFSOCK | 0755, 0), 0, 9);
  const JournalEntry link = JournalEntry::Symlink("/l", "t", Attrs(S_IFLNK | 0777, 1), 9);
  for (const auto& e : {fifo, chr, sock}) {
    EXPECT_EQ(JournalEntryVersion(e), 4);
    std::string buf;
    EncodeJournalEntry(e, &buf);
    EXPECT_EQ(buf[0], 4);
    JournalEntry d;
    ASSERT_TRUE(DecodeJournalEntry(buf, &d).ok());
    EXPECT_EQ(d, e);
    // The same bytes labelled version 1 to 3 (what an older writer could never produce) are refused.
    for (char v : {1, 2, 3}) {
      std::string old = buf;
      old[0] = v;
      EXPECT_TRUE(DecodeJournalEntry(old, &d).IsCorruption()) << int(v);
    }
  }
  std::string buf;
  EncodeJournalEntry(link, &buf);
  EXPECT_EQ(buf[0], 1);  // unchanged bytes for symlinks
  // A version-4 SYMLINK of a symlink type, or a special file with a target, is Corruption.
  std::string v3 = buf;
  v3[0] = 4;
  v3.push_back(0);  // rdev
  JournalEntry d;
  EXPECT_TRUE(DecodeJournalEntry(v3, &d).IsCorruption());
  JournalEntry with_target = fifo;
  with_target.path2 = "x";
  std::string wt;
  EncodeJournalEntry(with_target, &wt);
  EXPECT_TRUE(DecodeJournalEntry(wt, &d).IsCorruption());
  EXPECT_EQ(kJournalEntryVersion, 5);  // 5: extent delta PUTs (extent_delta_test.cc)
  EXPECT_EQ(JournalEntryVersion(JournalEntry::Exchange("/a", "/b", 1)), 4);
  EXPECT_TRUE(IsSpecialFileMode(S_IFBLK | 0600));
  EXPECT_FALSE(IsSpecialFileMode(S_IFLNK | 0777));
  EXPECT_FALSE(IsSpecialFileMode(S_IFREG | 0600));
  EXPECT_FALSE(IsSpecialFileMode(S_IFDIR | 0700));
}

TEST(JournalCodecTest, FileHeaderRoundTrip) {
  JournalFileHeader h;
  h.generation = 7;
  h.file_number = 3;
  h.node = "gpu-node-17";
  JournalFileHeader d;
  ASSERT_TRUE(DecodeJournalFileHeader(EncodeJournalFileHeader(h), &d).ok());
  EXPECT_EQ(d, h);
  std::string bad = EncodeJournalFileHeader(h);
  bad[0] = 'X';
  EXPECT_TRUE(DecodeJournalFileHeader(bad, &d).IsCorruption());
  EXPECT_EQ(JournalFileName(1, 0), "journal-00000000000000000001-00000000000000000000");
}

TEST(JournalPositionTest, Ordering) {
  EXPECT_LT((JournalPosition{1, 0, 500}), (JournalPosition{1, 1, 10}));
  EXPECT_LT((JournalPosition{1, 9, 500}), (JournalPosition{2, 0, 10}));
  EXPECT_LT((JournalPosition{1, 1, 10}), (JournalPosition{1, 1, 11}));
  EXPECT_EQ((JournalPosition{1, 1, 10}).ToString(), "1-1@10");
}

// ---------------------------------------------------------------------------------------------------

class JournalFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvfs-journal-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  JournalWriterOptions WOpts(Env* env = nullptr) {
    JournalWriterOptions o;
    o.env = env ? env : Env::Posix();
    o.dir = dir_;
    o.node = "node-a";
    o.generation = 4;
    o.first_file_number = 0;
    return o;
  }
  std::string Path(uint64_t n = 0) const { return dir_ + "/" + JournalFileName(4, n); }

  // An entry whose encoding is about `size` bytes, of a rotating op.
  static JournalEntry SizedEntry(std::mt19937_64& rng, int i, size_t size) {
    std::string filler(size, '\0');
    for (size_t k = 0; k < filler.size(); k++) filler[k] = static_cast<char>('a' + (rng() + k) % 26);
    const uint64_t stamp = HybridClock::Make(1'700'000'000'000 + i, i & 0xffff);
    switch (i % 6) {
      case 0: return JournalEntry::Put("/d/" + std::to_string(i), Location{}, Attrs(0100644, size), stamp, filler);
      case 1: return JournalEntry::Xattr("/d/" + std::to_string(i), "user.v", filler, false, stamp);
      case 2: return JournalEntry::Rename("/d/" + filler, "/e/" + std::to_string(i), Loc("n", 1, 2, 3, 4), stamp);
      case 3: return JournalEntry::Unlink("/u/" + filler, stamp);
      case 4: return JournalEntry::Put("/p/" + filler, Loc("node-a", 4, i, 4096ull * i, 1 << 20), Attrs(0100644, 1 << 20), stamp);
      default: return JournalEntry::Symlink("/s/" + std::to_string(i), filler, Attrs(0120777, size), stamp);
    }
  }
  static size_t RandomSize(std::mt19937_64& rng) {
    const int r = rng() % 100;
    if (r < 70) return 10 + rng() % 200;
    if (r < 88) return 500 + rng() % 8000;
    if (r < 97) return 33 * 1024 + rng() % (70 * 1024);  // spans blocks
    return 100 * 1024 + rng() % (100 * 1024);             // spans several blocks
  }

  struct Written {
    std::vector<JournalEntry> entries;
    std::vector<JournalPosition> ends;
    uint64_t header_end = 0;
  };
  // Writes n random entries to journal file 0 with random Flush/Sync points.
  Written WriteRandom(int n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto w = JournalWriter::Open(WOpts());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    Written out;
    out.header_end = (*w)->appended_position().offset;
    for (int i = 0; i < n; i++) {
      out.entries.push_back(SizedEntry(rng, i, RandomSize(rng)));
      out.ends.push_back((*w)->Append(out.entries.back()));
      if (rng() % 5 == 0) {
        EXPECT_TRUE((*w)->Flush().ok());
      }
      if (rng() % 17 == 0) {
        EXPECT_TRUE((*w)->Sync().ok());
      }
    }
    EXPECT_TRUE((*w)->Sync().ok());
    EXPECT_EQ((*w)->synced_position(), out.ends.back());
    return out;
  }

  static std::string ReadBytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static void WriteBytes(const std::string& path, std::string_view data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(data.data(), data.size());
  }

  std::string dir_;
};

TEST_F(JournalFileTest, WriteAndReadManyBlocks) {
  const Written w = WriteRandom(1500, 1);
  ASSERT_GT(w.ends.back().offset, 40 * B);
  std::vector<std::pair<JournalEntry, JournalPosition>> got;
  JournalReadReport rep;
  ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), {}, &got, &rep).ok());
  ASSERT_EQ(got.size(), w.entries.size());
  for (size_t i = 0; i < got.size(); i++) {
    ASSERT_EQ(got[i].first, w.entries[i]) << i;
    ASSERT_EQ(got[i].second, w.ends[i]) << i;
  }
  EXPECT_TRUE(rep.header_valid);
  EXPECT_EQ(rep.header.node, "node-a");
  EXPECT_EQ(rep.header.generation, 4u);
  EXPECT_EQ(rep.end, JournalEnd::kClean);
  EXPECT_EQ(rep.valid_end, w.ends.back());
  EXPECT_EQ(rep.file_size, w.ends.back().offset);
  EXPECT_EQ(rep.corrupt_regions + rep.corrupt_bytes + rep.dropped_fragments + rep.bad_entries, 0u);
  EXPECT_EQ(rep.entries, w.entries.size());

  // Reading from a middle position yields exactly the rest.
  auto r = JournalReader::Open(Env::Posix(), Path(), w.ends[700].offset);
  ASSERT_TRUE(r.ok());
  JournalEntry e;
  JournalPosition pos;
  size_t i = 701;
  for (auto more = (*r)->Next(&e, &pos); more.ok() && *more; more = (*r)->Next(&e, &pos), i++) {
    ASSERT_EQ(e, w.entries[i]);
    ASSERT_EQ(pos, w.ends[i]);
  }
  EXPECT_EQ(i, w.entries.size());
}

// A cut at c leaves exactly the entries that end at or before c; the end is clean only when c is at a
// record end (or inside the zero trailer right after one).
TEST_F(JournalFileTest, TruncatedAtRandomOffsets) {
  const Written w = WriteRandom(300, 2);
  const std::string full = ReadBytes(Path());
  ASSERT_EQ(full.size(), w.ends.back().offset);
  std::vector<uint64_t> record_ends = {0, w.header_end};
  for (const auto& p : w.ends) record_ends.push_back(p.offset);

  std::mt19937_64 rng(3);
  std::vector<uint64_t> cuts;
  for (int i = 0; i < 200; i++) cuts.push_back(rng() % (full.size() + 1));
  for (int i = 0; i < 10; i++) cuts.push_back(w.ends[rng() % w.ends.size()].offset);  // exact ends
  for (uint64_t b = 1; b * B < full.size() && b < 8; b++) cuts.push_back(b * B);   // block boundaries
  cuts.push_back(1);
  cuts.push_back(w.header_end - 1);

  for (uint64_t c : cuts) {
    WriteBytes(Path(), std::string_view(full).substr(0, c));
    std::vector<std::pair<JournalEntry, JournalPosition>> got;
    JournalReadReport rep;
    ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), {}, &got, &rep).ok()) << c;
    size_t expect = 0;
    while (expect < w.ends.size() && w.ends[expect].offset <= c) expect++;
    ASSERT_EQ(got.size(), expect) << "cut " << c;
    for (size_t i = 0; i < expect; i++) ASSERT_EQ(got[i].first, w.entries[i]) << "cut " << c;
    const uint64_t last_end = *std::prev(std::upper_bound(record_ends.begin(), record_ends.end(), c));
    const bool in_trailer = B - last_end % B < H && c <= (last_end / B + 1) * B;
    const bool clean = c == last_end || in_trailer;
    EXPECT_EQ(rep.end, clean ? JournalEnd::kClean : JournalEnd::kTorn) << "cut " << c;
    EXPECT_EQ(rep.valid_end.offset, last_end) << "cut " << c;
    EXPECT_EQ(rep.file_size, c);
    if (!clean) {
      EXPECT_EQ(rep.tail_bytes, c - last_end);
      const std::string_view tail = std::string_view(full).substr(last_end, c - last_end);
      EXPECT_EQ(rep.tail_zero, std::all_of(tail.begin(), tail.end(), [](char ch) { return ch == 0; }));
    }
    EXPECT_EQ(rep.header_valid, c >= w.header_end);
    EXPECT_EQ(rep.corrupt_regions, 0u) << "a torn tail is not mid-file damage";
  }
}

// Honouring a CUT: a reader limited to offset c of the whole file sees what a file cut at c holds.
TEST_F(JournalFileTest, LimitActsLikeACut) {
  const Written w = WriteRandom(200, 13);
  std::mt19937_64 rng(14);
  for (int i = 0; i < 40; i++) {
    const uint64_t c = i % 2 ? w.ends[rng() % w.ends.size()].offset : rng() % (w.ends.back().offset + 1);
    JournalReaderOptions o;
    o.limit = c;
    std::vector<std::pair<JournalEntry, JournalPosition>> got;
    JournalReadReport rep;
    ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), o, &got, &rep).ok());
    size_t expect = 0;
    while (expect < w.ends.size() && w.ends[expect].offset <= c) expect++;
    ASSERT_EQ(got.size(), expect) << c;
    EXPECT_EQ(rep.file_size, c);
    if (i % 2) {
      EXPECT_EQ(rep.end, JournalEnd::kClean);
    }
  }
}

// Damage inside block k loses exactly the entries with a fragment in block k at or after the damaged
// fragment (including entries spanning into or out of block k); everything else is read.
TEST_F(JournalFileTest, DamagedBlockLosesOnlyItsEntries) {
  const Written w = WriteRandom(600, 4);
  const std::string full = ReadBytes(Path());
  const uint64_t nblocks = (full.size() + B - 1) / B;
  ASSERT_GT(nblocks, 10u);
  // Record i (i = 0: the file header, i >= 1: entry i-1) occupies [first fragment start, end).
  std::vector<uint64_t> starts, ends;
  uint64_t prev = 0;
  auto first_frag = [](uint64_t s) { return B - s % B < H ? (s / B + 1) * B : s; };
  for (uint64_t e : std::vector<uint64_t>{w.header_end}) {
    starts.push_back(0);
    ends.push_back(e);
    prev = e;
  }
  for (const auto& p : w.ends) {
    starts.push_back(first_frag(prev));
    ends.push_back(p.offset);
    prev = p.offset;
  }

  std::mt19937_64 rng(5);
  int trials = 0;
  while (trials < 60) {
    const uint64_t k = rng() % (nblocks - 10);  // entries (<= ~7 blocks) start behind the damage
    std::string bytes = full;
    // Flip 1..4 random bytes in block k; the earliest one that lies inside a record decides.
    uint64_t first_x = UINT64_MAX;
    const int flips = 1 + rng() % 4;
    for (int f = 0; f < flips; f++) {
      const uint64_t x = k * B + rng() % B;
      bytes[x] = static_cast<char>(bytes[x] ^ (1 + rng() % 255));
      for (size_t r = 0; r < starts.size(); r++) {
        if (starts[r] <= x && x < ends[r]) first_x = std::min(first_x, x);
      }
    }
    if (first_x == UINT64_MAX) continue;  // only padding was hit: nothing to check
    size_t j = 0;
    while (!(starts[j] <= first_x && first_x < ends[j])) j++;
    const uint64_t dstart = std::max(starts[j], k * B);  // the damaged fragment's start
    std::vector<JournalEntry> expect;
    for (size_t r = 1; r < starts.size(); r++) {
      const bool lost = ends[r] > dstart && starts[r] < (k + 1) * B;
      if (!lost) expect.push_back(w.entries[r - 1]);
    }
    WriteBytes(Path(), bytes);
    std::vector<std::pair<JournalEntry, JournalPosition>> got;
    JournalReadReport rep;
    ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), {}, &got, &rep).ok());
    ASSERT_EQ(got.size(), expect.size()) << "block " << k << " x " << first_x;
    for (size_t i = 0; i < expect.size(); i++) ASSERT_EQ(got[i].first, expect[i]) << "block " << k;
    EXPECT_EQ(rep.end, JournalEnd::kClean);
    EXPECT_EQ(rep.valid_end, w.ends.back());
    EXPECT_EQ(rep.corrupt_regions, 1u);
    EXPECT_EQ(rep.corrupt_blocks, 1u);
    EXPECT_EQ(rep.corrupt_bytes, (k + 1) * B - dstart);
    EXPECT_EQ(rep.header_valid, j != 0);
    EXPECT_EQ(got.size() + (w.entries.size() - expect.size()), w.entries.size());
    trials++;
  }
}

TEST_F(JournalFileTest, ZeroedBlocksMidFileAndStopMode) {
  const Written w = WriteRandom(400, 6);
  std::string bytes = ReadBytes(Path());
  const uint64_t k = 3;
  std::fill(bytes.begin() + k * B, bytes.begin() + (k + 2) * B, '\0');  // two zeroed blocks: one region
  WriteBytes(Path(), bytes);
  std::vector<std::pair<JournalEntry, JournalPosition>> got;
  JournalReadReport rep;
  ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), {}, &got, &rep).ok());
  EXPECT_EQ(rep.corrupt_regions, 1u);
  EXPECT_EQ(rep.corrupt_blocks, 2u);
  EXPECT_EQ(rep.corrupt_bytes, 2 * B);
  EXPECT_EQ(rep.end, JournalEnd::kClean);
  // Entries ending at or before block k are kept, as are those starting at or after block k + 2
  // (unless they began before it).
  auto first_frag = [](uint64_t s) { return B - s % B < H ? (s / B + 1) * B : s; };
  uint64_t prev = w.header_end;
  size_t expect = 0;
  for (size_t i = 0; i < w.ends.size(); i++) {
    if (w.ends[i].offset <= k * B || first_frag(prev) >= (k + 2) * B) expect++;
    prev = w.ends[i].offset;
  }
  EXPECT_EQ(got.size(), expect);

  // Tailing mode stops before the damage and says valid data lies behind it.
  JournalReaderOptions o;
  o.skip_damage = false;
  got.clear();
  ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), o, &got, &rep).ok());
  size_t before = 0;
  while (w.ends[before].offset <= k * B) before++;
  EXPECT_EQ(got.size(), before);
  EXPECT_EQ(rep.end, JournalEnd::kDamaged);
  EXPECT_EQ(rep.valid_end, w.ends[before - 1]);

  // Zeros to the end of the file are a torn tail (an unwritten region), not damage.
  bytes.resize((k + 2) * B);
  WriteBytes(Path(), bytes);
  got.clear();
  ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), o, &got, &rep).ok());
  EXPECT_EQ(rep.end, JournalEnd::kTorn);
  const std::string_view tail = std::string_view(bytes).substr(rep.valid_end.offset);
  EXPECT_EQ(rep.tail_zero, std::all_of(tail.begin(), tail.end(), [](char ch) { return ch == 0; }));
  EXPECT_EQ(rep.tail_bytes, tail.size());
  EXPECT_EQ(got.size(), before);
  got.clear();
  ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), {}, &got, &rep).ok());
  EXPECT_EQ(rep.end, JournalEnd::kTorn);
  EXPECT_EQ(rep.corrupt_regions, 0u);
  EXPECT_EQ(got.size(), before);
}

// A peer's file grows under one open reader: at every prefix the reader has returned exactly the
// entries complete in it, and never loses or repeats one.
TEST_F(JournalFileTest, TailingAGrowingFile) {
  const Written w = WriteRandom(300, 7);
  const std::string full = ReadBytes(Path());
  const std::string tail_path = dir_ + "/" + JournalFileName(4, 0);
  WriteBytes(tail_path, "");
  JournalReaderOptions o;
  o.skip_damage = false;
  o.direct = false;
  auto r = JournalReader::Open(Env::Posix(), tail_path, 0, o);
  ASSERT_TRUE(r.ok());
  std::mt19937_64 rng(8);
  size_t seen = 0;
  uint64_t visible = 0;
  while (visible < full.size()) {
    visible = std::min<uint64_t>(full.size(), visible + 1 + rng() % (3 * B));
    WriteBytes(tail_path, std::string_view(full).substr(0, visible));
    JournalEntry e;
    JournalPosition pos;
    for (;;) {
      auto more = (*r)->Next(&e, &pos);
      ASSERT_TRUE(more.ok());
      if (!*more) break;
      ASSERT_LT(seen, w.entries.size());
      ASSERT_EQ(e, w.entries[seen]);
      ASSERT_EQ(pos, w.ends[seen]);
      seen++;
    }
    size_t expect = 0;
    while (expect < w.ends.size() && w.ends[expect].offset <= visible) expect++;
    ASSERT_EQ(seen, expect) << "visible " << visible;
    EXPECT_NE((*r)->report().end, JournalEnd::kDamaged);
  }
  EXPECT_EQ((*r)->report().end, JournalEnd::kClean);
}

TEST_F(JournalFileTest, RotationAndListing) {
  auto o = WOpts();
  o.max_file_size = 100 * 1024;
  auto w = JournalWriter::Open(o);
  ASSERT_TRUE(w.ok());
  std::mt19937_64 rng(9);
  std::vector<JournalEntry> entries;
  std::vector<JournalPosition> ends;
  for (int i = 0; i < 800; i++) {
    entries.push_back(SizedEntry(rng, i, RandomSize(rng) / 4));
    ends.push_back((*w)->Append(entries.back()));
    if (i > 0) {
      ASSERT_LT(ends[i - 1], ends[i]);
    }
    if (rng() % 10 == 0) {
      ASSERT_TRUE((*w)->Sync().ok());
    }
  }
  ASSERT_TRUE((*w)->Sync().ok());
  ASSERT_GT((*w)->current_file_number(), 3u);
  WriteBytes(dir_ + "/journal-00000000000000000004-00000000000000000000.tmp", "x");
  WriteBytes(dir_ + "/OWNER", "x");
  WriteBytes(dir_ + "/" + JournalFileName(3, 7), "");  // an older generation sorts first

  std::vector<JournalFile> files;
  ASSERT_TRUE(ListJournalFiles(Env::Posix(), dir_, &files).ok());
  ASSERT_EQ(files.size(), (*w)->current_file_number() + 2);
  EXPECT_EQ(files[0].generation, 3u);
  size_t i = 0;
  for (size_t f = 1; f < files.size(); f++) {
    EXPECT_EQ(files[f].generation, 4u);
    EXPECT_EQ(files[f].number, f - 1);
    std::vector<std::pair<JournalEntry, JournalPosition>> got;
    JournalReadReport rep;
    ASSERT_TRUE(ReadJournalFile(Env::Posix(), files[f].path, {}, &got, &rep).ok());
    EXPECT_TRUE(rep.header_valid);
    EXPECT_EQ(rep.header.file_number, f - 1);
    EXPECT_EQ(rep.end, JournalEnd::kClean);
    EXPECT_FALSE(got.empty());
    if (f + 1 < files.size()) {
      EXPECT_GE(rep.file_size, o.max_file_size);
    }
    for (auto& [e, pos] : got) {
      ASSERT_EQ(e, entries[i]);
      ASSERT_EQ(pos, ends[i]);
      i++;
    }
  }
  EXPECT_EQ(i, entries.size());
  // A generation never reuses a file.
  EXPECT_TRUE(JournalWriter::Open(WOpts()).status().IsExists());
}

TEST_F(JournalFileTest, HeaderNamingAnotherFileIsCorruption) {
  WriteRandom(10, 10);
  std::filesystem::rename(Path(0), Path(5));
  std::vector<std::pair<JournalEntry, JournalPosition>> got;
  EXPECT_TRUE(ReadJournalFile(Env::Posix(), Path(5), {}, &got, nullptr).IsCorruption());
  JournalReaderOptions o;
  o.expect_node = "node-b";
  std::filesystem::rename(Path(5), Path(0));
  EXPECT_TRUE(ReadJournalFile(Env::Posix(), Path(0), o, &got, nullptr).IsCorruption());
}

// A failed write or sync loses nothing: the next Sync rewrites the bytes at the same offsets.
TEST_F(JournalFileTest, WriteAndSyncFailuresAreRetried) {
  FaultInjectionEnv env(Env::Posix());
  auto w = JournalWriter::Open(WOpts(&env));
  ASSERT_TRUE(w.ok());
  std::mt19937_64 rng(11);
  std::vector<JournalEntry> entries;
  for (int i = 0; i < 50; i++) entries.push_back(SizedEntry(rng, i, RandomSize(rng)));
  for (int i = 0; i < 20; i++) (*w)->Append(entries[i]);
  ASSERT_TRUE((*w)->Sync().ok());

  for (int i = 20; i < 30; i++) (*w)->Append(entries[i]);
  int id = env.ShortWriteNth(1, 1000, EIO, "journal-");
  EXPECT_FALSE((*w)->Flush().ok());
  env.RemoveFault(id);
  EXPECT_GT((*w)->buffered_bytes(), 0u);

  for (int i = 30; i < 40; i++) (*w)->Append(entries[i]);
  id = env.FailSyncs(EIO, "journal-");
  EXPECT_FALSE((*w)->Sync().ok());
  env.RemoveFault(id);
  EXPECT_LT((*w)->synced_position(), (*w)->appended_position());
  ASSERT_TRUE((*w)->Sync().ok());
  EXPECT_EQ((*w)->synced_position(), (*w)->appended_position());

  // Unsynced entries vanish at a crash; synced ones survive.
  for (int i = 40; i < 50; i++) (*w)->Append(entries[i]);
  ASSERT_TRUE((*w)->Flush().ok());
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  std::vector<std::pair<JournalEntry, JournalPosition>> got;
  JournalReadReport rep;
  ASSERT_TRUE(ReadJournalFile(Env::Posix(), Path(), {}, &got, &rep).ok());
  ASSERT_EQ(got.size(), 40u);
  for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i].first, entries[i]);
  EXPECT_EQ(rep.end, JournalEnd::kClean);
}

TEST_F(JournalFileTest, FileCreationIsDurableAfterSync) {
  FaultInjectionEnv env(Env::Posix());
  auto o = WOpts(&env);
  o.max_file_size = 40 * 1024;
  auto w = JournalWriter::Open(o);
  ASSERT_TRUE(w.ok());
  std::mt19937_64 rng(12);
  for (int i = 0; i < 40; i++) (*w)->Append(SizedEntry(rng, i, 3000));
  ASSERT_TRUE((*w)->Sync().ok());
  const uint64_t files = (*w)->current_file_number() + 1;
  ASSERT_GT(files, 1u);
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  std::vector<JournalFile> listed;
  ASSERT_TRUE(ListJournalFiles(Env::Posix(), dir_, &listed).ok());
  EXPECT_EQ(listed.size(), files);
}

// ---------------------------------------------------------------------------------------------------

TEST(HybridClockTest, MonotonicAcrossThreads) {
  HybridClock clock;
  constexpr int kThreads = 4, kPer = 50000;
  std::vector<std::vector<uint64_t>> seen(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      seen[t].reserve(kPer);
      for (int i = 0; i < kPer; i++) {
        seen[t].push_back(clock.Now());
        if (i % 1000 == 0) {
          ASSERT_TRUE(clock.Update(seen[t].back() - 5).ok());
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  std::set<uint64_t> all;
  for (const auto& v : seen) {
    for (size_t i = 1; i < v.size(); i++) ASSERT_LT(v[i - 1], v[i]);
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(all.size(), size_t{kThreads} * kPer);  // unique
  const uint64_t wall = HybridClock::SystemPhysicalMs();
  EXPECT_LE(HybridClock::PhysicalMs(*all.rbegin()), wall + 1000);  // close to the wall clock
  EXPECT_GE(HybridClock::PhysicalMs(*all.rbegin()), wall - 10000);
}

TEST(HybridClockTest, FollowsWallClockAndCountsWithinAMillisecond) {
  std::atomic<uint64_t> now{1'000'000};
  HybridClock clock(60'000, [&] { return now.load(); });
  EXPECT_EQ(clock.Now(), HybridClock::Make(1'000'000, 0));
  EXPECT_EQ(clock.Now(), HybridClock::Make(1'000'000, 1));
  now = 1'000'005;
  EXPECT_EQ(clock.Now(), HybridClock::Make(1'000'005, 0));
  now = 999'000;  // the wall clock steps back: stamps keep counting
  EXPECT_EQ(clock.Now(), HybridClock::Make(1'000'005, 1));
  // Logical overflow carries into the physical half; order is kept.
  now = 2'000'000;
  uint64_t prev = clock.Now();
  for (int i = 0; i < 70000; i++) {
    const uint64_t s = clock.Now();
    ASSERT_GT(s, prev);
    prev = s;
  }
  EXPECT_EQ(HybridClock::PhysicalMs(prev), 2'000'001u);
}

TEST(HybridClockTest, FloorSurvivesRestart) {
  std::atomic<uint64_t> now{5'000'000};
  const uint64_t persisted = HybridClock::Make(5'000'900, 42);  // issued before a restart, clock ahead
  HybridClock clock(60'000, [&] { return now.load(); });
  clock.SetFloor(persisted);
  EXPECT_GT(clock.Now(), persisted);
  clock.SetFloor(HybridClock::Make(1, 0));  // never moves backwards
  EXPECT_GT(clock.Now(), persisted + 1);
  EXPECT_GE(clock.Last(), persisted + 2);
}

TEST(HybridClockTest, UpdateAdvancesAndRejectsFarFuture) {
  std::atomic<uint64_t> now{10'000'000};
  HybridClock clock(60'000, [&] { return now.load(); });
  const uint64_t local = clock.Now();
  const uint64_t remote = HybridClock::Make(10'030'000, 9);  // 30 s ahead: accepted
  ASSERT_TRUE(clock.Update(remote).ok());
  EXPECT_GT(clock.Last(), remote);
  EXPECT_GT(clock.Now(), remote);
  const uint64_t before = clock.Last();
  Status s = clock.Update(HybridClock::Make(10'060'001, 0));  // > 60 s ahead
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(clock.Last(), before);  // unchanged
  ASSERT_TRUE(clock.Update(HybridClock::Make(10'060'000, 0)).ok());  // exactly at the bound
  // An old remote stamp still advances the clock by one (a receive event).
  const uint64_t l = clock.Last();
  ASSERT_TRUE(clock.Update(local).ok());
  EXPECT_EQ(clock.Last(), l + 1);
  HybridClock strict(0, [&] { return now.load(); });
  EXPECT_FALSE(strict.Update(HybridClock::Make(now + 1, 0)).ok());
  EXPECT_TRUE(strict.Update(HybridClock::Make(now, 0xffff)).ok());
}

}  // namespace
}  // namespace kvfs
