// ExtentMap (blockstore/extent_map.h), its encoding (index/journal_format.h EncodeExtentMap), and the
// extent form of a staged version (fuse/chunk_buffer.h DirtyParts / ToExtentMap): docs/design.md §13.
#include "blockstore/extent_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <random>
#include <string>

#include "fuse/chunk_buffer.h"
#include "index/journal_format.h"

namespace kvfs {
namespace {

constexpr uint64_t kExtMiB = 1ull << 20;

// Records held in memory, one value per record_offset (a fake segment); counts fetched bytes.
struct ExtRecords {
  std::map<uint64_t, std::string> values;
  uint64_t fetched = 0;
  Location Put(std::string v, std::string node = "n1") {
    Location l;
    l.segment.node = std::move(node);
    l.segment.generation = 1;
    l.segment.seq = 2;
    l.record_offset = (values.size() + 1) * 4096;
    l.value_offset = l.record_offset + 4096;
    l.length = v.size();
    values[l.record_offset] = std::move(v);
    return l;
  }
  Location PutParts(const std::vector<std::string_view>& parts) {
    std::string v;
    for (auto p : parts) v.append(p);
    return Put(std::move(v));
  }
  Status Fetch(const Location& l, uint64_t off, size_t len, char* out) {
    const std::string& v = values.at(l.record_offset);
    if (off + len > v.size()) return Status::Corruption("fetch past the record");
    std::memcpy(out, v.data() + off, len);
    fetched += len;
    return Status::OK();
  }
  ExtentFetch extent_fetch() {
    return [this](const Location& l, uint64_t off, size_t len, char* out) { return Fetch(l, off, len, out); };
  }
  ChunkBuffer::Fetch chunk_fetch() {
    return [this](const Location& l, uint64_t off, size_t len, char* out) { return Fetch(l, off, len, out); };
  }
};

// A record whose bytes are never read (maps built for their shape: compaction plans, the hard cap).
Location ExtFakeRecord(uint64_t length, uint64_t k) {
  Location l;
  l.segment.node = "n1";
  l.segment.generation = 1;
  l.segment.seq = 9;
  l.record_offset = k * 4096;
  l.value_offset = l.record_offset + 4096;
  l.length = length;
  return l;
}

// splitmix64, 8 bytes per step (a byte per mt19937 call took ~10 % of the ASan unit run).
std::string ExtRandomBytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint64_t x = seed;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(s.data() + i, &z, std::min<size_t>(8, n - i));
  }
  return s;
}

// A scratch buffer reused by the comparisons below: a fresh multi-MiB string per check is a fresh mmap
// under ASan (its allocator maps every large block anew), and its page faults were most of this file's
// run time there (SeekDataAndHoleOfAStagedVersion: 77 s).
char* Scratch(size_t n) {
  thread_local std::unique_ptr<char[]> buf;
  thread_local size_t cap = 0;
  if (n > cap) {
    cap = std::max<size_t>(n, 2 * cap);
    buf.reset(new char[cap]);
  }
  return buf.get();
}

// got[0, n) == want: the first difference, not two multi-MiB strings, on failure.
testing::AssertionResult SameBytes(const char* got, size_t n, const std::string& want) {
  if (n != want.size()) return testing::AssertionFailure() << "size " << n << ", want " << want.size();
  if (std::memcmp(got, want.data(), n) == 0) return testing::AssertionSuccess();
  size_t i = 0;
  while (got[i] == want[i]) i++;
  return testing::AssertionFailure() << "byte " << i << " of " << n << " is " << int(uint8_t(got[i])) << ", want "
                                     << int(uint8_t(want[i]));
}

std::string ReadMap(const ExtentMap& m, ExtRecords& recs, uint64_t off = 0, uint64_t len = UINT64_MAX) {
  const uint64_t n = off >= m.size() ? 0 : std::min(len, m.size() - off);
  std::string out(n, 'X');
  size_t got = 0;
  EXPECT_TRUE(ReadExtents(m, off, n, out.data(), recs.extent_fetch(), &got).ok());
  EXPECT_EQ(got, n);
  return out;
}

// ReadMap(m, recs) == want, read into the scratch buffer.
testing::AssertionResult MapIs(const ExtentMap& m, ExtRecords& recs, const std::string& want) {
  const size_t n = m.size();
  char* buf = Scratch(n);
  std::memset(buf, 'X', n);
  size_t got = 0;
  Status s = ReadExtents(m, 0, n, buf, recs.extent_fetch(), &got);
  if (!s.ok()) return testing::AssertionFailure() << s.ToString();
  if (got != n) return testing::AssertionFailure() << "read " << got << " of " << n;
  return SameBytes(buf, n, want);
}

std::string Encoded(const ExtentMap& m) {
  std::string s;
  EncodeExtentMap(m, &s);
  return s;
}

// ---- ExtentMap ----

TEST(ExtentMap, SingleRecordIsTodaysLocation) {
  ExtRecords recs;
  Location l = recs.Put(ExtRandomBytes(5000, 1));
  ExtentMap m = ExtentMap::FromLocation(l, 5000);
  Location back;
  ASSERT_TRUE(m.SingleRecord(&back));
  EXPECT_EQ(back, l);
  EXPECT_EQ(m.DataBytes(), 5000u);
  EXPECT_EQ(ReadMap(m, recs), recs.values.at(l.record_offset));
  ExtentMap empty = ExtentMap::FromLocation(Location{}, 0);
  ASSERT_TRUE(empty.SingleRecord(&back));
  EXPECT_TRUE(back.empty());
  // A prefix of a record (a shrunk copy-on-write base) is not a whole record.
  EXPECT_FALSE(ExtentMap::FromLocation(l, 100).SingleRecord(&back));
}

TEST(ExtentMap, OverlaySplitsAndMerges) {
  ExtRecords recs;
  std::string base = ExtRandomBytes(10 * kExtMiB, 2);
  Location b = recs.Put(base);
  ExtentMap m = ExtentMap::FromLocation(b, base.size());
  std::string slot = ExtRandomBytes(2 * kExtMiB, 3);
  Location s = recs.Put(slot);
  ASSERT_TRUE(m.Overlay(4 * kExtMiB, 2 * kExtMiB, s, 0).ok());
  ASSERT_EQ(m.extents().size(), 3u);
  EXPECT_EQ(m.extents()[1], (Extent{4 * kExtMiB, 2 * kExtMiB, s, 0}));
  EXPECT_EQ(m.extents()[2].value_offset, 6 * kExtMiB);
  base.replace(4 * kExtMiB, 2 * kExtMiB, slot);
  EXPECT_TRUE(MapIs(m, recs, base));
  EXPECT_TRUE(m.Validate().ok());
  // Putting the base bytes back merges the three extents into one again.
  ASSERT_TRUE(m.Overlay(4 * kExtMiB, 2 * kExtMiB, b, 4 * kExtMiB).ok());
  ASSERT_EQ(m.extents().size(), 1u);
  Location back;
  EXPECT_TRUE(m.SingleRecord(&back));
  // Bad overlays change nothing.
  EXPECT_FALSE(m.Overlay(0, 10, Location{}, 0).ok());
  EXPECT_FALSE(m.Overlay(0, 3 * kExtMiB, s, 0).ok());
  EXPECT_EQ(m.extents().size(), 1u);
}

TEST(ExtentMap, HolesReadAsZerosAndCostNothing) {
  ExtRecords recs;
  // pwrite of 50 KiB at 1.6 MB of a new file: one extent, the rest a hole.
  std::string w = ExtRandomBytes(50 * 1024, 4);
  Location r = recs.Put(w);
  ExtentMap m;
  ASSERT_TRUE(m.Overlay(1600000, w.size(), r, 0).ok());
  EXPECT_EQ(m.size(), 1600000 + w.size());
  EXPECT_EQ(m.DataBytes(), w.size());
  EXPECT_EQ(ReadMap(m, recs), std::string(1600000, '\0') + w);
  EXPECT_EQ(m.NextData(0), 1600000u);
  EXPECT_EQ(m.NextHole(0), 0u);
  EXPECT_EQ(m.NextHole(1600000), m.size());
  EXPECT_EQ(m.NextData(m.size()), m.size());
  // Growing adds a hole; shrinking into the extent cuts it; punching makes a hole in the middle.
  m.Resize(m.size() + 100);
  EXPECT_EQ(ReadMap(m, recs, m.size() - 150), w.substr(w.size() - 50) + std::string(100, '\0'));
  m.Resize(1600010);
  EXPECT_EQ(m.DataBytes(), 10u);
  m.Resize(1700000);
  EXPECT_EQ(ReadMap(m, recs, 1600000, 20), w.substr(0, 10) + std::string(10, '\0'));
  m.Punch(1600002, 3);
  EXPECT_EQ(ReadMap(m, recs, 1600000, 10), w.substr(0, 2) + std::string(3, '\0') + w.substr(5, 5));
  EXPECT_EQ(m.NextHole(1600000), 1600002u);
  EXPECT_EQ(m.NextData(1600002), 1600005u);
  EXPECT_TRUE(m.Validate().ok());
}

TEST(ExtentMap, LiveBytesAndCompactionBound) {
  ExtRecords recs;
  // A 12 MiB slot file, 2 MiB slots rewritten one by one: the base dies slot by slot.
  Location base = recs.Put(std::string(12 * kExtMiB, 'b'));
  ExtentMap m = ExtentMap::FromLocation(base, 12 * kExtMiB);
  std::vector<Location> cold;
  EXPECT_FALSE(m.NeedsCompaction(&cold));
  for (int i = 0; i < 5; ++i) {
    Location s = recs.Put(std::string(2 * kExtMiB, static_cast<char>('0' + i)));
    ASSERT_TRUE(m.Overlay(i * 2 * kExtMiB, 2 * kExtMiB, s, 0).ok());
    auto live = m.LiveBytesByRecord();
    EXPECT_EQ((live[{base.segment, base.record_offset}]), (12 - 2 * (i + 1)) * kExtMiB);
    EXPECT_EQ(m.Records().size(), static_cast<size_t>(i + 2));
    // 2 MiB of 12 MiB live is exactly 1/6: not yet under the bound.
    EXPECT_FALSE(m.NeedsCompaction(&cold)) << i;
  }
  // A 1 MiB rewrite more leaves 1 MiB of 12 MiB live (< 1/6): the base is cold.
  Location t = recs.Put(std::string(kExtMiB, 'z'));
  ASSERT_TRUE(m.Overlay(10 * kExtMiB, kExtMiB, t, 0).ok());
  ASSERT_TRUE(m.NeedsCompaction(&cold));
  ASSERT_EQ(cold.size(), 1u);
  EXPECT_EQ(cold[0], base);
  // Too many extents (the hard cap): 4 KiB overlays at every other page.
  ExtentMap f = ExtentMap::FromLocation(ExtFakeRecord(128 * kExtMiB, 1), 128 * kExtMiB);
  Location p = ExtFakeRecord(4096 * (ExtentMap::kMaxExtents + 1), 2);
  for (uint64_t i = 0; i < ExtentMap::kMaxExtents / 2; ++i) ASSERT_TRUE(f.Overlay(i * 8192, 4096, p, i * 4096).ok());
  EXPECT_EQ(f.extents().size(), ExtentMap::kMaxExtents);
  EXPECT_FALSE(f.NeedsCompaction(&cold));  // at the cap: the joins over kJoinExtents are the budget's
  ASSERT_TRUE(f.Overlay(ExtentMap::kMaxExtents * 4096, 4096, p, ExtentMap::kMaxExtents * 4096).ok());
  EXPECT_GT(f.extents().size(), ExtentMap::kMaxExtents);
  EXPECT_TRUE(f.NeedsCompaction(&cold));
  EXPECT_TRUE(cold.empty());
}

TEST(ExtentMap, ValidateRejectsBrokenMaps) {
  Location r;
  r.segment.node = "n";
  r.length = 100;
  ExtentMap m(200);
  m.AppendUnchecked(Extent{0, 50, r, 0});
  m.AppendUnchecked(Extent{40, 10, r, 0});  // overlaps
  EXPECT_TRUE(m.Validate().IsCorruption());
  ExtentMap past(200);
  past.AppendUnchecked(Extent{0, 60, r, 50});  // past the record's value
  EXPECT_TRUE(past.Validate().IsCorruption());
  ExtentMap big(20);
  big.AppendUnchecked(Extent{0, 30, r, 0});  // past the size
  EXPECT_TRUE(big.Validate().IsCorruption());
  ExtentMap norec(20);
  norec.AppendUnchecked(Extent{0, 10, Location{}, 0});
  EXPECT_TRUE(norec.Validate().IsCorruption());
}

// Random overlays, punches and resizes against a plain byte string: the map reads the same bytes.
// No two neighbours continue each other in one record (Overlay, Punch and Resize keep a map so; the
// delta check and map checksums compare maps extent by extent).
void ExpectNormalized(const ExtentMap& m) {
  const auto& x = m.extents();
  for (size_t i = 1; i < x.size(); ++i) {
    EXPECT_FALSE(x[i - 1].file_end() == x[i].file_offset && x[i - 1].record == x[i].record &&
                 x[i - 1].value_offset + x[i - 1].length == x[i].value_offset)
        << "extents " << i - 1 << " and " << i << " should be one";
  }
}

// Pieces of one record overlaid in any order become one extent again; a punched page refilled from the
// same place of the record joins its neighbours; the map equals the record's own.
TEST(ExtentMap, OverlaysOfOneRecordMergeInAnyOrder) {
  const Location r = ExtFakeRecord(64 * 4096, 7);
  const ExtentMap whole = ExtentMap::FromLocation(r, 64 * 4096);
  std::vector<uint64_t> pages(64);
  for (uint64_t i = 0; i < 64; ++i) pages[i] = i;
  std::mt19937 rng(5);
  std::shuffle(pages.begin(), pages.end(), rng);
  ExtentMap m(64 * 4096);
  for (uint64_t p : pages) {
    ASSERT_TRUE(m.Overlay(p * 4096, 4096, r, p * 4096).ok());
    ExpectNormalized(m);
  }
  EXPECT_EQ(m.extents(), whole.extents());
  m.Punch(10 * 4096 + 100, 3 * 4096);
  EXPECT_EQ(m.extents().size(), 2u);
  ASSERT_TRUE(m.Overlay(10 * 4096 + 100, 3 * 4096, r, 10 * 4096 + 100).ok());
  EXPECT_EQ(m.extents(), whole.extents());
  // A punch inside one extent splits it in two; one over several leaves a head and a tail.
  const Location o = ExtFakeRecord(4096, 8);
  ASSERT_TRUE(m.Overlay(20 * 4096, 4096, o, 0).ok());
  ASSERT_TRUE(m.Overlay(30 * 4096, 4096, o, 0).ok());
  EXPECT_EQ(m.extents().size(), 5u);
  m.Punch(20 * 4096 - 10, 10 * 4096 + 20);
  ASSERT_EQ(m.extents().size(), 3u);  // r's head, o's tail, r from page 31
  EXPECT_EQ(m.extents()[0].file_end(), 20 * 4096 - 10);
  EXPECT_EQ(m.extents()[2].file_offset, 31 * 4096);
  EXPECT_EQ(m.extents()[1].file_offset, 30 * 4096 + 10);
  EXPECT_EQ(m.extents()[1].record, o);
  EXPECT_EQ(m.extents()[1].value_offset, 10u);
  ExpectNormalized(m);
}

TEST(ExtentMap, RandomOpsMatchAFlatFile) {
  ExtRecords recs;
  std::mt19937 rng(11);
  for (int round = 0; round < 12; ++round) {
    recs.values.clear();
    std::string flat;
    ExtentMap m;
    for (int op = 0; op < 40; ++op) {
      const uint64_t off = rng() % (3 * kExtMiB), len = 1 + rng() % (300 * 1024);
      switch (rng() % 4) {
        case 0:
        case 1: {
          // A record holding more than the overlaid range (it starts at value offset vo).
          const uint64_t vo = rng() % 5000;
          std::string v = ExtRandomBytes(vo + len + rng() % 100, rng());
          Location l = recs.Put(v);
          ASSERT_TRUE(m.Overlay(off, len, l, vo).ok());
          if (flat.size() < off + len) flat.resize(off + len, '\0');
          flat.replace(off, len, v.substr(vo, len));
          break;
        }
        case 2:
          m.Punch(off, len);
          if (off < flat.size()) {
            const uint64_t n = std::min<uint64_t>(len, flat.size() - off);
            flat.replace(off, n, std::string(n, '\0'));
          }
          break;
        case 3:
          m.Resize(off);
          flat.resize(off, '\0');
          break;
      }
      ASSERT_TRUE(m.Validate().ok());
      ASSERT_EQ(m.size(), flat.size());
      ExpectNormalized(m);
    }
    ASSERT_TRUE(MapIs(m, recs, flat)) << round;
    const uint64_t o = flat.empty() ? 0 : rng() % flat.size();
    ASSERT_EQ(ReadMap(m, recs, o, 70000), flat.substr(o, 70000));
    // Round trip through the encoding.
    ExtentMap back;
    ASSERT_TRUE(DecodeExtentMap(Encoded(m), &back).ok());
    ASSERT_EQ(back, m);
  }
}

// ---- the encoding ----

TEST(ExtentMapCodec, RoundTripAndSize) {
  ExtRecords recs;
  Location a = recs.Put(std::string(64 * kExtMiB, 'a'), "node-a");
  ExtentMap m = ExtentMap::FromLocation(a, 64 * kExtMiB);
  std::string one = Encoded(m);
  // Slot-file versions: every 2 MiB slot in a record of its own (same node, another segment).
  for (int i = 0; i < 32; ++i) {
    Location s = recs.Put(std::string(2 * kExtMiB, 's'), "node-a");
    s.segment.seq = 100 + i;
    ASSERT_TRUE(m.Overlay(i * 2 * kExtMiB, 2 * kExtMiB, s, 0).ok());
  }
  std::string enc = Encoded(m);
  ExtentMap back;
  ASSERT_TRUE(DecodeExtentMap(enc, &back).ok());
  EXPECT_EQ(back, m);
  // About 30 bytes per record referenced, 6-8 per extent: a PUT of this map stays small.
  EXPECT_LT(enc.size(), 32u * 40);
  ExtentMap back1;
  ASSERT_TRUE(DecodeExtentMap(one, &back1).ok());
  EXPECT_EQ(back1, ExtentMap::FromLocation(a, 64 * kExtMiB));
  // A sparse file of holes only.
  ExtentMap holes(1ull << 40);
  ASSERT_TRUE(DecodeExtentMap(Encoded(holes), &back).ok());
  EXPECT_EQ(back, holes);
}

TEST(ExtentMapCodec, MalformedInputIsCorruption) {
  ExtRecords recs;
  Location a = recs.Put(std::string(1000, 'a'));
  Location b = recs.Put(std::string(1000, 'b'));
  ExtentMap m(5000);
  ASSERT_TRUE(m.Overlay(100, 900, a, 100).ok());
  ASSERT_TRUE(m.Overlay(3000, 1000, b, 0).ok());
  const std::string enc = Encoded(m);
  ExtentMap out = ExtentMap(7);
  // Every truncation and any trailing byte.
  for (size_t n = 0; n < enc.size(); ++n) {
    EXPECT_TRUE(DecodeExtentMap(enc.substr(0, n), &out).IsCorruption()) << n;
  }
  EXPECT_TRUE(DecodeExtentMap(enc + "x", &out).IsCorruption());
  EXPECT_EQ(out, ExtentMap(7));  // unchanged on error
  // Hand-made: a record index out of range, an extent past the record, overlapping extents.
  auto make = [](uint64_t size, const std::vector<std::vector<uint64_t>>& ext, uint64_t rec_len) {
    std::string s;
    ExtentMap one(size);
    Location r;
    r.segment.node = "n";
    r.length = rec_len;
    one.AppendUnchecked(Extent{0, 1, r, 0});
    std::string head;
    EncodeExtentMap(one, &head);  // size, r=1, loc, n=1, (0, 1, 0, 0)
    head.resize(head.size() - 5);  // drop n and the extent
    head.push_back(static_cast<char>(ext.size()));
    for (auto& e : ext) {
      for (uint64_t v : e) head.push_back(static_cast<char>(v));  // all < 128: one-byte varints
    }
    return head;
  };
  ExtentMap ok;
  EXPECT_TRUE(DecodeExtentMap(make(100, {{0, 10, 0, 0}, {5, 10, 0, 20}}, 100), &ok).ok());
  EXPECT_TRUE(DecodeExtentMap(make(100, {{0, 10, 1, 0}}, 100), &out).IsCorruption());   // index
  EXPECT_TRUE(DecodeExtentMap(make(100, {{0, 10, 0, 95}}, 100), &out).IsCorruption());  // past record
  EXPECT_TRUE(DecodeExtentMap(make(100, {{0, 10, 0, 0}, {0, 0, 0, 0}}, 100), &out).IsCorruption());  // empty
  EXPECT_TRUE(DecodeExtentMap(make(15, {{0, 10, 0, 0}, {0, 10, 0, 0}}, 100), &out).IsCorruption());  // size
  // Random bytes never crash and never yield a map that fails Validate.
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) {
    std::string junk = enc;
    junk[rng() % junk.size()] = static_cast<char>(rng());
    if (rng() % 2) junk.resize(rng() % junk.size());
    ExtentMap j;
    if (DecodeExtentMap(junk, &j).ok()) {
      EXPECT_TRUE(j.Validate().ok());
    }
  }
}

// ---- the extent form of a staged version (ChunkBuffer) ----

// What a FLUSH in extent form would do: append DirtyParts as one record, map the version.
ExtentMap FlushAsExtents(const ChunkBuffer& b, ExtRecords& recs, uint64_t* written) {
  auto parts = b.DirtyParts();
  *written = 0;
  for (auto p : parts) *written += p.size();
  Location rec = *written ? recs.PutParts(parts) : Location{};
  ExtentMap m = b.ToExtentMap(rec);
  EXPECT_TRUE(m.Validate().ok());
  return m;
}

// The bytes ChunkBuffer b reads (every chunk, the backing's through recs) == want, read into the
// scratch buffer.
testing::AssertionResult ChunksAre(const ChunkBuffer& b, ExtRecords& recs, const std::string& want) {
  const size_t n = b.size();
  char* buf = Scratch(n);
  std::memset(buf, 'X', n);
  size_t got = 0;
  Status s = b.Read(0, n, buf, recs.chunk_fetch(), &got);
  if (!s.ok()) return testing::AssertionFailure() << s.ToString();
  if (got != n) return testing::AssertionFailure() << "read " << got << " of " << n;
  return SameBytes(buf, n, want);
}

TEST(ChunkBufferExtents, SlotRewriteWritesOnlyTheSlot) {
  ExtRecords recs;
  std::string file = ExtRandomBytes(16 * kExtMiB, 21);
  Location base = recs.Put(file);
  ChunkBuffer b;
  b.SetBacking(base, file.size());
  // Nothing written: no dirty byte, the map is the base record itself.
  uint64_t written = 0;
  ExtentMap m0 = FlushAsExtents(b, recs, &written);
  EXPECT_EQ(written, 0u);
  Location whole;
  EXPECT_TRUE(m0.SingleRecord(&whole));
  EXPECT_EQ(whole, base);
  // vllm-slotfile: one O_DIRECT pwrite of a 2 MiB slot at slot 5 of a 16 MiB file.
  std::string slot = ExtRandomBytes(2 * kExtMiB, 22);
  ASSERT_TRUE(b.Write(10 * kExtMiB, slot.data(), slot.size(), recs.chunk_fetch()).ok());
  file.replace(10 * kExtMiB, slot.size(), slot);
  ExtentMap m = FlushAsExtents(b, recs, &written);
  EXPECT_EQ(written, 2 * kExtMiB);  // today: 16 MiB (the whole file again)
  EXPECT_EQ(m.extents().size(), 3u);
  EXPECT_TRUE(MapIs(m, recs, file));
  // An unaligned 100-byte write inside a chunk: one 4 KiB page (the chunk is read once to merge).
  ASSERT_TRUE(b.Write(13 * kExtMiB + 5000, "0123456789", 10, recs.chunk_fetch()).ok());
  file.replace(13 * kExtMiB + 5000, 10, "0123456789");
  m = FlushAsExtents(b, recs, &written);
  EXPECT_EQ(written, 2 * kExtMiB + 4096);
  EXPECT_TRUE(MapIs(m, recs, file));
  EXPECT_TRUE(ChunksAre(b, recs, file));
}

TEST(ChunkBufferExtents, SparseWriteIsAHole) {
  ExtRecords recs;
  ChunkBuffer b;
  std::string w = ExtRandomBytes(50 * 1024, 23);
  b.Write(1600000, w.data(), w.size());
  uint64_t written = 0;
  ExtentMap m = FlushAsExtents(b, recs, &written);
  // 1600000 is in page 390, the end (1,651,200) 512 bytes into page 403: the pages from 390 on.
  EXPECT_EQ(written, 1651200u - 390 * 4096);  // 53,760; today: 1,651,200 (the zeros too)
  EXPECT_EQ(m.size(), 1600000 + w.size());
  EXPECT_EQ(m.NextData(0), 1600000u / 4096 * 4096);
  EXPECT_EQ(ReadMap(m, recs), std::string(1600000, '\0') + w);
  // ftruncate to 36 MiB, ranks pwrite their 9 MiB slices: only the slices are dirty.
  ChunkBuffer tp;
  tp.Resize(36 * kExtMiB);
  EXPECT_EQ(tp.DirtyBytes(), 0u);
  std::string want(36 * kExtMiB, '\0');
  for (int rank = 3; rank >= 0; --rank) {
    std::string slice = ExtRandomBytes(9 * kExtMiB, 30 + rank);
    tp.Write(rank * 9 * kExtMiB, slice.data(), slice.size());
    want.replace(rank * 9 * kExtMiB, slice.size(), slice);
  }
  m = FlushAsExtents(tp, recs, &written);
  EXPECT_EQ(written, 36 * kExtMiB);
  EXPECT_EQ(m.extents().size(), 1u);
  EXPECT_TRUE(MapIs(m, recs, want));
}

TEST(ChunkBufferExtents, GrowShrinkOverBaseKeepsBytes) {
  ExtRecords recs;
  std::string file = ExtRandomBytes(3 * kExtMiB + 777, 24);
  Location base = recs.Put(file);
  ChunkBuffer b;
  b.SetBacking(base, file.size());
  // Shrink into the last chunk, grow again: the old tail is zeros, never the base's bytes.
  ASSERT_TRUE(b.Resize(2 * kExtMiB + 100, recs.chunk_fetch()).ok());
  ASSERT_TRUE(b.Resize(3 * kExtMiB, recs.chunk_fetch()).ok());
  file.resize(2 * kExtMiB + 100);
  file.resize(3 * kExtMiB, '\0');
  uint64_t written = 0;
  ExtentMap m = FlushAsExtents(b, recs, &written);
  EXPECT_TRUE(MapIs(m, recs, file));
  EXPECT_EQ(written, 0u);  // zeros past the base are a hole
  // A write past the end over a partly based chunk, then a whole-chunk replacement.
  ASSERT_TRUE(b.Write(3 * kExtMiB + 10, "tail", 4, recs.chunk_fetch()).ok());
  file.resize(3 * kExtMiB + 10, '\0');
  file += "tail";
  std::string c0 = ExtRandomBytes(kExtMiB, 25);
  ASSERT_TRUE(b.Write(0, c0.data(), c0.size(), recs.chunk_fetch()).ok());
  file.replace(0, kExtMiB, c0);
  m = FlushAsExtents(b, recs, &written);
  EXPECT_TRUE(MapIs(m, recs, file));
  EXPECT_EQ(written, kExtMiB + 14);  // the last chunk holds 14 bytes
  EXPECT_TRUE(ChunksAre(b, recs, file));
}

// Random writes and resizes on a copy-on-write version: the extent form reads what the buffer reads,
// and writes at most the touched pages.
TEST(ChunkBufferExtents, RandomOpsMatchTheBuffer) {
  ExtRecords recs;
  std::mt19937 rng(31);
  for (int round = 0; round < 12; ++round) {
    std::string file = ExtRandomBytes(rng() % (4 * kExtMiB), rng());
    Location base = file.empty() ? Location{} : recs.Put(file);
    ChunkBuffer b;
    if (!file.empty()) b.SetBacking(base, file.size());
    uint64_t touched_pages_bound = 0;
    for (int op = 0; op < 25; ++op) {
      const uint64_t off = rng() % (5 * kExtMiB);
      if (rng() % 5 == 0) {
        ASSERT_TRUE(b.Resize(off, recs.chunk_fetch()).ok());
        touched_pages_bound += 2 * 4096;  // a growth may dirty one partial page of base bytes... bounded below
        file.resize(off, '\0');
      } else {
        const uint64_t len = 1 + rng() % (600 * 1024);
        std::string w = ExtRandomBytes(len, rng());
        ASSERT_TRUE(b.Write(off, w.data(), len, recs.chunk_fetch()).ok());
        touched_pages_bound += (len / 4096 + 2) * 4096;
        if (file.size() < off + len) file.resize(off + len, '\0');
        file.replace(off, len, w);
      }
    }
    ASSERT_TRUE(ChunksAre(b, recs, file)) << round;
    uint64_t written = 0;
    ExtentMap m = FlushAsExtents(b, recs, &written);
    ASSERT_TRUE(MapIs(m, recs, file)) << round;
    EXPECT_LE(written, b.size());
    (void)touched_pages_bound;
  }
}

// A copy-on-write version of a committed extent map: chunks over one extent are references, chunks
// without data holes, the others read through the map; a FLUSH writes only the pages written.
TEST(ChunkBufferExtents, CopyOnWriteOfAnExtentMap) {
  ExtRecords recs;
  Location a = recs.Put(ExtRandomBytes(3 * kExtMiB, 41));
  Location b = recs.Put(ExtRandomBytes(kExtMiB, 42));
  ExtentMap base(5 * kExtMiB);
  ASSERT_TRUE(base.Overlay(0, 3 * kExtMiB / 2, a, 0).ok());
  ASSERT_TRUE(base.Overlay(2 * kExtMiB, kExtMiB / 2, b, 100).ok());
  ASSERT_TRUE(base.Overlay(3 * kExtMiB, 2 * kExtMiB, a, kExtMiB).ok());
  std::string flat = ReadMap(base, recs);
  ChunkBuffer cb;
  cb.SetBacking(std::make_shared<const ExtentMap>(base));
  EXPECT_EQ(cb.size(), 5 * kExtMiB);
  EXPECT_EQ(cb.capacity(), 0u);
  recs.fetched = 0;
  EXPECT_TRUE(ChunksAre(cb, recs, flat));
  EXPECT_EQ(recs.fetched, base.DataBytes());  // holes are not fetched
  uint64_t written = 0;
  ExtentMap same = FlushAsExtents(cb, recs, &written);
  EXPECT_EQ(written, 0u);
  EXPECT_EQ(same, base);
  // Writes into the a-part of chunk 1 and the hole part of chunk 2: each chunk is read once (its data
  // bytes only), one page each is written.
  recs.fetched = 0;
  ASSERT_TRUE(cb.Write(kExtMiB + 10, "hello", 5, recs.chunk_fetch()).ok());
  ASSERT_TRUE(cb.Write(2 * kExtMiB + 700000, "world", 5, recs.chunk_fetch()).ok());
  EXPECT_EQ(recs.fetched, kExtMiB);  // half a chunk of a, half a chunk of b
  flat.replace(kExtMiB + 10, 5, "hello");
  flat.replace(2 * kExtMiB + 700000, 5, "world");
  EXPECT_TRUE(ChunksAre(cb, recs, flat));
  ExtentMap m = FlushAsExtents(cb, recs, &written);
  EXPECT_EQ(written, 2u * 4096);
  EXPECT_TRUE(MapIs(m, recs, flat));
  EXPECT_EQ(m.DataBytes(), base.DataBytes() + 4096);  // the page in the hole is data now
  // Shrink into the mapped chunk, grow again: the old bytes never come back.
  ASSERT_TRUE(cb.Resize(2 * kExtMiB + 100, recs.chunk_fetch()).ok());
  ASSERT_TRUE(cb.Resize(4 * kExtMiB + 5, recs.chunk_fetch()).ok());
  flat.resize(2 * kExtMiB + 100);
  flat.resize(4 * kExtMiB + 5, '\0');
  EXPECT_TRUE(ChunksAre(cb, recs, flat));
  m = FlushAsExtents(cb, recs, &written);
  EXPECT_TRUE(MapIs(m, recs, flat));
  EXPECT_EQ(written, 4096u);  // the hello page; the world page is past the cut
}

// Random ops on copy-on-write versions of random extent maps: buffer, extent form and flat agree.
TEST(ChunkBufferExtents, RandomOpsOverAnExtentMap) {
  ExtRecords recs;
  std::mt19937 rng(43);
  for (int round = 0; round < 10; ++round) {
    recs.values.clear();
    ExtentMap base(rng() % (4 * kExtMiB));
    for (int i = 0; i < 8; ++i) {
      const uint64_t off = rng() % (4 * kExtMiB), len = 1 + rng() % (kExtMiB);
      const uint64_t vo = rng() % 9000;
      Location l = recs.Put(ExtRandomBytes(vo + len, rng()));
      ASSERT_TRUE(base.Overlay(off, len, l, vo).ok());
      if (rng() % 3 == 0) base.Punch(rng() % (4 * kExtMiB), rng() % kExtMiB);
    }
    std::string file = ReadMap(base, recs);
    ChunkBuffer b;
    b.SetBacking(std::make_shared<const ExtentMap>(base));
    for (int op = 0; op < 20; ++op) {
      const uint64_t off = rng() % (6 * kExtMiB);
      if (rng() % 5 == 0) {
        ASSERT_TRUE(b.Resize(off, recs.chunk_fetch()).ok());
        file.resize(off, '\0');
      } else {
        const uint64_t len = 1 + rng() % (300 * 1024);
        std::string w = ExtRandomBytes(len, rng());
        ASSERT_TRUE(b.Write(off, w.data(), len, recs.chunk_fetch()).ok());
        if (file.size() < off + len) file.resize(off + len, '\0');
        file.replace(off, len, w);
      }
      if (op % 7 == 0) {
        ASSERT_TRUE(ChunksAre(b, recs, file)) << round << " " << op;
      }
    }
    ASSERT_TRUE(ChunksAre(b, recs, file)) << round;
    uint64_t written = 0;
    ExtentMap m = FlushAsExtents(b, recs, &written);
    ASSERT_TRUE(MapIs(m, recs, file)) << round;
    EXPECT_LE(written, b.size());
  }
}

// FLUSH after FLUSH of one open version (ChunkBuffer::Rebase, what FlushLocked does after appending the
// dirty pages): each map reads the whole file, and each FLUSH appends only the pages written since the
// previous one (4 ranks closing one by one: each slice once).
TEST(ChunkBufferExtents, RebaseAfterAFlushAppendsOnlyLaterWrites) {
  ExtRecords recs;
  std::string file = ExtRandomBytes(8 * kExtMiB, 61);
  ChunkBuffer b;
  b.SetBacking(recs.Put(file), file.size());
  uint64_t total = 0;
  for (int rank = 0; rank < 4; ++rank) {  // each rank rewrites its 2 MiB slice, then closes (FLUSH)
    std::string w = ExtRandomBytes(2 * kExtMiB, 70 + rank);
    ASSERT_TRUE(b.Write(rank * 2 * kExtMiB, w.data(), w.size(), recs.chunk_fetch()).ok());
    file.replace(rank * 2 * kExtMiB, w.size(), w);
    uint64_t written = 0;
    ExtentMap m = FlushAsExtents(b, recs, &written);
    EXPECT_EQ(written, 2 * kExtMiB) << rank;  // without Rebase: 2, 4, 6, 8 MiB
    total += written;
    ASSERT_TRUE(MapIs(m, recs, file)) << rank;
    b.Rebase(std::make_shared<const ExtentMap>(m));
    ASSERT_TRUE(ChunksAre(b, recs, file)) << rank;
  }
  EXPECT_EQ(total, 8 * kExtMiB);
  // Random writes, resizes and flushes: every flush's map is the file, a flush with nothing new writes 0.
  std::mt19937 rng(62);
  for (int op = 0; op < 60; ++op) {
    const uint64_t off = rng() % (10 * kExtMiB);
    if (rng() % 6 == 0) {
      ASSERT_TRUE(b.Resize(off, recs.chunk_fetch()).ok());
      file.resize(off, '\0');
    } else {
      const uint64_t len = 1 + rng() % (200 * 1024);
      std::string w = ExtRandomBytes(len, rng());
      ASSERT_TRUE(b.Write(off, w.data(), len, recs.chunk_fetch()).ok());
      if (file.size() < off + len) file.resize(off + len, '\0');
      file.replace(off, len, w);
    }
    if (op % 5 == 4) {
      uint64_t written = 0;
      ExtentMap m = FlushAsExtents(b, recs, &written);
      ASSERT_TRUE(MapIs(m, recs, file)) << op;
      b.Rebase(std::make_shared<const ExtentMap>(m));
      ASSERT_TRUE(ChunksAre(b, recs, file)) << op;
      FlushAsExtents(b, recs, &written);
      EXPECT_EQ(written, 0u) << op;
    }
  }
}

// lseek SEEK_DATA / SEEK_HOLE of a staged version (ChunkBuffer::NextData / NextHole, what OpLseek asks
// of a version being written) agree with the map a FLUSH would commit (ToExtentMap), at every extent
// boundary (and one byte either side) and at random offsets; every byte they call a hole reads zero.
void ExpectSeekMatchesTheMap(const ChunkBuffer& b, ExtRecords& recs, std::mt19937& rng, const std::string& what) {
  Location probe;
  probe.segment.node = "?";
  probe.record_offset = 1ull << 40;
  probe.length = std::max<uint64_t>(1, b.DirtyBytes());
  const ExtentMap m = b.ToExtentMap(probe);
  std::vector<uint64_t> offs = {0, b.size() > 0 ? b.size() - 1 : 0};
  for (const Extent& e : m.extents()) {
    for (uint64_t o : {e.file_offset, e.file_end()}) {
      offs.push_back(o);
      if (o > 0) offs.push_back(o - 1);
      offs.push_back(o + 1);
    }
  }
  for (int i = 0; i < 64 && b.size() > 0; ++i) offs.push_back(rng() % b.size());
  std::set<uint64_t> holes_read;  // each reported hole is read once (offsets in one run share it)
  for (uint64_t o : offs) {
    if (o >= b.size()) continue;
    EXPECT_EQ(b.NextData(o), m.NextData(o)) << what << " data@" << o;
    EXPECT_EQ(b.NextHole(o), m.NextHole(o)) << what << " hole@" << o;
    // The hole it reports reads as zeros up to the next data.
    const uint64_t h = b.NextHole(o);
    if (h < b.size() && holes_read.insert(h).second) {
      const uint64_t d = b.NextData(h);
      EXPECT_GT(d, h) << what;
      const size_t n = std::min<uint64_t>(d - h, 3 * kExtMiB);
      char* z = Scratch(n);
      std::memset(z, 'X', n);
      size_t got = 0;
      ASSERT_TRUE(b.Read(h, n, z, recs.chunk_fetch(), &got).ok());
      EXPECT_EQ(got, n) << what << " hole@" << h;
      static const std::string zeros(3 * kExtMiB, '\0');
      EXPECT_EQ(std::memcmp(z, zeros.data(), got), 0) << what << " hole@" << h;
    }
  }
}

TEST(ChunkBufferExtents, SeekDataAndHoleOfAStagedVersion) {
  ExtRecords recs;
  std::mt19937 rng(71);
  // A 50 KiB pwrite at 1.6 MB of a new file: data from the page it starts in to the end.
  {
    ChunkBuffer b;
    std::string w = ExtRandomBytes(50 * 1024, 72);
    b.Write(1600000, w.data(), w.size());
    EXPECT_EQ(b.NextData(0), 1600000u / 4096 * 4096);
    EXPECT_EQ(b.NextHole(0), 0u);
    EXPECT_EQ(b.NextHole(1600000), b.size());
    EXPECT_EQ(b.NextData(b.size()), b.size());
  }
  // A committed extent map as the base (holes included), random writes, resizes and flushes.
  for (int round = 0; round < 8; ++round) {
    recs.values.clear();
    ExtentMap base(rng() % (4 * kExtMiB));
    for (int i = 0; i < 6; ++i) {
      const uint64_t off = rng() % (4 * kExtMiB), len = 1 + rng() % kExtMiB;
      Location l = recs.Put(ExtRandomBytes(len + 100, rng()));
      ASSERT_TRUE(base.Overlay(off, len, l, 100).ok());
      if (rng() % 2 == 0) base.Punch(rng() % (4 * kExtMiB), rng() % kExtMiB);
    }
    ChunkBuffer b;
    b.SetBacking(std::make_shared<const ExtentMap>(base));
    std::string file = ReadMap(base, recs);
    ExpectSeekMatchesTheMap(b, recs, rng, "base " + std::to_string(round));
    for (int op = 0; op < 16; ++op) {
      const uint64_t off = rng() % (6 * kExtMiB);
      const int what = rng() % 5;
      if (what == 0) {
        ASSERT_TRUE(b.Resize(off, recs.chunk_fetch()).ok());
        file.resize(off, '\0');
      } else if (what == 1) {  // fallocate PUNCH_HOLE
        const uint64_t len = 1 + rng() % (3 * kExtMiB);
        ASSERT_TRUE(b.Punch(off, len, recs.chunk_fetch()).ok());
        if (off < file.size()) file.replace(off, std::min<uint64_t>(len, file.size() - off), std::min<uint64_t>(len, file.size() - off), '\0');
      } else {
        const uint64_t len = 1 + rng() % (300 * 1024);
        std::string w = ExtRandomBytes(len, rng());
        ASSERT_TRUE(b.Write(off, w.data(), len, recs.chunk_fetch()).ok());
        if (file.size() < off + len) file.resize(off + len, '\0');
        file.replace(off, len, w);
      }
      ASSERT_EQ(b.size(), file.size());
      ASSERT_TRUE(ChunksAre(b, recs, file)) << round << "/" << op;
      ExpectSeekMatchesTheMap(b, recs, rng, std::to_string(round) + "/" + std::to_string(op));
      if (op % 6 == 5) {
        uint64_t written = 0;
        ExtentMap m = FlushAsExtents(b, recs, &written);
        ASSERT_TRUE(MapIs(m, recs, file));
        b.Rebase(std::make_shared<const ExtentMap>(m));
        ExpectSeekMatchesTheMap(b, recs, rng, "rebased " + std::to_string(round) + "/" + std::to_string(op));
      }
    }
  }
}

// fallocate PUNCH_HOLE of a staged version (ChunkBuffer::Punch): whole chunks become holes (RAM freed,
// nothing written), partly covered chunks get zeros: holes where nothing lies under a whole page, written
// zero pages over base bytes.
TEST(ChunkBufferExtents, PunchMakesHolesAndWritesOnlyPagesOverBase) {
  ExtRecords recs;
  std::string file = ExtRandomBytes(8 * kExtMiB, 81);
  ChunkBuffer b;
  b.SetBacking(recs.Put(file), file.size());
  ASSERT_TRUE(b.Punch(kExtMiB, 2 * kExtMiB, recs.chunk_fetch()).ok());
  file.replace(kExtMiB, 2 * kExtMiB, 2 * kExtMiB, '\0');
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_EQ(b.DirtyBytes(), 0u);
  EXPECT_EQ(b.NextHole(0), kExtMiB);
  EXPECT_EQ(b.NextData(kExtMiB), 3 * kExtMiB);
  uint64_t written = 0;
  ExtentMap m = FlushAsExtents(b, recs, &written);
  EXPECT_EQ(written, 0u);
  EXPECT_EQ(m.DataBytes(), 6 * kExtMiB);
  EXPECT_TRUE(MapIs(m, recs, file));
  // Unaligned, inside a referenced chunk: it is read in, the page it covers whole is a hole (over base
  // bytes), the two it covers in part are written zeros.
  ASSERT_TRUE(b.Punch(5 * kExtMiB + 100, 10000, recs.chunk_fetch()).ok());
  file.replace(5 * kExtMiB + 100, 10000, 10000, '\0');
  EXPECT_EQ(b.DirtyBytes(), 2u * 4096);
  EXPECT_EQ(b.NextHole(5 * kExtMiB), 5 * kExtMiB + 4096);
  EXPECT_EQ(b.NextData(5 * kExtMiB + 4096), 5 * kExtMiB + 8192);
  EXPECT_TRUE(ChunksAre(b, recs, file));
  m = FlushAsExtents(b, recs, &written);
  EXPECT_EQ(written, 2u * 4096);
  EXPECT_EQ(m.NextHole(5 * kExtMiB), 5 * kExtMiB + 4096);
  EXPECT_TRUE(MapIs(m, recs, file));
  // Written again after that: the hole page becomes data again (dirty wins).
  ASSERT_TRUE(b.Write(5 * kExtMiB + 5000, "abc", 3, recs.chunk_fetch()).ok());
  file.replace(5 * kExtMiB + 5000, 3, "abc");
  EXPECT_EQ(b.DirtyBytes(), 3u * 4096);
  EXPECT_EQ(b.NextHole(5 * kExtMiB), 8 * kExtMiB);
  EXPECT_TRUE(ChunksAre(b, recs, file));
  m = FlushAsExtents(b, recs, &written);
  EXPECT_TRUE(MapIs(m, recs, file));
  // A punch past the end changes nothing; one over the end stops at it (the size stays).
  ASSERT_TRUE(b.Punch(9 * kExtMiB, 4096, recs.chunk_fetch()).ok());
  ASSERT_TRUE(b.Punch(7 * kExtMiB, 5 * kExtMiB, recs.chunk_fetch()).ok());
  file.replace(7 * kExtMiB, kExtMiB, kExtMiB, '\0');
  EXPECT_EQ(b.size(), 8 * kExtMiB);
  EXPECT_EQ(b.NextData(7 * kExtMiB), 8 * kExtMiB);  // none: the caller answers ENXIO
  EXPECT_TRUE(ChunksAre(b, recs, file));
  // A new file written in RAM: whole pages punched over nothing are holes, not written zeros.
  ChunkBuffer n;
  std::string w = ExtRandomBytes(3 * kExtMiB, 82);
  n.Write(0, w.data(), w.size());
  ASSERT_TRUE(n.Punch(4096, 8192, nullptr).ok());
  ASSERT_TRUE(n.Punch(2 * kExtMiB + 10, 100, nullptr).ok());  // inside one page: zeros in a written page
  w.replace(4096, 8192, 8192, '\0');
  w.replace(2 * kExtMiB + 10, 100, 100, '\0');
  EXPECT_EQ(n.DirtyBytes(), 3 * kExtMiB - 8192);
  EXPECT_EQ(n.NextHole(0), 4096u);
  EXPECT_EQ(n.NextData(4096), 12288u);
  EXPECT_TRUE(ChunksAre(n, recs, w));
  m = FlushAsExtents(n, recs, &written);
  EXPECT_EQ(written, 3 * kExtMiB - 8192);
  EXPECT_TRUE(MapIs(m, recs, w));
}


// Sealed closes (design.md §13 "Sealed closes", fuse/commit.cc): a close of a few pages seals them
// (Seal) instead of appending them; a writer that joins goes on writing other pages; the deferred
// commit appends the sealed pages as one record and publishes exactly the state of the last sealed
// close (ToExtentMapSealed), never bytes written after it; after RebaseSealed the next FLUSH appends
// exactly the pages written since the seal. A write over a sealed page, past the end or replacing a
// referenced chunk, a resize and a punch are refused while sealed (the daemon appends the sealed pages
// first, FlushSealed, as here), and change nothing.
TEST(ChunkBufferExtents, SealedClosesKeepTheirStateWhileAJoinedWriterWrites) {
  ExtRecords recs;
  std::mt19937 rng(91);
  uint64_t seals = 0, flushes = 0, refused = 0;
  for (int round = 0; round < 40; ++round) {
    recs.values.clear();
    const uint64_t size0 = 4096 + rng() % (4 * kExtMiB);
    ExtentMap base(size0);
    for (int i = 0; i < 6; ++i) {
      const uint64_t off = rng() % size0, len = 1 + rng() % std::min<uint64_t>(kExtMiB, size0 - off);
      const uint64_t vo = rng() % 9000;
      Location l = recs.Put(ExtRandomBytes(vo + len, rng()));
      ASSERT_TRUE(base.Overlay(off, len, l, vo).ok());
      if (rng() % 3 == 0) base.Punch(rng() % size0, rng() % kExtMiB);
    }
    std::string file = ReadMap(base, recs);
    ChunkBuffer b;
    b.SetBacking(std::make_shared<const ExtentMap>(base));
    std::string at_seal;           // the file as of the last Seal()
    std::set<uint64_t> since_seal;  // pages written since the last Seal()
    auto flush_sealed = [&]() {
      auto parts = b.SealedParts();
      Location rec = parts.empty() ? Location{} : recs.PutParts(parts);
      ExtentMap m = b.ToExtentMapSealed(rec);
      ASSERT_TRUE(m.Validate().ok());
      ASSERT_TRUE(MapIs(m, recs, at_seal)) << round;  // exactly the close's state
      b.RebaseSealed(std::make_shared<const ExtentMap>(m));
      EXPECT_FALSE(b.sealed());
      if (rng() % 2) b.ReleaseClean();
      ASSERT_TRUE(ChunksAre(b, recs, file)) << round;
      uint64_t expect = 0;
      for (uint64_t pg : since_seal) {
        if (pg * 4096 < b.size()) expect += std::min<uint64_t>(4096, b.size() - pg * 4096);
      }
      uint64_t written = 0;
      ExtentMap f = FlushAsExtents(b, recs, &written);
      EXPECT_EQ(written, expect) << round;  // only what was written after the seal
      ASSERT_TRUE(MapIs(f, recs, file)) << round;
      flushes++;
    };
    for (int op = 0; op < 40; ++op) {
      const uint64_t sz = b.size();
      int what = rng() % 10;
      if (what == 1 && sz == 0) what = 0;  // nothing to punch
      if (what == 0 || what == 1) {
        // A resize or a punch: refused while sealed (nothing changes), else done.
        const uint64_t off = rng() % (sz + kExtMiB);
        const uint64_t len = 1 + rng() % (2 * kExtMiB);
        if (b.sealed()) {
          EXPECT_FALSE((what == 0 ? b.Resize(off == sz ? off + 1 : off, recs.chunk_fetch())
                                  : b.Punch(std::min(off, sz - 1), len, recs.chunk_fetch())).ok());
          ASSERT_EQ(b.size(), sz);
          ASSERT_TRUE(ChunksAre(b, recs, file)) << round << " " << op;
          refused++;
          flush_sealed();
        }
        if (what == 0) {
          ASSERT_TRUE(b.Resize(off, recs.chunk_fetch()).ok());
          file.resize(off, '\0');
        } else if (sz > 0) {
          const uint64_t o = std::min(off, sz - 1);
          ASSERT_TRUE(b.Punch(o, len, recs.chunk_fetch()).ok());
          const uint64_t e = std::min(sz, o + len);
          file.replace(o, e - o, e - o, '\0');
        }
        since_seal.clear();  // everything is dirty or recorded again: treated as before any seal
        continue;
      }
      if (what == 2) {  // a close: seal (again: everything dirty now)
        b.Seal();
        seals++;
        at_seal = file;
        since_seal.clear();
        continue;
      }
      if (what == 3 && b.sealed()) {  // the deferred commit
        flush_sealed();
        continue;
      }
      // A write: small pages mostly, sometimes a whole chunk or past the end.
      uint64_t off = rng() % (sz + 8192), len = 1 + rng() % 12000;
      if (rng() % 8 == 0) {
        off = (rng() % (sz / kExtMiB + 1)) * kExtMiB;
        len = kExtMiB;
      }
      std::string w = ExtRandomBytes(len, rng());
      if (b.SealConflicts(off, len)) {
        EXPECT_FALSE(b.Write(off, w.data(), len, recs.chunk_fetch()).ok());
        ASSERT_TRUE(ChunksAre(b, recs, file)) << round << " " << op;
        refused++;
        flush_sealed();
        EXPECT_FALSE(b.SealConflicts(off, len));
      }
      ASSERT_TRUE(b.Write(off, w.data(), len, recs.chunk_fetch()).ok()) << round << " " << op;
      if (file.size() < off + len) file.resize(off + len, '\0');
      file.replace(off, len, w);
      if (b.sealed()) {
        for (uint64_t pg = off / 4096; pg * 4096 < off + len; ++pg) since_seal.insert(pg);
      }
      ASSERT_TRUE(ChunksAre(b, recs, file)) << round << " " << op;
    }
    if (b.sealed()) flush_sealed();
  }
  EXPECT_GT(seals, 100u);
  EXPECT_GT(flushes, 50u);
  EXPECT_GT(refused, 20u);
}

// ---- compaction copies (design.md §13): what FLUSH (fuse/commit.cc FlushLocked) does over the bound ----

TEST(ExtentMap, CompactionRangesCopyColdExtentsAndKeepLargeHoles) {
  ExtRecords recs;
  // Under the bound: nothing to copy.
  ExtentMap ok = ExtentMap::FromLocation(recs.Put(std::string(8 * kExtMiB, 'a')), 8 * kExtMiB);
  EXPECT_TRUE(ok.CompactionRanges(Location{}).empty());
  // A record of which only 64 KiB of 1 MiB is live (cold): its extent is copied, nothing else.
  Location base = recs.Put(std::string(8 * kExtMiB, 'b'));
  Location cold = recs.Put(std::string(kExtMiB, 'c'));
  Location fresh = recs.Put(std::string(4096, 'f'));
  ExtentMap m = ExtentMap::FromLocation(base, 8 * kExtMiB);
  ASSERT_TRUE(m.Overlay(kExtMiB, 64 * 1024, cold, 0).ok());
  ASSERT_TRUE(m.Overlay(5 * kExtMiB, 4096, fresh, 0).ok());
  m.Punch(6 * kExtMiB, kExtMiB);  // a hole
  ASSERT_TRUE(m.NeedsCompaction());
  auto r = m.CompactionRanges(fresh);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], (ExtentMap::Range{kExtMiB, 64 * 1024}));
  EXPECT_EQ(r[1], (ExtentMap::Range{5 * kExtMiB, 4096}));
  Location rec = recs.Put(std::string(64 * 1024, 'c') + std::string(4096, 'f'));
  ExtentMap c = m.WithRangesFrom(r, rec);
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(ReadMap(c, recs), ReadMap(m, recs));
  EXPECT_FALSE(c.NeedsCompaction());
  EXPECT_EQ(c.NextData(6 * kExtMiB), 7 * kExtMiB);  // the hole stays a hole
  // Too many extents: 4 KiB records at every 8th page of a 16 MiB file, plus 3 large holes. With an
  // unlimited budget joins go cheapest first until at most kJoinExtents / 2 are left; the large holes
  // are never filled.
  ExtentMap f = ExtentMap::FromLocation(recs.Put(std::string(16 * kExtMiB, 'g')), 16 * kExtMiB);
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(f.Overlay(i * 2 * 4096 + 4096, 4096, recs.Put(std::string(4096, static_cast<char>(i))), 0).ok());
  }
  for (uint64_t h = 0; h < 3; ++h) f.Punch((9 + 2 * h) * kExtMiB + 12345, kExtMiB);
  ASSERT_GT(f.extents().size(), ExtentMap::kJoinExtents);
  auto fr = f.CompactionRanges(Location{});
  uint64_t copied = 0;
  std::string v;
  for (const auto& x : fr) {
    copied += x.length;
    v += ReadMap(f, recs, x.offset, x.length);
  }
  ExtentMap fc = f.WithRangesFrom(fr, recs.Put(v));
  EXPECT_TRUE(fc.Validate().ok());
  EXPECT_LE(fc.extents().size(), ExtentMap::kJoinExtents / 2);
  EXPECT_GE(fc.extents().size(), ExtentMap::kJoinExtents / 2 - 2);
  EXPECT_EQ(ReadMap(fc, recs), ReadMap(f, recs));
  for (uint64_t h = 0; h < 3; ++h) {
    const uint64_t at = (9 + 2 * h) * kExtMiB + 12345;
    EXPECT_EQ(fc.NextHole(at - 1), at) << h;
    EXPECT_EQ(fc.NextData(at), at + kExtMiB) << h;
  }
  EXPECT_LT(copied, f.DataBytes()) << copied;  // only part of the file
}

// A version flushed as FlushLocked does: the dirty pages, plus the compaction copies when the map is
// over the bound; *written = the record's bytes, *copies = those beyond the dirty pages.
// *credit is the file's copy budget (fuse/commit.cc, Staging::compaction_credit): + dirty / 5 per FLUSH,
// - the bytes copied.
ExtentMap FlushCompacting(ChunkBuffer& b, ExtRecords& recs, uint64_t* written, uint64_t* copies,
                          uint64_t* credit) {
  Location probe;
  probe.segment.node = "?";
  probe.length = b.DirtyBytes();
  const ExtentMap planned = b.ToExtentMap(probe);
  *credit += probe.length / (ExtentMap::kMinLiveFraction - 1);
  const auto ranges = planned.CompactionRanges(probe, *credit);
  *copies = 0;
  if (ranges.empty()) {
    ExtentMap m = FlushAsExtents(b, recs, written);
    b.Rebase(std::make_shared<const ExtentMap>(m));
    return m;
  }
  std::string v;
  for (const auto& r : ranges) {
    std::string piece(r.length, 'X');
    size_t got = 0;
    EXPECT_TRUE(b.Read(r.offset, r.length, piece.data(), recs.chunk_fetch(), &got).ok());
    v += piece;
  }
  *written = v.size();
  *copies = v.size() - probe.length;
  *credit = *credit > *copies ? *credit - *copies : 0;
  ExtentMap m = planned.WithRangesFrom(ranges, recs.Put(std::move(v)));
  EXPECT_TRUE(m.Validate().ok());
  for (const Location& l : m.Records()) EXPECT_NE(l, probe);
  b.Rebase(std::make_shared<const ExtentMap>(m), /*refs_too=*/true);
  return m;
}

TEST(ChunkBufferExtents, CompactionCopiesKeepTheBoundAndTheHoles) {
  ExtRecords recs;
  // 16 MiB: data in [0, 6 MiB) and [10 MiB, 16 MiB), a 4 MiB hole between; then 300 reopen/close
  // cycles of 8 scattered small pwrites each (4 KiB pages and unaligned 100-byte writes) into the data.
  std::string file(16 * kExtMiB, '\0');
  ChunkBuffer b;
  std::string d1 = ExtRandomBytes(6 * kExtMiB, 90), d2 = ExtRandomBytes(6 * kExtMiB, 91);
  b.Write(0, d1.data(), d1.size());
  b.Write(10 * kExtMiB, d2.data(), d2.size());
  file.replace(0, d1.size(), d1);
  file.replace(10 * kExtMiB, d2.size(), d2);
  uint64_t written = 0, copies = 0, total_written = 0, total_copies = 0, through_mount = 0, credit = 0;
  ExtentMap m = FlushCompacting(b, recs, &written, &copies, &credit);
  credit = 0;  // the first FLUSH wrote the file whole (a commit.cc all-new FLUSH earns nothing)
  int compactions = 0;
  std::mt19937 rng(92);
  for (int cycle = 0; cycle < 300; ++cycle) {
    ChunkBuffer w;  // a reopen: copy-on-write of the committed map
    w.SetBacking(std::make_shared<const ExtentMap>(m));
    for (int i = 0; i < 8; ++i) {
      const uint64_t region = rng() % 2 ? 0 : 10 * kExtMiB;
      const bool page = rng() % 4 != 0;
      const uint64_t len = page ? 4096 : 100;
      const uint64_t off = region + (page ? (rng() % (6 * kExtMiB / 4096)) * 4096 : rng() % (6 * kExtMiB - 100));
      std::string x = ExtRandomBytes(len, rng());
      ASSERT_TRUE(w.Write(off, x.data(), len, recs.chunk_fetch()).ok());
      file.replace(off, len, x);
      through_mount += len;
    }
    m = FlushCompacting(w, recs, &written, &copies, &credit);
    total_written += written;
    total_copies += copies;
    compactions += copies > 0;
    ASSERT_LE(m.extents().size(), ExtentMap::kMaxExtents) << cycle;
    {
      std::vector<Location> cold;
      const bool need = m.NeedsCompaction(&cold);
      ASSERT_FALSE(need) << cycle << " extents " << m.extents().size() << " cold " << cold.size() << " copies "
                         << copies << " written " << written;
    }
    ASSERT_EQ(m.NextData(6 * kExtMiB), 10 * kExtMiB) << cycle;  // the hole stays
    if (cycle % 25 == 24) {
      ASSERT_TRUE(MapIs(m, recs, file)) << cycle;
      ASSERT_TRUE(ChunksAre(w, recs, file)) << cycle;  // the rebased buffer reads the same bytes
    }
  }
  ASSERT_TRUE(MapIs(m, recs, file));
  std::printf("compaction: %llu bytes through the mount (page-rounded %llu), %llu written, %llu of them copies, "
              "%d compactions\n",
              (unsigned long long)through_mount, (unsigned long long)(total_written - total_copies),
              (unsigned long long)total_written, (unsigned long long)total_copies, compactions);
  EXPECT_GE(compactions, 1);
  // The copies: at most 0.2 (records under 1/6 live) + 0.2 (joins, the copy budget) of the dirty pages
  // (before the budget: 27,119,616 copies for 9,895,936 bytes of dirty pages).
  EXPECT_LE(total_copies * 5, 2 * (total_written - total_copies)) << total_copies;
}

// Extent-count joins are paid from the copy budget (extent_map.h "Fragmentation bound"): random maps of
// 1,100-2,600 extents (scattered overlays from records of which only part is live, punched holes) and a
// range of budgets: the bytes copied beyond the cold records' extents never exceed the budget, more
// budget never leaves more extents, an unlimited one reaches kJoinExtents / 2, and every result meets
// the per-record rule and the hard cap.
TEST(ExtentMap, CompactionJoinsStayWithinTheBudget) {
  int maps = 0;
  for (unsigned seed = 1; seed <= 16; ++seed) {
    std::mt19937_64 rng(seed);
    const uint64_t size = (8 + rng() % 56) * kExtMiB;
    ExtentMap m = ExtentMap::FromLocation(ExtFakeRecord(size, 1), size);
    const int overlays = 650 + static_cast<int>(rng() % 750);
    for (int k = 0; k < overlays; ++k) {
      const uint64_t len = (1 + rng() % 4) * 4096, extra = (rng() % 3) * len;  // some records part dead
      const uint64_t off = (rng() % (size / 4096 - 4)) * 4096;
      ASSERT_TRUE(m.Overlay(off, len, ExtFakeRecord(len + extra, 2 + k), rng() % (extra + 1) / 4096 * 4096).ok());
      if (rng() % 50 == 0) m.Punch((rng() % (size / 4096)) * 4096, (1 + rng() % 64) * 4096);
    }
    if (m.extents().size() <= ExtentMap::kJoinExtents) continue;  // overlays overlapped: not over
    maps++;
    std::vector<Location> cold;
    m.NeedsCompaction(&cold);
    uint64_t cold_bytes = 0;
    for (const Extent& e : m.extents()) {
      if (std::find(cold.begin(), cold.end(), e.record) != cold.end()) cold_bytes += e.length;
    }
    size_t prev_count = SIZE_MAX;
    for (uint64_t budget : {uint64_t{0}, uint64_t{4096}, uint64_t{64 << 10}, uint64_t{1} << 20, uint64_t{8} << 20,
                            UINT64_MAX}) {
      const auto ranges = m.CompactionRanges(Location{}, budget);  // no fresh extents: all is a copy
      uint64_t copied = 0;
      for (const auto& r : ranges) copied += r.length;
      EXPECT_LE(copied, std::max(budget, cold_bytes)) << seed << " budget " << budget;
      if (cold.empty() && budget == 0) {
        EXPECT_TRUE(ranges.empty()) << seed;
      }
      const ExtentMap c = m.WithRangesFrom(ranges, ExtFakeRecord(std::max<uint64_t>(copied, 1), 1 << 20));
      ASSERT_TRUE(c.Validate().ok()) << seed;
      EXPECT_FALSE(c.NeedsCompaction()) << seed << " budget " << budget;  // the per-record rule, the cap
      EXPECT_LE(c.extents().size(), prev_count) << seed << " budget " << budget;
      prev_count = c.extents().size();
      if (budget == UINT64_MAX) {
        EXPECT_LE(c.extents().size(), ExtentMap::kJoinExtents / 2) << seed;
      } else if (budget < (64u << 10) && copied <= cold_bytes) {
        EXPECT_GT(c.extents().size(), ExtentMap::kJoinExtents / 2) << seed;  // the budget, not the target, stopped it
      }
    }
  }
  EXPECT_GE(maps, 10);
}

// The hard cap: a map over kMaxExtents is joined, cheapest first, down to kMaxExtents - kMaxExtents / 8
// even with no budget (and no further), and the result meets the per-record rule. Also states what a map
// at the cap costs encoded (the whole-map journal PUT, the local index's inode record).
TEST(ExtentMap, CompactionHardCapJoinsBeyondTheBudget) {
  const uint64_t pages = 3 * (ExtentMap::kMaxExtents / 2 + 200);
  ExtentMap m = ExtentMap::FromLocation(ExtFakeRecord(pages * 4096, 1), pages * 4096);
  // A scattered 4 KiB page rewritten at every third page, each its own FLUSH record: 2 extents each.
  for (uint64_t i = 0; i < ExtentMap::kMaxExtents / 2 + 200; ++i) {
    ASSERT_TRUE(m.Overlay(i * 3 * 4096 + 4096, 4096, ExtFakeRecord(4096, 2 + i), 0).ok());
  }
  ASSERT_GT(m.extents().size(), ExtentMap::kMaxExtents);
  ASSERT_TRUE(m.NeedsCompaction());
  std::string enc;
  EncodeExtentMap(m, &enc);
  std::printf("a map of %zu extents over %zu records: %zu bytes encoded (%.1f per extent), %zu in memory\n",
              m.extents().size(), m.Records().size(), enc.size(), double(enc.size()) / m.extents().size(),
              m.extents().size() * sizeof(Extent));
  const size_t target = ExtentMap::kMaxExtents - ExtentMap::kMaxExtents / 8;
  const auto ranges = m.CompactionRanges(Location{}, 0);
  uint64_t copied = 0;
  for (const auto& r : ranges) copied += r.length;
  const ExtentMap c = m.WithRangesFrom(ranges, ExtFakeRecord(copied, 1 << 20));
  ASSERT_TRUE(c.Validate().ok());
  EXPECT_FALSE(c.NeedsCompaction());
  EXPECT_LE(c.extents().size(), target);
  EXPECT_GE(c.extents().size(), target - 2);  // no further than the target
  // Cheapest first: a join copies one 4 KiB page or one 8 KiB piece of the base next to what is
  // copied already (12 KiB for the first of a run), one extent less each.
  const uint64_t removed = m.extents().size() - c.extents().size();
  EXPECT_LE(copied, removed * 8192 + 12288) << copied;
  EXPECT_GE(copied, removed * 4096) << copied;
  // A budget smaller than what the cap forced is spent already: the same plan.
  EXPECT_EQ(m.CompactionRanges(Location{}, copied / 2), ranges);
}

}  // namespace
}  // namespace kvfs
