// Segment format, writer, reader and scanner: round trips, sealing, truncation, corruption, concurrency,
// durability (FaultInjectionEnv crash model) and write errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "blockstore/env.h"
#include "blockstore/buffer_pool.h"
#include "blockstore/fault_env.h"
#include "blockstore/kernel_copy.h"
#include "blockstore/format.h"
#include "blockstore/segment_reader.h"
#include "blockstore/node_dir.h"
#include "blockstore/segment_writer.h"

namespace kvfs {
namespace {

std::string MakeValue(size_t n, uint64_t seed) {
  std::string v(n, '\0');
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<char>(rng());
  return v;
}

void FlipByte(const std::string& path, uint64_t off) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(off)), 1);
  c ^= 0x5A;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(off)), 1);
  ::close(fd);
}

struct Appended {
  std::string path;
  std::string value;
  uint64_t stamp;
  Location loc;
};

class SegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // /var/tmp: a disk file system here (O_DIRECT works; tmpfs refuses it).
    char tmpl[] = "/var/tmp/kvfs-seg-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    seg_dir_ = root_ + "/.kvfs/v1/nodes/n1/seg";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<SegmentWriter> NewWriter(SegmentWriterOptions o, Env* env = Env::Posix(), uint64_t gen = 7) {
    auto w = SegmentWriter::Open(env, seg_dir_, "n1", gen, std::move(o));
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(*w) : nullptr;
  }
  std::string SegPath(const SegmentId& id) { return seg_dir_ + "/" + SegmentFileName(id.generation, id.seq); }
  std::unique_ptr<BackingFile> OpenSeg(const SegmentId& id, bool direct = false) {
    OpenOptions o;
    o.direct = direct;
    auto f = Env::Posix()->Open(SegPath(id), o);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(*f) : nullptr;
  }
  uint64_t FileSize(const SegmentId& id) { return std::filesystem::file_size(SegPath(id)); }

  // Reads the whole value through the Location path and compares.
  void ExpectValue(BackingFile* f, const Location& loc, const std::string& want) {
    std::string got(want.size() + 10, '\0');
    size_t n = 0;
    Status s = ReadValue(f, loc, 0, got.size(), got.data(), &n);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(n, want.size());
    got.resize(n);
    ASSERT_TRUE(got == want) << "value mismatch at " << loc.record_offset;
  }

  std::string root_, seg_dir_;
};

// ------------------------------------------------------------------------------------------------
class SegmentRoundTrip : public SegmentTest, public ::testing::WithParamInterface<bool> {};

TEST_P(SegmentRoundTrip, ValueSizes) {
  const bool direct = GetParam();
  SegmentWriterOptions o;
  o.direct_io = direct;
  auto w = NewWriter(o);
  ASSERT_TRUE(w);
  const std::vector<size_t> sizes = {0, 1, 4095, 4096, 4097, 147456, 2359296, 37748736};
  std::vector<Appended> recs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Appended a{"/kv/model/layer" + std::to_string(i) + "/chunk.bin", MakeValue(sizes[i], i), 1000 + i, {}};
    // Split into parts at odd places so blocks span parts.
    std::vector<std::string_view> parts;
    std::string_view v(a.value);
    size_t cut1 = v.size() / 3 + 1, cut2 = v.size() / 2 + 7;
    if (v.size() > cut2) {
      parts = {v.substr(0, cut1), v.substr(cut1, cut2 - cut1), v.substr(cut2)};
    } else {
      parts = {v};
    }
    auto loc = w->Append(a.path, a.stamp, parts);
    ASSERT_TRUE(loc.ok()) << loc.status().ToString();
    EXPECT_EQ(loc->length, sizes[i]);
    EXPECT_EQ(loc->record_offset % kAlignment, 0u);
    EXPECT_EQ(loc->value_offset % kAlignment, 0u);
    EXPECT_EQ(loc->segment, (SegmentId{"n1", 7, 1}));
    a.loc = *loc;
    recs.push_back(std::move(a));
    // Readable at once (before Sync), through the Env.
    auto f = OpenSeg(recs.back().loc.segment, direct);
    ExpectValue(f.get(), recs.back().loc, recs.back().value);
  }
  ASSERT_TRUE(w->Sync().ok());
  auto f = OpenSeg(recs[0].loc.segment, direct);
  for (const auto& a : recs) {
    ExpectValue(f.get(), a.loc, a.value);
    auto meta = ReadRecordMeta(f.get(), a.loc.record_offset);
    ASSERT_TRUE(meta.ok()) << meta.status().ToString();
    EXPECT_EQ(meta->path, a.path);
    EXPECT_EQ(meta->header.stamp, a.stamp);
    EXPECT_EQ(meta->value_offset, a.loc.value_offset);
    EXPECT_EQ(meta->checksums.size(), format::BlockCount(a.value.size()));
    // Partial ranges: unaligned start crossing a block boundary, a tail past the end, beyond the end.
    const size_t L = a.value.size();
    for (auto [off, len] : std::vector<std::pair<uint64_t, size_t>>{
             {1, 70000}, {65535, 2}, {L > 10 ? L - 10 : 0, 100}, {L, 5}, {L + 4096, 5}, {65536, 65536}}) {
      std::string buf(len, '\0');
      size_t got = 0;
      Status s = ReadValue(f.get(), *meta, off, len, buf.data(), &got);
      ASSERT_TRUE(s.ok()) << s.ToString();
      const size_t want = off >= L ? 0 : std::min<size_t>(len, L - off);
      ASSERT_EQ(got, want) << "off " << off << " len " << len << " L " << L;
      EXPECT_EQ(0, std::memcmp(buf.data(), a.value.data() + std::min<size_t>(off, L), got));
      // The Location path gives the same.
      std::string buf2(len, '\0');
      size_t got2 = 0;
      ASSERT_TRUE(ReadValue(f.get(), a.loc, off, len, buf2.data(), &got2).ok());
      ASSERT_EQ(got2, want);
      EXPECT_EQ(buf.substr(0, got), buf2.substr(0, got2));
      // And the zero-copy range read (blocks read straight into its buffer).
      auto r = ReadValueRange(f.get(), a.loc, off, len);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ((*r)->size(), want);
      EXPECT_EQ(std::string((*r)->view()), buf.substr(0, got));
    }
    // The whole value in one read into an aligned buffer.
    auto whole = LoadWholeValue(f.get(), a.loc);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_EQ((*whole)->size(), L);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*whole)->base()) % kAlignment, 0u);
    EXPECT_TRUE((*whole)->view() == a.value);
  }
  // The scanner sees exactly these records and a clean end.
  SegmentScanner sc(f.get(), FileSize(recs[0].loc.segment), ScanOptions{.verify_values = true});
  ASSERT_TRUE(sc.Init().ok());
  EXPECT_FALSE(sc.sealed());
  EXPECT_EQ(sc.header().node, "n1");
  EXPECT_EQ(sc.header().generation, 7u);
  EXPECT_EQ(sc.header().seq, 1u);
  ScannedRecord r;
  size_t i = 0;
  while (sc.Next(&r)) {
    ASSERT_LT(i, recs.size());
    EXPECT_EQ(r.loc, recs[i].loc);
    EXPECT_EQ(r.path, recs[i].path);
    EXPECT_EQ(r.stamp, recs[i].stamp);
    ++i;
  }
  EXPECT_EQ(i, recs.size());
  EXPECT_EQ(sc.stop_reason(), ScanStop::kEndOfFile) << sc.stop_status().ToString();
  EXPECT_EQ(sc.stop_offset(), FileSize(recs[0].loc.segment));
  auto footer = ReadFooter(f.get(), FileSize(recs[0].loc.segment));
  EXPECT_TRUE(footer.status().IsNotFound());
  ASSERT_TRUE(w->Close().ok());
}

INSTANTIATE_TEST_SUITE_P(DirectIo, SegmentRoundTrip, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Direct" : "Buffered"; });

// AppendStreamed writes the same bytes as Append (record for record), in pieces from a source, and places
// records like Append (sealing, a segment of its own for a value larger than the segment).
TEST_P(SegmentRoundTrip, StreamedAppendIsByteIdenticalToAppend) {
  const bool direct = GetParam();
  SegmentWriterOptions o;
  o.direct_io = direct;
  o.segment_size = 16ull << 20;
  auto w = NewWriter(o);
  ASSERT_TRUE(w);
  const std::vector<size_t> sizes = {1, 4096, 65537, SegmentWriter::kStreamPiece, 9 * (1u << 20) + 123,
                                     20 * (1u << 20) + 5};  // the last one: larger than a segment
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string v = MakeValue(sizes[i], 40 + i);
    const std::string path = "/s/" + std::to_string(i);
    auto plain = w->Append(path, 77, {v});
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    std::vector<std::pair<uint64_t, size_t>> calls;
    auto streamed = w->AppendStreamed(path, 77, v.size(), [&](uint64_t off, size_t len, char* out) {
      calls.emplace_back(off, len);
      std::memcpy(out, v.data() + off, len);
      return Status::OK();
    });
    ASSERT_TRUE(streamed.ok()) << streamed.status().ToString();
    EXPECT_EQ(streamed->length, v.size());
    EXPECT_EQ(streamed->value_offset - streamed->record_offset, plain->value_offset - plain->record_offset);
    ASSERT_EQ(calls.size(), (v.size() + SegmentWriter::kStreamPiece - 1) / SegmentWriter::kStreamPiece);
    for (size_t k = 0; k < calls.size(); ++k) EXPECT_EQ(calls[k].first, k * SegmentWriter::kStreamPiece);
    if (sizes[i] > o.segment_size) {
      EXPECT_NE(streamed->segment, plain->segment);  // a segment of its own
    }
    // The two records' bytes (metadata, value, padding) are identical.
    const uint64_t span = format::RecordSpan(path.size(), v.size());
    auto bytes_at = [&](const Location& l) {
      std::string out(span, '\0');
      int fd = ::open(SegPath(l.segment).c_str(), O_RDONLY);
      EXPECT_GE(fd, 0);
      EXPECT_EQ(::pread(fd, out.data(), span, static_cast<off_t>(l.record_offset)), static_cast<ssize_t>(span));
      ::close(fd);
      return out;
    };
    EXPECT_TRUE(bytes_at(*plain) == bytes_at(*streamed)) << "record bytes differ for size " << sizes[i];
    auto fs = OpenSeg(streamed->segment);
    ExpectValue(fs.get(), *streamed, v);
  }
  ASSERT_TRUE(w->Close().ok());
}

// A source that fails: the streamed record is not written, the error is returned, the next append
// reuses its space, the writer stays usable.
// O_DIRECT appends of values given as 4 KiB-aligned parts (staged 1 MiB chunks) write the parts
// themselves: one WriteOp for the metadata, one per part (its aligned length), one for a partial last
// block (copied, zero padded): no copy of the value. The bytes written are exactly the record's span and
// every value reads back verified. Parts that are not aligned still take the copy (one WriteOp).
TEST_F(SegmentTest, DirectAppendWritesAlignedPartsWithoutACopy) {
  SegmentWriterOptions o;
  o.direct_io = true;
  auto w = NewWriter(o);
  ASSERT_TRUE(w);
  struct Free {
    void operator()(char* p) const { free(p); }
  };
  constexpr size_t kChunk = 1u << 20;
  auto& c = Env::Posix()->counters();
  // {value size, WriteOps expected}: 1 meta + full/aligned parts + 1 tail block if len % 4096.
  const std::vector<std::pair<size_t, uint64_t>> cases = {
      {2359296, 1 + 3}, {2359296 + 100, 1 + 3 + 1}, {kChunk + 5, 1 + 1 + 1}, {10, 1 + 1}, {37748736, 1 + 36}};
  std::vector<Appended> recs;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto [len, ops] = cases[i];
    Appended a{"/kv/direct/" + std::to_string(i), MakeValue(len, 50 + i), 77, {}};
    std::vector<std::unique_ptr<char, Free>> chunks;
    std::vector<std::string_view> parts;
    for (size_t off = 0; off < len; off += kChunk) {
      void* p = nullptr;
      ASSERT_EQ(posix_memalign(&p, kAlignment, kChunk), 0);
      chunks.emplace_back(static_cast<char*>(p));
      const size_t n = std::min(kChunk, len - off);
      std::memcpy(chunks.back().get(), a.value.data() + off, n);
      parts.emplace_back(chunks.back().get(), n);
    }
    const uint64_t ops0 = c.write.load(), bytes0 = c.bytes_written.load();
    auto loc = w->Append(a.path, a.stamp, parts);
    ASSERT_TRUE(loc.ok()) << loc.status().ToString();
    const uint64_t first = i == 0 ? 1 : 0;  // the first append also writes the segment header
    EXPECT_EQ(c.write.load() - ops0, ops + first) << len;
    EXPECT_EQ(c.bytes_written.load() - bytes0,
              format::RecordSpan(a.path.size(), len) + first * format::kSegmentHeaderSize) << len;
    a.loc = *loc;
    recs.push_back(std::move(a));
  }
  // Unaligned parts (std::string memory): the value is copied into one aligned buffer, one WriteOp.
  Appended u{"/kv/direct/unaligned", MakeValue(kChunk + 5, 99), 78, {}};
  std::string_view uv(u.value);
  const uint64_t ops0 = c.write.load();
  auto uloc = w->Append(u.path, u.stamp, {uv.substr(1, kChunk), uv.substr(0, 1), uv.substr(kChunk + 1)});
  ASSERT_TRUE(uloc.ok());
  EXPECT_EQ(c.write.load() - ops0, 1u);
  u.value = u.value.substr(1, kChunk) + u.value.substr(0, 1) + u.value.substr(kChunk + 1);
  u.loc = *uloc;
  recs.push_back(std::move(u));
  ASSERT_TRUE(w->Sync().ok());
  auto f = OpenSeg(recs[0].loc.segment, true);
  for (const auto& a : recs) ExpectValue(f.get(), a.loc, a.value);
  SegmentScanner sc(f.get(), FileSize(recs[0].loc.segment));
  ASSERT_TRUE(sc.Init().ok());
  ScannedRecord r;
  size_t n = 0;
  while (sc.Next(&r)) EXPECT_EQ(r.path, recs[n++].path);
  EXPECT_EQ(n, recs.size());
  EXPECT_EQ(sc.stop_reason(), ScanStop::kEndOfFile);
}

TEST_F(SegmentTest, StreamedAppendSourceErrorWritesNoRecord) {
  auto w = NewWriter({});
  auto a = w->Append("/a", 1, {"first"});
  ASSERT_TRUE(a.ok());
  const std::string v = MakeValue(10u << 20, 9);
  auto b = w->AppendStreamed("/b", 2, v.size(), [&](uint64_t off, size_t len, char* out) -> Status {
    if (off > 0) return Status::IOError("spill unreadable", EIO);
    std::memcpy(out, v.data() + off, len);
    return Status::OK();
  });
  EXPECT_EQ(b.status().ToErrno(), EIO) << b.status().ToString();
  EXPECT_EQ(FileSize(a->segment), a->record_offset + kAlignment * 2);  // b's first 4 MiB piece truncated away
  const std::string cval = MakeValue(5000, 3);
  auto c = w->Append("/c", 3, {cval});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->record_offset, a->record_offset + kAlignment * 2);  // reuses b's space
  ASSERT_TRUE(w->Sync().ok());
  auto f = OpenSeg(c->segment);
  ExpectValue(f.get(), *c, cval);
  SegmentScanner sc(f.get(), FileSize(c->segment));
  ASSERT_TRUE(sc.Init().ok());
  ScannedRecord r;
  std::vector<std::string> paths;
  while (sc.Next(&r)) paths.push_back(r.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"/a", "/c"}));
  EXPECT_EQ(sc.stop_reason(), ScanStop::kEndOfFile);  // no torn tail of b's value bytes past c
  EXPECT_EQ(w->GetStats().records, 2u);
}

// ------------------------------------------------------------------------------------------------
TEST_F(SegmentTest, SealsAtSizeLimitAndBigValueGetsOwnSegment) {
  SegmentWriterOptions o;
  o.segment_size = 1 << 20;  // 1 MiB
  std::vector<SealedSegment> seen;
  o.on_seal = [&](const SealedSegment& s) { seen.push_back(s); };
  auto w = NewWriter(o);
  std::vector<Appended> recs;
  auto add = [&](size_t n) {
    Appended a{"/f" + std::to_string(recs.size()), MakeValue(n, recs.size()), recs.size() + 1, {}};
    auto loc = w->Append(a.path, a.stamp, {a.value});
    ASSERT_TRUE(loc.ok()) << loc.status().ToString();
    a.loc = *loc;
    recs.push_back(std::move(a));
  };
  for (int i = 0; i < 8; ++i) add(300 * 1024);  // 3 fit per 1 MiB segment
  add(3 << 20);                                 // bigger than a segment: its own
  add(1000);
  ASSERT_TRUE(w->Sync().ok());

  std::map<uint64_t, std::vector<size_t>> by_seq;
  for (size_t i = 0; i < recs.size(); ++i) by_seq[recs[i].loc.segment.seq].push_back(i);
  const uint64_t big_seq = recs[8].loc.segment.seq;
  EXPECT_EQ(by_seq[big_seq], std::vector<size_t>{8});
  EXPECT_NE(recs[9].loc.segment.seq, big_seq);
  EXPECT_EQ(by_seq[1].size(), 3u);

  auto sealed = w->TakeSealed();
  EXPECT_TRUE(w->TakeSealed().empty());
  ASSERT_EQ(sealed.size(), seen.size());
  ASSERT_EQ(sealed.size(), by_seq.size() - 1);  // all but the active one
  for (const auto& s : sealed) {
    ASSERT_TRUE(by_seq.count(s.id.seq));
    const auto& idx = by_seq[s.id.seq];
    EXPECT_EQ(s.record_count, idx.size());
    EXPECT_EQ(s.file_size, FileSize(s.id));
    if (s.id.seq != big_seq) {
      EXPECT_LE(s.file_size, o.segment_size);
    }
    auto f = OpenSeg(s.id);
    auto footer = ReadFooter(f.get(), s.file_size);
    ASSERT_TRUE(footer.ok()) << footer.status().ToString();
    ASSERT_EQ(footer->entries.size(), idx.size());
    for (size_t k = 0; k < idx.size(); ++k) {
      const auto& a = recs[idx[k]];
      const auto& e = footer->entries[k];
      EXPECT_EQ(e.record_offset, a.loc.record_offset);
      EXPECT_EQ(e.value_offset, a.loc.value_offset);
      EXPECT_EQ(e.value_length, a.value.size());
      EXPECT_EQ(e.stamp, a.stamp);
      EXPECT_EQ(e.path_hash, format::Hash64(a.path.data(), a.path.size()));
      ExpectValue(f.get(), a.loc, a.value);
    }
    SegmentScanner sc(f.get(), s.file_size);
    ASSERT_TRUE(sc.Init().ok());
    EXPECT_TRUE(sc.sealed());
    ScannedRecord r;
    size_t n = 0;
    while (sc.Next(&r)) EXPECT_EQ(r.loc, recs[idx[n++]].loc);
    EXPECT_EQ(n, idx.size());
    EXPECT_EQ(sc.stop_reason(), ScanStop::kFooter);
  }
  // The active segment is unsealed; Close leaves it so by default.
  ASSERT_TRUE(w->Close().ok());
  auto f = OpenSeg(recs[9].loc.segment);
  EXPECT_TRUE(ReadFooter(f.get(), FileSize(recs[9].loc.segment)).status().IsNotFound());
  EXPECT_TRUE(w->Append("/late", 1, {"x"}).status().IsInvalidArgument());
}

TEST_F(SegmentTest, SealOnCloseAndEmptyFooter) {
  SegmentWriterOptions o;
  o.seal_on_close = true;
  auto w = NewWriter(o);
  auto loc = w->Append("/a", 5, {"hello"});
  ASSERT_TRUE(loc.ok());
  ASSERT_TRUE(w->Close().ok());
  auto sealed = w->TakeSealed();
  ASSERT_EQ(sealed.size(), 1u);
  auto f = OpenSeg(loc->segment);
  auto footer = ReadFooter(f.get(), FileSize(loc->segment));
  ASSERT_TRUE(footer.ok()) << footer.status().ToString();
  EXPECT_EQ(footer->entries.size(), 1u);
  EXPECT_EQ(footer->trailer.footer_offset, loc->value_offset + kAlignment);
}

TEST_F(SegmentTest, FormatCodecsRoundTrip) {
  format::SegmentHeader h;
  h.node = "node-a";
  h.generation = 3;
  h.seq = 99;
  h.create_time_ns = 123456789;
  h.nonce = 0xABCDEF;
  std::vector<char> b(4096);
  format::EncodeSegmentHeader(h, b.data());
  format::SegmentHeader d;
  ASSERT_TRUE(format::DecodeSegmentHeader(b.data(), b.size(), &d).ok());
  EXPECT_EQ(d.node, "node-a");
  EXPECT_EQ(d.generation, 3u);
  EXPECT_EQ(d.seq, 99u);
  EXPECT_EQ(d.create_time_ns, 123456789);
  EXPECT_EQ(d.nonce, 0xABCDEFu);
  b[100] ^= 1;  // reserved area is covered too
  EXPECT_TRUE(format::DecodeSegmentHeader(b.data(), b.size(), &d).IsCorruption());

  format::Trailer t{8192, 2, 77, 0xABCDEF};
  std::vector<char> tb(4096);
  format::EncodeTrailerBlock(t, tb.data());
  format::Trailer dt;
  ASSERT_TRUE(format::DecodeTrailer(tb.data() + 4096 - 64, &dt).ok());
  EXPECT_EQ(dt.footer_offset, 8192u);
  EXPECT_EQ(dt.record_count, 2u);
  EXPECT_EQ(dt.footer_checksum, 77u);
  EXPECT_EQ(dt.nonce, 0xABCDEFu);
  tb[4096 - 64 + 20] ^= 1;
  EXPECT_TRUE(format::DecodeTrailer(tb.data() + 4096 - 64, &dt).IsCorruption());
  std::vector<char> zeros(64);
  EXPECT_TRUE(format::DecodeTrailer(zeros.data(), &dt).IsNotFound());

  format::FooterEntry e{4096, 8192, 5, 9, 11};
  char eb[format::kFooterEntrySize];
  format::EncodeFooterEntry(e, eb);
  EXPECT_EQ(format::DecodeFooterEntry(eb), e);

  EXPECT_EQ(SegmentFileName(3, 17), "00000000000000000003-00000000000000000017.kseg");
  uint64_t g = 0, q = 0;
  ASSERT_TRUE(ParseSegmentFileName("00000000000000000003-00000000000000000017.kseg", &g, &q));
  EXPECT_EQ(g, 3u);
  EXPECT_EQ(q, 17u);
  EXPECT_FALSE(ParseSegmentFileName("00000000000000000003-00000000000000000017.kseg.tmp", &g, &q));
  EXPECT_FALSE(ParseSegmentFileName("x-1.kseg", &g, &q));
  EXPECT_EQ(format::RecordSpan(10, 0), 4096u);
  EXPECT_EQ(format::RecordSpan(10, 1), 8192u);
  EXPECT_EQ(format::ValueDelta(4096 - 64 - 8 * 577 + 1, 37748736 + 1), 8192u);
}

TEST_F(SegmentTest, DamagedTrailerOrFooterIsCorruption) {
  SegmentWriterOptions o;
  o.seal_on_close = true;
  auto w = NewWriter(o);
  auto loc = w->Append("/a", 5, {MakeValue(10000, 1)});
  ASSERT_TRUE(loc.ok());
  ASSERT_TRUE(w->Close().ok());
  const uint64_t size = FileSize(loc->segment);
  const uint64_t footer_off = loc->value_offset + AlignUp(10000);
  {
    auto f = OpenSeg(loc->segment);
    auto footer = ReadFooter(f.get(), size);
    ASSERT_TRUE(footer.ok());
  }
  FlipByte(SegPath(loc->segment), footer_off);
  auto f = OpenSeg(loc->segment);
  EXPECT_TRUE(ReadFooter(f.get(), size).status().IsCorruption());
  FlipByte(SegPath(loc->segment), footer_off);  // restore
  ASSERT_TRUE(ReadFooter(f.get(), size).ok());
  FlipByte(SegPath(loc->segment), size - 30);  // trailer field
  EXPECT_TRUE(ReadFooter(f.get(), size).status().IsCorruption());
  // A damaged trailer makes the scanner treat the segment as unsealed: it still finds the record, then
  // stops at the footer (no record magic there).
  SegmentScanner sc(f.get(), size);
  ASSERT_TRUE(sc.Init().ok());
  EXPECT_FALSE(sc.sealed());
  ScannedRecord r;
  ASSERT_TRUE(sc.Next(&r));
  EXPECT_FALSE(sc.Next(&r));
  EXPECT_EQ(sc.stop_reason(), ScanStop::kBadMagic);
}

// ------------------------------------------------------------------------------------------------
// Writes ~30 records of mixed sizes; returns them (in order).
std::vector<Appended> WriteMixed(SegmentWriter* w, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Appended> recs;
  for (int i = 0; i < n; ++i) {
    size_t len = (rng() % 4 == 0) ? rng() % 5 : rng() % (200 * 1024);
    std::string path = "/p/" + std::string(1 + rng() % 300, 'a' + i % 26) + std::to_string(i);
    Appended a{path, MakeValue(len, seed + i), seed + i, {}};
    auto loc = w->Append(a.path, a.stamp, {a.value});
    EXPECT_TRUE(loc.ok()) << loc.status().ToString();
    a.loc = *loc;
    recs.push_back(std::move(a));
  }
  return recs;
}

TEST_F(SegmentTest, TruncationAt200RandomOffsetsKeepsExactlyCompleteRecords) {
  for (bool sealed : {false, true}) {
    SCOPED_TRACE(sealed ? "sealed" : "unsealed");
    std::filesystem::remove_all(seg_dir_);
    SegmentWriterOptions o;
    o.seal_on_close = sealed;
    auto w = NewWriter(o);
    auto recs = WriteMixed(w.get(), 30, sealed ? 100 : 200);
    ASSERT_TRUE(w->Close().ok());
    const SegmentId id = recs[0].loc.segment;
    const std::string orig = SegPath(id);
    const uint64_t size = FileSize(id);
    const std::string cut_path = root_ + "/cut.kseg";
    std::mt19937_64 rng(sealed ? 7 : 8);
    std::vector<uint64_t> cuts;
    for (int i = 0; i < 196; ++i) cuts.push_back(rng() % (size + 1));
    // Boundary cases: exact record boundaries, just the header, the full file.
    cuts.push_back(recs[5].loc.record_offset);
    cuts.push_back(recs[5].loc.record_offset + 1);
    cuts.push_back(format::kSegmentHeaderSize);
    cuts.push_back(size);
    for (uint64_t cut : cuts) {
      std::filesystem::copy_file(orig, cut_path, std::filesystem::copy_options::overwrite_existing);
      ASSERT_EQ(::truncate(cut_path.c_str(), static_cast<off_t>(cut)), 0);
      auto f = Env::Posix()->Open(cut_path, OpenOptions{});
      ASSERT_TRUE(f.ok());
      SegmentScanner sc(f->get(), cut, ScanOptions{.verify_values = (cut % 3 == 0)});
      ASSERT_TRUE(sc.Init().ok());
      ScannedRecord r;
      size_t n = 0;
      while (sc.Next(&r)) {
        ASSERT_LT(n, recs.size());
        ASSERT_EQ(r.loc.record_offset, recs[n].loc.record_offset);
        ASSERT_EQ(r.path, recs[n].path);
        ++n;
      }
      size_t expect = 0;
      while (expect < recs.size() &&
             recs[expect].loc.record_offset + format::RecordSpan(recs[expect].path.size(), recs[expect].value.size()) <=
                 cut) {
        ++expect;
      }
      ASSERT_EQ(n, expect) << "cut at " << cut << " of " << size << ": " << ScanStopName(sc.stop_reason()) << " "
                           << sc.stop_status().ToString();
      if (cut == size) {
        EXPECT_EQ(sc.stop_reason(), sealed ? ScanStop::kFooter : ScanStop::kEndOfFile);
      } else if (n < recs.size()) {
        EXPECT_EQ(sc.stop_offset(), recs[n].loc.record_offset);
        const bool at_boundary = cut == recs[n].loc.record_offset;
        if (!at_boundary) {
          EXPECT_EQ(sc.stop_reason(), ScanStop::kTruncated) << sc.stop_status().ToString();
        }
        for (size_t k = 0; k < n; k += 7) ExpectValue(f->get(), recs[k].loc, recs[k].value);
      }
    }
  }
}

// A load into never-touched memory (a fresh pool block) is verified from kernel copies, one into a block
// user code touched is verified in place, with the kernel copy refused in place too, and with
// --verify-copy inplace (SetVerifyCopy) in place, the buffer touched from then on: every way hands out
// the right bytes, and a flipped byte is Corruption with no bytes handed out.
TEST_F(SegmentTest, LoadsVerifyUntouchedBuffersThroughKernelCopies) {
  auto w = NewWriter({});
  Appended a{"/v", MakeValue(2359296, 5), 5, {}};
  a.loc = *w->Append(a.path, a.stamp, {a.value});
  Appended big{"/big", MakeValue(9u << 20, 6), 6, {}};
  big.loc = *w->Append(big.path, big.stamp, {big.value});
  ASSERT_TRUE(w->Close().ok());
  const std::string path = SegPath(a.loc.segment);
  OpenOptions o;
  o.direct = true;
  auto f = Env::Posix()->Open(path, o);
  if (!f.ok()) f = Env::Posix()->Open(path, OpenOptions{});  // a file system without O_DIRECT
  ASSERT_TRUE(f.ok());
  const uint64_t piece = 4u << 20;
  auto load = [&](bool whole) -> Result<std::shared_ptr<ValueBuffer>> {
    return whole ? LoadWholeValue(f->get(), a.loc) : ReadValueRange(f->get(), big.loc, piece, piece);
  };
  // 0: untouched, 1: touched block, 2: untouched, kernel refuses, 3: untouched, verify copy in place
  for (int mode = 0; mode < 4; ++mode) {
    for (bool whole : {true, false}) {
      for (bool corrupt : {false, true}) {
        const Appended& r = whole ? a : big;
        const uint64_t flip = whole ? 1234567 : piece + 3 * kChecksumBlock + 17;
        if (corrupt) FlipByte(path, r.loc.value_offset + flip);
        BufferPool::Default().Trim(0);  // the next block is a fresh mapping: untouched
        if (mode == 1) {
          // A touched free block of the class the load asks for.
          const size_t need = whole ? a.loc.value_offset - a.loc.record_offset + a.value.size() : piece;
          auto b = BufferPool::Default().Get(need);
          b.touched = true;
          BufferPool::Default().Put(b);
        }
        SetKernelCopyDisabledForTest(mode == 2);
        if (mode == 3) SetVerifyCopy(VerifyCopyChoice{VerifyCopyMode::kInPlace, /*kernel=*/false});
        const KernelCopyStats before = GetKernelCopyStats();
        auto v = load(whole);
        const KernelCopyStats after = GetKernelCopyStats();
        SetKernelCopyDisabledForTest(false);
        SetVerifyCopy(VerifyCopyChoice{});
        if (corrupt) {
          EXPECT_TRUE(v.status().IsCorruption()) << mode << whole << v.status().ToString();
          FlipByte(path, r.loc.value_offset + flip);  // restore
        } else {
          ASSERT_TRUE(v.ok()) << v.status().ToString();
          EXPECT_TRUE((*v)->view() == (whole ? std::string_view(a.value) : std::string_view(big.value).substr(piece, piece)));
          EXPECT_EQ((*v)->touched(), mode == 1 || mode == 3);  // a kernel-verified buffer stays untouched
        }
        if (mode == 0 && !corrupt) {
          EXPECT_GE(after.bytes - before.bytes, whole ? a.value.size() : piece);
        }
        if (mode != 0) {
          EXPECT_EQ(after.bytes, before.bytes);
        }
        if (mode == 2) {
          EXPECT_GT(after.fallbacks, before.fallbacks);
        }
        if (mode == 3) {
          EXPECT_EQ(after.fallbacks, before.fallbacks);
        }
      }
    }
  }
}

TEST_F(SegmentTest, FlippedValueByteIsCorruption) {
  auto w = NewWriter({});
  auto recs = WriteMixed(w.get(), 12, 300);
  Appended big{"/big", MakeValue(2359296, 9), 9, {}};
  big.loc = *w->Append(big.path, big.stamp, {big.value});
  recs.push_back(big);
  ASSERT_TRUE(w->Close().ok());
  const std::string path = SegPath(recs[0].loc.segment);
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 40; ++trial) {
    const Appended& a = recs[rng() % recs.size()];
    if (a.value.empty()) continue;
    const uint64_t pos = rng() % a.value.size();
    FlipByte(path, a.loc.value_offset + pos);
    auto f = Env::Posix()->Open(path, OpenOptions{});
    std::string buf(a.value.size(), '\0');
    size_t got = 123;
    Status s = ReadValue(f->get(), a.loc, 0, buf.size(), buf.data(), &got);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_EQ(got, 0u);
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
    // The zero-copy loaders hand out no bytes either.
    auto whole = LoadWholeValue(f->get(), a.loc);
    EXPECT_TRUE(whole.status().IsCorruption()) << whole.status().ToString();
    auto range = ReadValueRange(f->get(), a.loc, pos, 1);
    EXPECT_TRUE(range.status().IsCorruption()) << range.status().ToString();
    // Just the damaged byte's block.
    const uint64_t bstart = pos / kChecksumBlock * kChecksumBlock;
    s = ReadValue(f->get(), a.loc, pos, 1, buf.data(), &got);
    EXPECT_TRUE(s.IsCorruption());
    EXPECT_NE(s.message().find(std::to_string(a.loc.value_offset + bstart)), std::string::npos) << s.message();
    // Other blocks of the value still read.
    if (a.value.size() > bstart + kChecksumBlock) {
      s = ReadValue(f->get(), a.loc, bstart + kChecksumBlock, 10, buf.data(), &got);
      EXPECT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(got, std::min<size_t>(10, a.value.size() - bstart - kChecksumBlock));
    }
    // fsck-style scan stops at this record with kBadValue.
    SegmentScanner sc(f->get(), std::filesystem::file_size(path), ScanOptions{.verify_values = true});
    ASSERT_TRUE(sc.Init().ok());
    ScannedRecord r;
    while (sc.Next(&r)) {
    }
    EXPECT_EQ(sc.stop_reason(), ScanStop::kBadValue);
    EXPECT_EQ(sc.stop_offset(), a.loc.record_offset);
    FlipByte(path, a.loc.value_offset + pos);  // restore
    ExpectValue(f->get(), a.loc, a.value);
  }
}

TEST_F(SegmentTest, FlippedHeaderPathOrTableStopsScan) {
  auto w = NewWriter({});
  auto recs = WriteMixed(w.get(), 10, 400);
  ASSERT_TRUE(w->Close().ok());
  const std::string path = SegPath(recs[0].loc.segment);
  const uint64_t size = std::filesystem::file_size(path);
  std::mt19937_64 rng(43);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t victim = rng() % recs.size();
    const Appended& a = recs[victim];
    const uint64_t meta = format::RecordMetaSize(a.path.size(), a.value.size());
    const uint64_t pos = rng() % meta;  // header (incl. magic), path or checksum table
    FlipByte(path, a.loc.record_offset + pos);
    auto f = Env::Posix()->Open(path, OpenOptions{});
    SegmentScanner sc(f->get(), size);
    ASSERT_TRUE(sc.Init().ok());
    ScannedRecord r;
    size_t n = 0;
    while (sc.Next(&r)) ++n;
    EXPECT_EQ(n, victim);
    EXPECT_EQ(sc.stop_offset(), a.loc.record_offset);
    if (pos < 4) {
      EXPECT_EQ(sc.stop_reason(), ScanStop::kBadMagic);
    } else if (pos < format::kRecordHeaderSize) {
      EXPECT_EQ(sc.stop_reason(), ScanStop::kBadHeader);
    } else {
      EXPECT_EQ(sc.stop_reason(), ScanStop::kBadMeta);
    }
    std::string buf(16, '\0');
    size_t got = 0;
    EXPECT_TRUE(ReadValue(f->get(), a.loc, 0, buf.size(), buf.data(), &got).IsCorruption());
    EXPECT_TRUE(ReadRecordMeta(f->get(), a.loc.record_offset).status().IsCorruption());
    FlipByte(path, a.loc.record_offset + pos);  // restore
  }
  // A damaged segment header: Init fails (nothing in the file can be trusted).
  FlipByte(path, 20);
  auto f = Env::Posix()->Open(path, OpenOptions{});
  SegmentScanner sc(f->get(), size);
  EXPECT_TRUE(sc.Init().IsCorruption());
}

// ------------------------------------------------------------------------------------------------
TEST_F(SegmentTest, ConcurrentAppendsFrom8ThreadsAreReadableAndDistinct) {
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "direct" : "buffered");
    std::filesystem::remove_all(seg_dir_);
    SegmentWriterOptions o;
    o.direct_io = direct;
    o.segment_size = 8 << 20;  // several seals under concurrency
    auto w = NewWriter(o);
    constexpr int kThreads = 8, kPerThread = 40;
    std::vector<std::vector<Appended>> per(kThreads);
    std::vector<std::thread> ts;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        for (int i = 0; i < kPerThread; ++i) {
          Appended a{"/t" + std::to_string(t) + "/" + std::to_string(i), MakeValue(rng() % 300000, t * 1000 + i),
                     static_cast<uint64_t>(t * 1000 + i), {}};
          auto loc = w->Append(a.path, a.stamp, {a.value});
          if (!loc.ok()) {
            failures++;
            continue;
          }
          a.loc = *loc;
          if (i % 10 == 0 && !w->Sync().ok()) failures++;
          per[t].push_back(std::move(a));
        }
      });
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(failures.load(), 0);
    ASSERT_TRUE(w->Sync().ok());
    std::set<std::pair<uint64_t, uint64_t>> seen;
    std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> ranges;
    std::map<uint64_t, std::unique_ptr<BackingFile>> files;
    for (auto& v : per) {
      for (auto& a : v) {
        EXPECT_TRUE(seen.insert({a.loc.segment.seq, a.loc.record_offset}).second);
        ranges[a.loc.segment.seq].push_back(
            {a.loc.record_offset, a.loc.record_offset + format::RecordSpan(a.path.size(), a.value.size())});
        auto& f = files[a.loc.segment.seq];
        if (!f) f = OpenSeg(a.loc.segment, direct);
        ExpectValue(f.get(), a.loc, a.value);
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kPerThread));
    for (auto& [seq, rs] : ranges) {
      std::sort(rs.begin(), rs.end());
      for (size_t i = 1; i < rs.size(); ++i) EXPECT_LE(rs[i - 1].second, rs[i].first);
    }
    auto st = w->GetStats();
    EXPECT_EQ(st.records, static_cast<uint64_t>(kThreads * kPerThread));
    EXPECT_GT(st.segments_sealed, 0u);
    EXPECT_LE(st.batches, st.records);
    ASSERT_TRUE(w->Close().ok());
  }
}

// ------------------------------------------------------------------------------------------------
TEST_F(SegmentTest, SyncMakesRecordsSurviveACrash) {
  FaultInjectionEnv env(Env::Posix());
  SegmentWriterOptions o;
  o.segment_size = 1 << 20;
  auto w = NewWriter(o, &env);
  std::vector<Appended> synced, unsynced;
  for (int i = 0; i < 6; ++i) {  // crosses a seal
    Appended a{"/s" + std::to_string(i), MakeValue(200000, i), 1, {}};
    a.loc = *w->Append(a.path, a.stamp, {a.value});
    synced.push_back(a);
  }
  ASSERT_TRUE(w->Sync().ok());
  for (int i = 0; i < 3; ++i) {
    Appended a{"/u" + std::to_string(i), MakeValue(1000, 100 + i), 1, {}};
    a.loc = *w->Append(a.path, a.stamp, {a.value});
    unsynced.push_back(a);
  }
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  w.reset();
  for (const auto& a : synced) {
    auto f = OpenSeg(a.loc.segment);
    ExpectValue(f.get(), a.loc, a.value);
  }
  // The unsynced tail is gone: scanning the last segment ends right after the synced records.
  const SegmentId last = synced.back().loc.segment;
  auto f = OpenSeg(last);
  SegmentScanner sc(f.get(), FileSize(last));
  ASSERT_TRUE(sc.Init().ok());
  ScannedRecord r;
  size_t n = 0;
  while (sc.Next(&r)) ++n;
  size_t expect = 0;
  for (const auto& a : synced) expect += a.loc.segment == last;
  EXPECT_EQ(n, expect);
  EXPECT_EQ(sc.stop_reason(), ScanStop::kEndOfFile);
}

TEST_F(SegmentTest, WriteErrorFailsTheBatchButNotTheWriter) {
  FaultInjectionEnv env(Env::Posix());
  auto w = NewWriter({}, &env);
  auto a = w->Append("/a", 1, {"first"});
  ASSERT_TRUE(a.ok());
  int id = env.ShortWriteNth(1, 4096, ENOSPC, ".kseg");
  auto b = w->Append("/b", 2, {MakeValue(100000, 2)});
  EXPECT_TRUE(b.status().IsNoSpace()) << b.status().ToString();
  EXPECT_EQ(FileSize(a->segment), a->record_offset + kAlignment * 2);  // what landed of b is truncated
  env.RemoveFault(id);
  const std::string cval = MakeValue(5000, 3);
  auto c = w->Append("/c", 3, {cval});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->record_offset, a->record_offset + kAlignment * 2);  // reuses b's space
  ASSERT_TRUE(w->Sync().ok());
  auto f = OpenSeg(c->segment);
  ExpectValue(f.get(), *c, cval);
  SegmentScanner sc(f.get(), FileSize(c->segment));
  ASSERT_TRUE(sc.Init().ok());
  ScannedRecord r;
  std::vector<std::string> paths;
  while (sc.Next(&r)) paths.push_back(r.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"/a", "/c"}));
}

// Issue #6: a failed write longer than what follows it must not leave bytes past the seal's trailer (the
// file would read as unsealed, with a torn tail from the footer on), even when the truncation right after
// the failure failed too (the seal truncates again).
TEST_F(SegmentTest, SealEndsTheFileAfterAFailedLongerWrite) {
  for (bool truncate_fails_once : {false, true}) {
    SCOPED_TRACE(truncate_fails_once);
    std::filesystem::remove_all(root_);
    FaultInjectionEnv env(Env::Posix());
    SegmentWriterOptions o;
    o.seal_on_close = true;
    auto w = NewWriter(o, &env);
    auto a = w->Append("/a", 1, {MakeValue(20000, 1)});
    ASSERT_TRUE(a.ok());
    int id = env.ShortWriteNth(1, 60000, EIO, ".kseg");
    int tid = truncate_fails_once
                  ? env.AddFault(FaultRule{.ops = kFaultTruncate, .path_substr = ".kseg", .err = EIO, .times = 1})
                  : -1;
    EXPECT_FALSE(w->Append("/b", 2, {MakeValue(200000, 2)}).ok());
    const uint64_t a_end = a->record_offset + format::RecordSpan(2, 20000);
    EXPECT_EQ(FileSize(a->segment), truncate_fails_once ? a_end + 60000 : a_end);
    env.RemoveFault(id);
    if (tid >= 0) env.RemoveFault(tid);
    auto c = w->Append("/c", 3, {MakeValue(3000, 3)});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(w->Close().ok());
    auto f = OpenSeg(c->segment);
    auto footer = ReadFooter(f.get(), FileSize(c->segment));
    ASSERT_TRUE(footer.ok()) << footer.status().ToString();
    EXPECT_EQ(footer->trailer.record_count, 2u);
    EXPECT_EQ(footer->trailer.footer_offset, c->record_offset + format::RecordSpan(2, 3000));
  }
}

// Issue #16 part 2: Rotate seals the active segment early (the next record goes to a new one); it does
// nothing for a segment that is not the active one any more, or one without a record.
TEST_F(SegmentTest, RotateSealsTheActiveSegmentAndTheNextRecordStartsANewOne) {
  std::vector<SealedSegment> seals;
  SegmentWriterOptions o;
  o.on_seal = [&](const SealedSegment& s) { seals.push_back(s); };
  o.on_retire = [&](const SealedSegment&) { ADD_FAILURE() << "retired"; };
  auto w = NewWriter(o);
  bool rotated = true;
  ASSERT_TRUE(w->Rotate(w->ActiveSegment(), &rotated).ok());  // nothing written yet
  EXPECT_FALSE(rotated);
  const std::string va = MakeValue(10000, 1);
  auto a = w->Append("/a", 1, {va});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(w->Rotate(a->segment, &rotated).ok());
  EXPECT_TRUE(rotated);
  ASSERT_EQ(seals.size(), 1u);
  EXPECT_EQ(seals[0].id, a->segment);
  EXPECT_EQ(seals[0].record_count, 1u);
  EXPECT_EQ(seals[0].file_size, FileSize(a->segment));
  EXPECT_EQ(w->TakeSealed().size(), 1u);
  ASSERT_TRUE(w->Rotate(a->segment, &rotated).ok());  // sealed already: nothing to do
  EXPECT_FALSE(rotated);
  auto b = w->Append("/b", 2, {"bee"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->segment.seq, a->segment.seq + 1);
  ASSERT_TRUE(w->Rotate(a->segment, &rotated).ok());  // not the active one
  EXPECT_FALSE(rotated);
  EXPECT_EQ(seals.size(), 1u);
  ASSERT_TRUE(w->Sync().ok());
  auto f = OpenSeg(a->segment);
  auto footer = ReadFooter(f.get(), FileSize(a->segment));
  ASSERT_TRUE(footer.ok()) << footer.status().ToString();
  EXPECT_EQ(footer->trailer.record_count, 1u);
  ExpectValue(f.get(), *a, va);
}

// A seal that cannot be written (the export is full) retires the segment unsealed: reported through
// on_retire with its records, never appended again, its bytes kept readable; Rotate still succeeds.
TEST_F(SegmentTest, ASealThatCannotBeWrittenRetiresTheSegment) {
  FaultInjectionEnv env(Env::Posix());
  std::vector<SealedSegment> retired;
  SegmentWriterOptions o;
  o.on_seal = [&](const SealedSegment&) { ADD_FAILURE() << "sealed"; };
  o.on_retire = [&](const SealedSegment& s) { retired.push_back(s); };
  auto w = NewWriter(o, &env);
  const std::string va = MakeValue(50000, 1);
  auto a = w->Append("/a", 1, {va});
  ASSERT_TRUE(a.ok());
  int id = env.ShortWriteNth(1, 4096, ENOSPC, ".kseg");  // the footer write: part lands, then ENOSPC
  bool rotated = false;
  ASSERT_TRUE(w->Rotate(a->segment, &rotated).ok());
  EXPECT_TRUE(rotated);
  env.RemoveFault(id);
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0].id, a->segment);
  EXPECT_EQ(retired[0].record_count, 1u);
  const uint64_t end = a->record_offset + format::RecordSpan(2, va.size());
  EXPECT_EQ(FileSize(a->segment), end);  // what landed of the footer is truncated away
  EXPECT_EQ(retired[0].file_size, end);
  EXPECT_TRUE(w->TakeSealed().empty());  // no SEAL entry for it
  EXPECT_EQ(w->GetStats().segments_retired, 1u);
  auto b = w->Append("/b", 2, {"bee"});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->segment.seq, a->segment.seq + 1);
  ASSERT_TRUE(w->Sync().ok());
  auto f = OpenSeg(a->segment);
  ExpectValue(f.get(), *a, va);
}

TEST_F(SegmentTest, SyncFailureBreaksTheWriter) {
  FaultInjectionEnv env(Env::Posix());
  auto w = NewWriter({}, &env);
  ASSERT_TRUE(w->Append("/a", 1, {"x"}).ok());
  env.FailSyncs(EIO, ".kseg");
  EXPECT_FALSE(w->Sync().ok());
  env.ClearFaults();
  EXPECT_FALSE(w->Sync().ok());
  EXPECT_FALSE(w->Append("/b", 2, {"y"}).ok());
}

// MayBeLost (docs/design.md §7): after a failed fdatasync, records written since the segment's last successful
// sync are lost, those it covered are not; a segment whose name no SyncDir covered is lost entirely.
TEST_F(SegmentTest, MayBeLostMarksExactlyTheRecordsPastTheLastSuccessfulSync) {
  FaultInjectionEnv env(Env::Posix());
  auto w = NewWriter({}, &env);
  auto a = w->Append("/a", 1, {"x"});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(w->MayBeLost(*a));  // written, not synced yet (nor is the segment's name)
  ASSERT_TRUE(w->Sync().ok());
  EXPECT_FALSE(w->MayBeLost(*a));
  auto b = w->Append("/b", 2, {"y"});
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->segment, a->segment);
  env.FailSyncs(EIO, ".kseg");
  EXPECT_FALSE(w->Sync().ok());
  env.ClearFaults();
  EXPECT_FALSE(w->Sync().ok());  // broken: a later fdatasync cannot vouch for the dropped pages
  EXPECT_FALSE(w->MayBeLost(*a));
  EXPECT_TRUE(w->MayBeLost(*b));
  Location other = *a;
  other.segment.generation += 1;  // not this writer's
  EXPECT_FALSE(w->MayBeLost(other));
  // A new segment whose directory sync fails: its records are lost even though its fdatasync worked.
  auto w2 = NewWriter({}, &env, 8);
  auto c = w2->Append("/c", 3, {"z"});
  ASSERT_TRUE(c.ok());
  FaultRule dir;
  dir.ops = kFaultSyncDir;
  dir.err = EIO;
  env.AddFault(dir);
  EXPECT_FALSE(w2->Sync().ok());
  EXPECT_TRUE(w2->MayBeLost(*c));
  env.ClearFaults();
  EXPECT_TRUE(w2->Sync().ok());  // a failed directory sync does not break the writer: it is retried
  EXPECT_FALSE(w2->MayBeLost(*c));
}

// Every checksum on the export (block checksums, footers, headers) is XXH3-64 (format.md). Hash64 uses
// libxxhash's runtime-dispatched XXH3 (AVX2 / AVX-512 where the CPU has them); these values were computed
// with the library's baseline XXH3_64bits, so a dispatch (or library) that hashed differently would make
// every existing segment unreadable and fails here. Sizes cover XXH3's short, mid and long (striped)
// paths and the 64 KiB checksum block.
TEST(FormatHashTest, Hash64IsXxh3OfTheSpecificationOnEveryPath) {
  std::vector<unsigned char> b(200000);
  uint32_t x = 1;
  for (auto& c : b) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<unsigned char>(x >> 24);
  }
  const std::pair<size_t, uint64_t> want[] = {
      {0, 0x2d06800538d394c2ull},      {1, 0x429e81bc6744101cull},      {3, 0x32dbb5c7774cc94full},
      {17, 0xb5d6b9c1898bd9d6ull},     {128, 0xc59e505a97d029e0ull},    {240, 0x967597e635f3c527ull},
      {241, 0xd6afac6f8fa85b01ull},    {1000, 0xce7f62c0bb515a3cull},   {4096, 0x436f521f6688c5edull},
      {65536, 0xb25b6166131fa281ull},  {65537, 0x49235290459c83ccull},  {131072, 0x4176cdb08f2fe75eull},
      {199999, 0x763715e2de0314acull},
  };
  for (const auto& [n, h] : want) EXPECT_EQ(format::Hash64(b.data(), n), h) << n << " bytes";
}

}  // namespace
}  // namespace kvfs
