// ChunkBuffer (fuse/chunk_buffer.h): the staged bytes of a file version.
#include "fuse/chunk_buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>

namespace kvfs {
namespace {

std::string Whole(const ChunkBuffer& b) {
  std::string s;
  for (auto p : b.Parts()) s.append(p);
  return s;
}

TEST(ChunkBuffer, WriteReadAcrossChunks) {
  ChunkBuffer b;
  std::string data(ChunkBuffer::kChunk * 2 + 123, '\0');
  std::mt19937 rng(7);
  for (auto& c : data) c = static_cast<char>(rng());
  b.Write(0, data.data(), data.size());
  EXPECT_EQ(b.size(), data.size());
  EXPECT_EQ(b.capacity(), 3 * ChunkBuffer::kChunk);
  EXPECT_EQ(Whole(b), data);
  std::string out(5000, 'x');
  EXPECT_EQ(b.Read(ChunkBuffer::kChunk - 100, 5000, out.data()), 5000u);
  EXPECT_EQ(out, data.substr(ChunkBuffer::kChunk - 100, 5000));
  EXPECT_EQ(b.Read(data.size() - 10, 100, out.data()), 10u);
  EXPECT_EQ(b.Read(data.size(), 100, out.data()), 0u);
  std::vector<iovec> iov;
  EXPECT_EQ(b.Iov(ChunkBuffer::kChunk - 1, 2, &iov), 2u);
  ASSERT_EQ(iov.size(), 2u);
  EXPECT_EQ(iov[0].iov_len, 1u);
  EXPECT_EQ(iov[1].iov_len, 1u);
  EXPECT_EQ(b.Parts().size(), 3u);
}

TEST(ChunkBuffer, GapsAndGrowthAreZeros) {
  ChunkBuffer b;
  b.Write(10, "ab", 2);
  EXPECT_EQ(Whole(b), std::string(10, '\0') + "ab");
  b.Resize(1);  // shrink, then grow again: the old bytes must not come back
  b.Resize(12);
  EXPECT_EQ(Whole(b), std::string(12, '\0'));
  b.Write(0, "xyz", 3);
  b.Write(ChunkBuffer::kChunk + 5, "q", 1);
  std::string want = "xyz" + std::string(ChunkBuffer::kChunk + 2, '\0') + "q";
  EXPECT_EQ(Whole(b), want);
}

TEST(ChunkBuffer, ShrinkFreesChunks) {
  ChunkBuffer b;
  const std::string data(3 * ChunkBuffer::kChunk, 'x');
  b.Write(0, data.data(), data.size());
  EXPECT_EQ(b.capacity(), 3 * ChunkBuffer::kChunk);
  b.Resize(ChunkBuffer::kChunk + 1);
  EXPECT_EQ(b.capacity(), 2 * ChunkBuffer::kChunk);
  b.Resize(0);
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_TRUE(b.Parts().empty());
}

TEST(ChunkBuffer, OverwriteInPlace) {
  ChunkBuffer b;
  b.Write(0, "hello world", 11);
  b.Write(6, "WORLD", 5);
  EXPECT_EQ(Whole(b), "hello WORLD");
  b.Write(11, "!", 1);
  EXPECT_EQ(b.size(), 12u);
}


// ---- references (copy-on-write bases, spills) ----

// A fake backing store: one value per record, keyed by record_offset; counts fetched bytes.
struct FakeStore {
  std::map<uint64_t, std::string> values;
  uint64_t fetched = 0;
  bool fail = false;
  Location Put(std::string v) {
    Location l;
    l.segment.node = "n";
    l.segment.seq = 1;
    l.record_offset = (values.size() + 1) * 4096;
    l.value_offset = l.record_offset + 4096;
    l.length = v.size();
    values[l.record_offset] = std::move(v);
    return l;
  }
  ChunkBuffer::Fetch fetch() {
    return [this](const Location& l, uint64_t off, size_t len, char* out) -> Status {
      if (fail) return Status::Corruption("checksum mismatch");
      const std::string& v = values.at(l.record_offset);
      if (off + len > v.size()) return Status::Corruption("short");
      std::memcpy(out, v.data() + off, len);
      fetched += len;
      return Status::OK();
    };
  }
};

std::string Random(size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string ReadAll(const ChunkBuffer& b, const ChunkBuffer::Fetch& f) {
  std::string out(b.size(), '\0');
  size_t got = 0;
  EXPECT_TRUE(b.Read(0, out.size(), out.data(), f, &got).ok());
  EXPECT_EQ(got, out.size());
  return out;
}

TEST(ChunkBuffer, BackingIsReadWithoutCopy) {
  FakeStore fs;
  const std::string base = Random(3 * ChunkBuffer::kChunk + 500, 1);
  Location l = fs.Put(base);
  ChunkBuffer b;
  b.SetBacking(l, base.size());
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_EQ(b.referenced_bytes(), base.size());
  EXPECT_FALSE(b.InRam(0, 1));
  Location whole;
  ASSERT_TRUE(b.WholeRecord(&whole));
  EXPECT_EQ(whole, l);
  EXPECT_EQ(ReadAll(b, fs.fetch()), base);
  EXPECT_EQ(b.capacity(), 0u);  // reads never copy into RAM
}

TEST(ChunkBuffer, WriteMaterializesOnlyTouchedChunks) {
  FakeStore fs;
  std::string base = Random(3 * ChunkBuffer::kChunk + 500, 2);
  Location l = fs.Put(base);
  ChunkBuffer b;
  b.SetBacking(l, base.size());
  ASSERT_TRUE(b.Write(ChunkBuffer::kChunk + 10, "hello", 5, fs.fetch()).ok());
  base.replace(ChunkBuffer::kChunk + 10, 5, "hello");
  EXPECT_EQ(b.capacity(), ChunkBuffer::kChunk);       // one chunk copied
  EXPECT_EQ(fs.fetched, ChunkBuffer::kChunk);
  Location whole;
  EXPECT_FALSE(b.WholeRecord(&whole));
  EXPECT_EQ(ReadAll(b, fs.fetch()), base);
  // A write that replaces a whole chunk does not read it.
  fs.fetched = 0;
  std::string full = Random(ChunkBuffer::kChunk, 3);
  ASSERT_TRUE(b.Write(2 * ChunkBuffer::kChunk, full.data(), full.size(), fs.fetch()).ok());
  base.replace(2 * ChunkBuffer::kChunk, full.size(), full);
  EXPECT_EQ(fs.fetched, 0u);
  EXPECT_EQ(ReadAll(b, fs.fetch()), base);
}

TEST(ChunkBuffer, GrowAndShrinkOverReferences) {
  FakeStore fs;
  std::string base = Random(ChunkBuffer::kChunk + 100, 4);
  Location l = fs.Put(base);
  ChunkBuffer b;
  b.SetBacking(l, base.size());
  ASSERT_TRUE(b.Resize(50, fs.fetch()).ok());  // shrink into a referenced chunk: no read
  EXPECT_EQ(fs.fetched, 0u);
  ASSERT_TRUE(b.Resize(200, fs.fetch()).ok());  // grow: the old tail must read as zeros
  EXPECT_EQ(ReadAll(b, fs.fetch()), base.substr(0, 50) + std::string(150, '\0'));
  // Write past the end of a referenced partial chunk: gap zero-filled.
  ChunkBuffer c;
  c.SetBacking(l, base.size());
  ASSERT_TRUE(c.Write(ChunkBuffer::kChunk + 300, "x", 1, fs.fetch()).ok());
  EXPECT_EQ(ReadAll(c, fs.fetch()), base + std::string(200, '\0') + "x");
}

TEST(ChunkBuffer, FetchErrorLeavesBufferUnchanged) {
  FakeStore fs;
  std::string base = Random(2 * ChunkBuffer::kChunk, 5);
  Location l = fs.Put(base);
  ChunkBuffer b;
  b.SetBacking(l, base.size());
  fs.fail = true;
  EXPECT_TRUE(b.Write(10, "abc", 3, fs.fetch()).IsCorruption());
  EXPECT_EQ(b.size(), base.size());
  EXPECT_EQ(b.capacity(), 0u);
  size_t got = 0;
  std::string out(10, '\0');
  EXPECT_TRUE(b.Read(0, 10, out.data(), fs.fetch(), &got).IsCorruption());
  fs.fail = false;
  EXPECT_EQ(ReadAll(b, fs.fetch()), base);
}

TEST(ChunkBuffer, SpillToOneRecordIsWholeRecord) {
  FakeStore fs;
  ChunkBuffer b;
  std::string data = Random(2 * ChunkBuffer::kChunk + 7, 6);
  b.Write(0, data.data(), data.size());
  auto ram = b.RamChunks();
  ASSERT_EQ(ram.size(), 3u);
  EXPECT_TRUE(b.ChunkFull(1));
  EXPECT_FALSE(b.ChunkFull(2));
  std::string rec;
  for (size_t i : ram) rec.append(b.ChunkView(i));
  Location l = fs.Put(rec);
  uint64_t off = 0;
  for (size_t i : ram) {
    size_t n = b.ChunkView(i).size();
    b.ToRef(i, l, off);
    off += n;
  }
  EXPECT_EQ(b.capacity(), 0u);
  Location whole;
  ASSERT_TRUE(b.WholeRecord(&whole));
  EXPECT_EQ(whole, l);
  EXPECT_EQ(ReadAll(b, fs.fetch()), data);
  // Spilling chunks out of order (1 then 0) is not one whole record.
  ChunkBuffer c;
  c.Write(0, data.data(), 2 * ChunkBuffer::kChunk);
  Location l2 = fs.Put(data.substr(ChunkBuffer::kChunk, ChunkBuffer::kChunk) + data.substr(0, ChunkBuffer::kChunk));
  c.ToRef(1, l2, 0);
  c.ToRef(0, l2, ChunkBuffer::kChunk);
  EXPECT_FALSE(c.WholeRecord(&whole));
  EXPECT_EQ(ReadAll(c, fs.fetch()), data.substr(0, 2 * ChunkBuffer::kChunk));
}

// Growth past the end makes holes: no RAM, zeros on read; a write into a hole allocates that one chunk.
// (ftruncate(fd, 1 TiB) used to allocate 1 TiB and abort the daemon with std::bad_alloc.)
TEST(ChunkBuffer, GrowthIsHolesWithoutMemory) {
  constexpr uint64_t kC = ChunkBuffer::kChunk;
  ChunkBuffer b;
  b.Write(0, "head", 4);
  EXPECT_EQ(b.capacity(), kC);
  ASSERT_TRUE(b.Resize(1ull << 40, nullptr).ok());
  EXPECT_EQ(b.size(), 1ull << 40);
  EXPECT_EQ(b.capacity(), kC);  // only the first chunk, whose tail was zeroed
  EXPECT_EQ(b.referenced_bytes(), 0u);
  EXPECT_TRUE(b.has_refs());    // not all in RAM: the commit is streamed (Read)
  char buf[16];
  std::memset(buf, 'z', sizeof(buf));
  EXPECT_EQ(b.Read(0, sizeof(buf), buf), sizeof(buf));
  EXPECT_EQ(std::string(buf, 6), std::string("head\0\0", 6));
  std::memset(buf, 'z', sizeof(buf));
  EXPECT_EQ(b.Read((1ull << 39) + 5, sizeof(buf), buf), sizeof(buf));
  EXPECT_EQ(std::string(buf, sizeof(buf)), std::string(sizeof(buf), '\0'));
  // A write in the middle of a hole chunk: that chunk only, zeros around the bytes.
  b.Write(5 * kC + 10, "mid", 3);
  EXPECT_EQ(b.capacity(), 2 * kC);
  std::memset(buf, 'z', sizeof(buf));
  EXPECT_EQ(b.Read(5 * kC + 8, 7, buf), 7u);
  EXPECT_EQ(std::string(buf, 7), std::string("\0\0mid\0\0", 7));
  // Shrink and regrow: the regrown part reads as zeros again (no stale bytes of the first chunk).
  ASSERT_TRUE(b.Resize(2, nullptr).ok());
  ASSERT_TRUE(b.Resize(3 * kC + 7, nullptr).ok());
  EXPECT_EQ(b.capacity(), kC);
  Location whole;
  EXPECT_FALSE(b.WholeRecord(&whole));
  const std::string got = ReadAll(b, nullptr);  // holes need no fetch
  std::string want(3 * kC + 7, '\0');
  want[0] = 'h';
  want[1] = 'e';
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
  // A write far past the end allocates only the chunks it touches.
  ChunkBuffer c;
  c.Write(100 * kC - 2, "abcd", 4);  // spans chunks 99 and 100
  EXPECT_EQ(c.size(), 100 * kC + 2);
  EXPECT_EQ(c.capacity(), 2 * kC);
  std::memset(buf, 'z', sizeof(buf));
  EXPECT_EQ(c.Read(100 * kC - 4, 8, buf), 6u);
  EXPECT_EQ(std::string(buf, 6), std::string("\0\0abcd", 6));
}

// #18 (breaker F2): after a FLUSH (Rebase / RebaseWhole) the clean full chunks leave RAM without I/O
// (ReleaseClean), and a spill of chunks that hold clean pages appends only their dirty pages
// (DirtyPartsOf / SpillDirty): no byte already on the export is written again, and the version and the
// map a later FLUSH would commit still read exactly the same bytes.
TEST(ChunkBuffer, CleanChunksAreReleasedAndSpillsWriteOnlyDirtyPages) {
  constexpr uint64_t kC = ChunkBuffer::kChunk;
  FakeStore fs;
  std::string model = Random(4 * kC + 300, 21);  // a committed file: 4 full chunks + a partial one
  const Location base = fs.Put(model);
  ChunkBuffer b;
  b.SetBacking(base, model.size());
  auto write = [&](uint64_t off, const std::string& d) {
    ASSERT_TRUE(b.Write(off, d.data(), d.size(), fs.fetch()).ok());
    model.replace(off, d.size(), d);
  };
  auto map_bytes = [&](const ExtentMap& m) {
    std::string out(m.size(), '\0');
    size_t got = 0;
    EXPECT_TRUE(ReadExtents(m, 0, out.size(), out.data(), fs.fetch(), &got).ok());
    return out;
  };
  write(kC + 100 * 1024, Random(8192, 22));  // chunk 1: copied into RAM, two dirty pages
  write(2 * kC, Random(kC, 23));             // chunk 2: replaced whole
  write(4 * kC + 10, "tail");                 // the partial last chunk
  EXPECT_EQ(b.capacity(), 3 * kC);
  // A FLUSH in extent form: the dirty pages as one record, then Rebase.
  std::string dirty;
  for (auto v : b.DirtyParts()) dirty.append(v);
  EXPECT_EQ(dirty.size(), 8192 + kC + 300);  // the last page clipped to the size
  const Location r1 = fs.Put(dirty);
  auto m1 = std::make_shared<const ExtentMap>(b.ToExtentMap(r1));
  b.Rebase(m1);
  EXPECT_EQ(b.ReleaseClean(), 2 * kC);  // chunks 1 and 2; the partial last chunk stays
  EXPECT_EQ(b.capacity(), kC);
  fs.fetched = 0;
  EXPECT_EQ(ReadAll(b, fs.fetch()), model);
  EXPECT_EQ(b.DirtyBytes(), 0u);
  // Written again: a page of chunk 1 (copied back: 1 MiB read) and a page of chunk 3 (a base chunk).
  write(kC + 4096, Random(4096, 24));
  write(3 * kC + 8192, Random(100, 25));
  EXPECT_EQ(b.capacity(), 3 * kC);
  std::vector<size_t> pick;
  for (size_t i : b.RamChunks()) {
    if (b.ChunkFull(i)) pick.push_back(i);
  }
  ASSERT_EQ(pick, (std::vector<size_t>{1, 3}));
  EXPECT_FALSE(b.ChunkAllDirty(1));
  uint64_t spilled = 0;
  std::string sp;
  for (auto v : b.DirtyPartsOf(pick)) sp.append(v);
  spilled = sp.size();
  EXPECT_EQ(spilled, 2 * 4096u);  // two pages, not two chunks
  const Location r2 = fs.Put(sp);
  b.SpillDirty(pick, r2);
  EXPECT_EQ(b.capacity(), kC);  // only the partial last chunk
  EXPECT_EQ(ReadAll(b, fs.fetch()), model);
  // What the next FLUSH would commit: the spill's pages are extents of r2, nothing is dirty but the tail.
  EXPECT_EQ(b.DirtyBytes(), 0u);
  const ExtentMap m2 = b.ToExtentMap(Location{});
  EXPECT_EQ(map_bytes(m2), model);
  // A spill of chunks that are all dirty still writes them whole (ChunkAllDirty), as before.
  write(4 * kC, Random(300, 26));
  EXPECT_TRUE(b.ChunkAllDirty(4));
  // RebaseWhole: a version written whole, flushed as one record, then its full chunks released.
  ChunkBuffer w;
  const std::string data = Random(3 * kC + 5, 27);
  w.Write(0, data.data(), data.size());
  std::string whole;
  for (auto v : w.Parts()) whole.append(v);
  const Location r3 = fs.Put(whole);
  w.RebaseWhole(r3);
  EXPECT_EQ(w.ReleaseClean(), 3 * kC);
  EXPECT_EQ(w.capacity(), kC);
  EXPECT_EQ(ReadAll(w, fs.fetch()), data);
  const ExtentMap m3 = w.ToExtentMap(Location{});
  Location single;
  EXPECT_TRUE(m3.SingleRecord(&single));
  EXPECT_EQ(single, r3);
}

// #18: the staging RAM a WRITE reserves (OpWrite -> MakeRoom) is what Write allocates: a chunk per
// touched chunk not in RAM yet, never the chunks a far write skips (holes).
TEST(ChunkBuffer, WriteNeedIsWhatWriteAllocates) {
  constexpr uint64_t kC = ChunkBuffer::kChunk;
  FakeStore fs;
  const Location base = fs.Put(Random(2 * kC, 31));
  ChunkBuffer b;
  b.SetBacking(base, 2 * kC);
  const std::string d = Random(kC + 8192, 32);
  struct Case { uint64_t off; size_t len; };
  for (Case c : {Case{100, 10}, Case{kC - 4096, 8192}, Case{kC + 5, 10}, Case{2 * kC - 10, 20},
                 Case{5 * kC + 3, 100}, Case{5 * kC + 200, 10}, Case{7 * kC, kC + 8192}, Case{0, 0}}) {
    const uint64_t need = b.WriteNeed(c.off, c.len), before = b.capacity();
    ASSERT_TRUE(b.Write(c.off, d.data(), c.len, fs.fetch()).ok());
    EXPECT_EQ(b.capacity() - before, need) << c.off << "+" << c.len;
  }
  EXPECT_EQ(b.WriteNeed(100, 10), 0u);  // in RAM now: nothing to reserve
}

}  // namespace
}  // namespace kvfs
